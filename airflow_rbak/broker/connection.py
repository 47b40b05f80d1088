"""One connection definition for AMQP, the Management HTTP API and the stream protocol.

Frozen and validated at construction; its ``repr`` never shows the password.

A cluster's nodes: ``host`` and its ports name the first node; ``more_nodes`` the others, tried in order when the
ones before refuse or do not answer a connect (AMQP through pika's list of parameters, the management API and the
stream port by the clients in this package). Written as ``host[:amqp_port]`` entries (``nodes_from``): the URL's
``hosts`` query and the Airflow connection's ``hosts`` extra.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from airflow_rbak.exceptions import ConfigurationError

DEFAULT_AMQP_PORT = 5672
DEFAULT_AMQPS_PORT = 5671
DEFAULT_MANAGEMENT_PORT = 15672
DEFAULT_STREAM_PORT = 5552
#: How a text flag (a URL query or an Airflow connection extra) says true; anything else is false.
TRUE_TEXTS = ("1", "true", "yes", "on")
#: The name every connection of ours shows in the broker's lists (a restore's publisher adds who it is).
CONNECTION_NAME = "airflow-rbak"
#: At most this many nodes in a connection: a cluster is a few nodes, and every one may cost a connect timeout.
MAX_NODES = 16


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


def _host(value: Any) -> str:
    if not isinstance(value, str) or not value or any(c in value for c in "/@ ,"):
        raise ConfigurationError(f"host must be a host name or address, got {value!r:.80}")
    return value


@dataclass(frozen=True)
class BrokerAddress:
    """One node of a cluster: its host and the ports of its AMQP, management and stream listeners."""

    host: str
    amqp_port: int = DEFAULT_AMQP_PORT
    management_port: int = DEFAULT_MANAGEMENT_PORT
    stream_port: int = DEFAULT_STREAM_PORT

    def __post_init__(self) -> None:
        _host(self.host)
        for name in ("amqp_port", "management_port", "stream_port"):
            object.__setattr__(self, name, _port(getattr(self, name), name))

    def __str__(self) -> str:
        return f"{self.host}:{self.amqp_port}"


def nodes_from(value: Any, *, amqp_port: int, management_port: int, stream_port: int) -> tuple[BrokerAddress, ...]:
    """A cluster's nodes as a user writes them: ``"h1:5672,h2"`` or a list of such entries, or of objects with
    ``host`` and any of ``amqp_port``, ``management_port``, ``stream_port``; the ports not given are the connection's.

    ``[::1]:5672`` writes an IPv6 address with a port. Raises ConfigurationError naming the entry's position only."""
    if value is None or value == "":
        return ()
    entries: list[Any] = [e.strip() for e in value.split(",") if e.strip()] if isinstance(value, str) else value
    if not isinstance(entries, list | tuple) or len(entries) > MAX_NODES:
        raise ConfigurationError(f"hosts must be a list of at most {MAX_NODES} nodes ('host:port, ...')")
    found = []
    for index, entry in enumerate(entries):
        where = f"hosts entry {index + 1}"
        if isinstance(entry, Mapping):
            unknown = set(entry) - {"host", "amqp_port", "management_port", "stream_port"}
            if unknown:
                raise ConfigurationError(f"{where} has unknown keys {sorted(map(str, unknown))[:4]}")
            found.append(BrokerAddress(_host(entry.get("host")), entry.get("amqp_port", amqp_port),
                                       entry.get("management_port", management_port),
                                       entry.get("stream_port", stream_port)))
            continue
        if not isinstance(entry, str):
            raise ConfigurationError(f"{where} must be 'host[:port]' or an object with 'host'")
        host, port = _split_host_port(entry.strip(), where)
        found.append(BrokerAddress(host, port or amqp_port, management_port, stream_port))
    return tuple(found)


