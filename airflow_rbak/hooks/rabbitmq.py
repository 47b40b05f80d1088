"""RabbitMQHook: an Airflow ``rabbitmq`` connection as a :class:`RabbitMQConnection`.

The hook only translates settings: every AMQP, management and stream call
lives in :mod:`airflow_rbak.broker`, which knows nothing of Airflow. Host,
port (AMQP), login, password and schema (the default vhost) are the standard
fields; the rest are extras, with or without the ``extra__rabbitmq__``
prefix older Airflow UIs write: ``management_port``, ``stream_port``,
``management_url``, ``tls``, ``tls_verify``, ``ca_file``, ``cert_file``,
``key_file``, ``heartbeat``, ``timeout``, and ``hosts``: a cluster's nodes, tried in order after ``host`` on
connect (``"h2:5672,h3:5672"``, or a JSON list of such entries or of objects with ``host`` and per-node ports; see
``broker.connection.nodes_from``).

The connection form's fields are declared once, in the provider info (:data:`airflow_rbak.provider.CONN_FIELDS`,
``UI_FIELD_BEHAVIOUR``), which Airflow reads from 3.2 on; on 3.0 and 3.1 the extras are typed as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.broker.connection import (
    DEFAULT_AMQP_PORT,
    DEFAULT_AMQPS_PORT,
    DEFAULT_MANAGEMENT_PORT,
    DEFAULT_STREAM_PORT,
    TRUE_TEXTS,
    RabbitMQConnection,
    nodes_from,
)
from airflow_rbak.exceptions import ConfigurationError

_PREFIX = "extra__rabbitmq__"
_INT_EXTRAS = ("management_port", "stream_port", "heartbeat")
_STR_EXTRAS = ("management_url", "ca_file", "cert_file", "key_file")
_BOOL_EXTRAS = ("tls", "tls_verify")

def connection_from_airflow(
    host: str | None, port: int | None, login: str | None, password: str | None, extra: Mapping[str, Any]
) -> RabbitMQConnection:
    """Build validated connection settings from an Airflow connection's fields (pure: no Airflow needed)."""
    extra = {k.removeprefix(_PREFIX): v for k, v in extra.items() if v not in (None, "")}
    kwargs: dict[str, Any] = {"host": host or "127.0.0.1"}
    if port:
        kwargs["amqp_port"] = int(port)
    if login:
        kwargs["username"] = login
    if password is not None:
        kwargs["password"] = password
    for name in _INT_EXTRAS:
        if name in extra:
            try:
                kwargs[name] = int(extra[name])
            except (TypeError, ValueError):
                raise ConfigurationError(f"extra {name!r} must be a number, got {extra[name]!r:.40}") from None
    for name in _STR_EXTRAS:
        if name in extra:
            kwargs[name] = str(extra[name])
    for name in _BOOL_EXTRAS:
        if name in extra:
            kwargs[name] = extra[name] if isinstance(extra[name], bool) else str(extra[name]).lower() in TRUE_TEXTS
    if "timeout" in extra:
        try:
            kwargs["timeout"] = float(extra["timeout"])
        except (TypeError, ValueError):
            raise ConfigurationError(f"extra 'timeout' must be a number of seconds, got {extra['timeout']!r:.40}") from None
    if kwargs.get("tls") and not port:
        kwargs["amqp_port"] = DEFAULT_AMQPS_PORT
    if "hosts" in extra:
        kwargs["more_nodes"] = nodes_from(extra["hosts"], amqp_port=kwargs.get("amqp_port", DEFAULT_AMQP_PORT),
                                          management_port=kwargs.get("management_port", DEFAULT_MANAGEMENT_PORT),
                                          stream_port=kwargs.get("stream_port", DEFAULT_STREAM_PORT))
    return RabbitMQConnection(**kwargs)


class RabbitMQHook(BaseHook):
    """Reads a ``rabbitmq`` Airflow connection; :meth:`get_conn` returns its :class:`RabbitMQConnection`.

    The connection's schema field is the default vhost (:attr:`vhost`); the
    password never reaches a log line or an error message.
    """

    conn_name_attr = "rabbitmq_conn_id"
    default_conn_name = "rabbitmq_default"
    conn_type = "rabbitmq"
    hook_name = "RabbitMQ"

    def __init__(self, rabbitmq_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.rabbitmq_conn_id = rabbitmq_conn_id
        self.vhost = "/"

    def get_conn(self) -> RabbitMQConnection:
        """The connection's settings, validated; raises ConfigurationError naming the connection id."""
        conn = self.get_connection(self.rabbitmq_conn_id)
        try:
            settings = connection_from_airflow(conn.host, conn.port, conn.login, conn.password, conn.extra_dejson)
        except (ConfigurationError, ValueError, TypeError) as exc:
            message = str(exc).replace(conn.password, "***") if conn.password else str(exc)
            raise ConfigurationError(
                f"Airflow connection {self.rabbitmq_conn_id!r} is not a usable rabbitmq connection: {message}"
            ) from None
        self.vhost = conn.schema or "/"
        self.log.info("Using RabbitMQ connection %r: %s (default vhost %r)", self.rabbitmq_conn_id, settings, self.vhost)
        return settings

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: every endpoint a run uses, and what the user may do on the connection's vhost.

        See :func:`airflow_rbak.broker.preflight.check_broker`. It fails when an endpoint does not answer or
        nothing useful is possible (neither backing up nor restoring messages); a missing right is named either way.
        """
        from airflow_rbak.broker.preflight import check_broker

        try:
            connection = self.get_conn()
        except ConfigurationError as exc:
            return False, str(exc)
        access = check_broker(connection, self.vhost)
        return access.usable, access.message()
