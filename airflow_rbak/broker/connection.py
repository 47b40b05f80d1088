"""One connection definition for AMQP, the Management HTTP API and the stream protocol.

Frozen and validated at construction; its ``repr`` never shows the password.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from airflow_rbak.exceptions import ConfigurationError

DEFAULT_AMQP_PORT = 5672
DEFAULT_AMQPS_PORT = 5671
DEFAULT_MANAGEMENT_PORT = 15672
DEFAULT_STREAM_PORT = 5552
#: How a text flag (a URL query or an Airflow connection extra) says true; anything else is false.
TRUE_TEXTS = ("1", "true", "yes", "on")


def _port(value: Any, name: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a port number, got {value!r}") from None
    if not 0 < port < 65536:
        raise ConfigurationError(f"{name} must be 1-65535, got {port}")
    return port


def _number(value: Any, name: str, kind: type) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigurationError(f"{name} must be a number, got {value!r:.40}") from None


@dataclass(frozen=True)
class RabbitMQConnection:
    """Where and how to reach one RabbitMQ node (or a load balancer in front of a cluster)."""

    host: str = "127.0.0.1"
    amqp_port: int = DEFAULT_AMQP_PORT
    management_port: int = DEFAULT_MANAGEMENT_PORT
    stream_port: int = DEFAULT_STREAM_PORT
    username: str = "guest"
    password: str = field(default="guest", repr=False)
    #: Full management base URL (``https://mq.example:443/rabbitmq``); overrides host/port/TLS for HTTP.
    management_url: str | None = None
    tls: bool = False
    tls_verify: bool = True
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    heartbeat: int = 60
    timeout: float = 10.0

    def __post_init__(self) -> None:
        if not self.host or any(c in self.host for c in "/@ "):
            raise ConfigurationError(f"host must be a host name or address, got {self.host!r}")
        for name in ("amqp_port", "management_port", "stream_port"):
            object.__setattr__(self, name, _port(getattr(self, name), name))
        if not self.username:
            raise ConfigurationError("username must not be empty")
        if self.management_url and not self.management_url.startswith(("http://", "https://")):
            raise ConfigurationError("management_url must start with http:// or https://")
        if self.tls and self.management_url and self.management_url.startswith("http://"):
            # basic auth would cross the network in clear while the user believes the connection is encrypted
            raise ConfigurationError("tls is on but management_url is http://; use https:// (or turn tls off)")
        if self.timeout <= 0 or self.heartbeat < 0:
            raise ConfigurationError("timeout must be > 0 and heartbeat >= 0")
        if (self.cert_file is None) != (self.key_file is None):
            raise ConfigurationError("cert_file and key_file go together: give both or neither")

    def __repr__(self) -> str:
        return (
            f"RabbitMQConnection(host={self.host!r}, amqp_port={self.amqp_port}, "
            f"management={self.management_base_url!r}, stream_port={self.stream_port}, "
            f"username={self.username!r}, password='***', tls={self.tls})"
        )

    __str__ = __repr__

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> RabbitMQConnection:
        """Build from ``amqp[s]://user:pass@host:port/?management_port=15672&stream_port=5552``.

        Query options: ``management_port``, ``management_url``, ``stream_port``,
        ``tls_verify``, ``ca_file``, ``cert_file``, ``key_file``, ``heartbeat``, ``timeout``.
        """
        parts = urlsplit(url)
        if parts.scheme not in ("amqp", "amqps"):
            raise ConfigurationError("connection URL must start with amqp:// or amqps://")
        tls = parts.scheme == "amqps"
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        try:
            port = parts.port
        except ValueError:  # the message names only the port, but say it without quoting the URL
            raise ConfigurationError("the port of the connection URL is not a number from 1 to 65535") from None
        kwargs: dict[str, Any] = {
            "host": parts.hostname or "127.0.0.1",
            "amqp_port": port or (DEFAULT_AMQPS_PORT if tls else DEFAULT_AMQP_PORT),
            "tls": tls,
        }
        if parts.username is not None:
            kwargs["username"] = unquote(parts.username)
        if parts.password is not None:
            kwargs["password"] = unquote(parts.password)
        for name in ("management_port", "stream_port", "heartbeat"):
            if name in query:
                kwargs[name] = _port(query[name], name) if name != "heartbeat" else _number(query[name], name, int)
        for name in ("management_url", "ca_file", "cert_file", "key_file"):
            if name in query:
                kwargs[name] = query[name]
        if "tls_verify" in query:
            kwargs["tls_verify"] = query["tls_verify"].lower() in TRUE_TEXTS
        if "timeout" in query:
            kwargs["timeout"] = _number(query["timeout"], "timeout", float)
        kwargs.update(overrides)
        return cls(**kwargs)

    @property
    def management_base_url(self) -> str:
        """Base URL of the management API, without ``/api`` and without a trailing slash."""
        if self.management_url:
            return self.management_url.rstrip("/")
        scheme = "https" if self.tls else "http"
        return f"{scheme}://{self.host}:{self.management_port}"

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for AMQP and stream connections, or None without TLS."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ca_file)
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def pika_parameters(self, vhost: str = "/") -> Any:
        """pika ConnectionParameters for ``vhost`` (imported lazily: pika is only needed for AMQP)."""
        import pika

        context = self.ssl_context()
        return pika.ConnectionParameters(
            host=self.host,
            port=self.amqp_port,
            virtual_host=vhost,
            credentials=pika.PlainCredentials(self.username, self.password),
            heartbeat=self.heartbeat,
            blocked_connection_timeout=max(self.timeout * 6, 60),
            socket_timeout=self.timeout,
            stack_timeout=self.timeout * 3,
            connection_attempts=1,
            ssl_options=pika.SSLOptions(context, self.host) if context else None,
            client_properties={"connection_name": "airflow-rbak"},
        )