def _split_host_port(entry: str, where: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, bracket, rest = entry[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigurationError(f"{where} must be 'host[:port]' ('[address]:port' for IPv6)")
        return host, _port(rest[1:], f"{where}'s port") if rest else None
    if entry.count(":") > 1:  # a bare IPv6 address
        return entry, None
    host, colon, port = entry.partition(":")
    return host, _port(port, f"{where}'s port") if colon else None


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
    #: The cluster's other nodes, tried in this order after the first (``host``) on connect.
    more_nodes: tuple[BrokerAddress, ...] = ()

    def __post_init__(self) -> None:
        if not self.host or any(c in self.host for c in "/@ ,"):
            raise ConfigurationError(f"host must be a host name or address, got {self.host!r}")
        for name in ("amqp_port", "management_port", "stream_port"):
            object.__setattr__(self, name, _port(getattr(self, name), name))
        more = tuple(self.more_nodes)
        if len(more) >= MAX_NODES or not all(isinstance(n, BrokerAddress) for n in more):
            raise ConfigurationError(f"more_nodes must be at most {MAX_NODES - 1} BrokerAddress")
        first = self.first_node
        object.__setattr__(self, "more_nodes", tuple(dict.fromkeys(n for n in more if n != first)))
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
            f"username={self.username!r}, password='***', tls={self.tls}"
            + (f", more_nodes={[str(n) for n in self.more_nodes]}" if self.more_nodes else "") + ")"
        )

    __str__ = __repr__

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> RabbitMQConnection:
        """Build from ``amqp[s]://user:pass@host:port/?management_port=15672&stream_port=5552``.

        Query options: ``management_port``, ``management_url``, ``stream_port``,
        ``tls_verify``, ``ca_file``, ``cert_file``, ``key_file``, ``heartbeat``, ``timeout``, and ``hosts``: the
        cluster's other nodes, ``h2:5672,h3:5672`` (each with the URL's management and stream ports).
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
        if "hosts" in query:
            kwargs["more_nodes"] = nodes_from(query["hosts"], amqp_port=kwargs["amqp_port"],
                                              management_port=kwargs.get("management_port", DEFAULT_MANAGEMENT_PORT),
                                              stream_port=kwargs.get("stream_port", DEFAULT_STREAM_PORT))
        kwargs.update(overrides)
        return cls(**kwargs)

    @property
    def first_node(self) -> BrokerAddress:
        return BrokerAddress(self.host, self.amqp_port, self.management_port, self.stream_port)

    @property
    def nodes(self) -> tuple[BrokerAddress, ...]:
        """Every node this connection may reach, in the order a connect tries them."""
        return (self.first_node, *self.more_nodes)

    @property
    def addresses(self) -> str:
        """The nodes' AMQP addresses for a message: ``h1:5672, h2:5672``."""
        return ", ".join(map(str, self.nodes))

    def at(self, node: BrokerAddress) -> RabbitMQConnection:
        """This connection to ``node`` alone (same user, TLS and timeouts)."""
        return replace(self, host=node.host, amqp_port=node.amqp_port, management_port=node.management_port,
                       stream_port=node.stream_port, more_nodes=())

    def starting_at(self, node: BrokerAddress) -> RabbitMQConnection:
        """This connection with ``node`` first and the others after it, in their order (a stream's member first)."""
        return replace(self, host=node.host, amqp_port=node.amqp_port, management_port=node.management_port,
                       stream_port=node.stream_port, more_nodes=tuple(n for n in self.nodes if n != node))

    def each_node(self) -> list[RabbitMQConnection]:
        """This connection to each node alone, in order: for the clients that try the next node themselves."""
        return [self.at(node) for node in self.nodes]

    @property
    def management_base_urls(self) -> tuple[str, ...]:
        """The management API of each node, in order; a ``management_url`` (a load balancer's) is the only one."""
        if self.management_url:
            return (self.management_base_url,)
        return tuple(c.management_base_url for c in self.each_node())

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

    def pika_parameters_all(self, vhost: str = "/", name: str = CONNECTION_NAME) -> list[Any]:
        """pika ConnectionParameters of every node, in order: ``pika.BlockingConnection`` tries each in turn."""
        return [c.pika_parameters(vhost, name) for c in self.each_node()]

    def pika_parameters(self, vhost: str = "/", name: str = CONNECTION_NAME) -> Any:
        """pika ConnectionParameters of the first node for ``vhost`` (imported lazily: pika is only needed for AMQP);
        ``name`` is the connection's name in the broker's lists."""
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
            client_properties={"connection_name": name},
        )
