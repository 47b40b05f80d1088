"""RabbitMQHook: an Airflow ``rabbitmq`` connection as a :class:`RabbitMQConnection`.

The hook only translates settings: every AMQP, management and stream call
lives in :mod:`airflow_rbak.broker`, which knows nothing of Airflow. Host,
port (AMQP), login, password and schema (the default vhost) are the standard
fields; the rest are extras, with or without the ``extra__rabbitmq__``
prefix older Airflow UIs write: ``management_port``, ``stream_port``,
``management_url``, ``tls``, ``tls_verify``, ``ca_file``, ``cert_file``,
``key_file``, ``heartbeat``, ``timeout``.

Airflow 3.2+ reads connection forms from the provider info
(:data:`CONN_FIELDS`, :data:`UI_FIELD_BEHAVIOUR`); Airflow 2 calls
:meth:`RabbitMQHook.get_connection_form_widgets` and
:meth:`RabbitMQHook.get_ui_field_behaviour`, built from the same tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow.sdk import BaseHook

from airflow_rbak.broker.connection import DEFAULT_MANAGEMENT_PORT, DEFAULT_STREAM_PORT, RabbitMQConnection
from airflow_rbak.exceptions import ConfigurationError

_PREFIX = "extra__rabbitmq__"
_TRUE = ("1", "true", "yes", "on")
_INT_EXTRAS = ("management_port", "stream_port", "heartbeat")
_STR_EXTRAS = ("management_url", "ca_file", "cert_file", "key_file")
_BOOL_EXTRAS = ("tls", "tls_verify")

#: Extra fields of the connection form, in provider-info ``conn-fields`` form.
CONN_FIELDS: dict[str, dict[str, Any]] = {
    "management_port": {
        "label": "Management API port",
        "schema": {"type": ["integer", "null"], "default": DEFAULT_MANAGEMENT_PORT},
    },
    "stream_port": {"label": "Stream protocol port", "schema": {"type": ["integer", "null"], "default": DEFAULT_STREAM_PORT}},
    "management_url": {
        "label": "Management API URL",
        "description": "Overrides host and management port, e.g. https://mq.example/rabbitmq",
        "schema": {"type": ["string", "null"]},
    },
    "tls": {"label": "Use TLS (amqps and https)", "schema": {"type": ["boolean", "null"], "default": False}},
    "tls_verify": {"label": "Verify TLS certificates", "schema": {"type": ["boolean", "null"], "default": True}},
    "ca_file": {"label": "CA certificate file", "schema": {"type": ["string", "null"]}},
    "cert_file": {"label": "Client certificate file", "schema": {"type": ["string", "null"]}},
    "key_file": {"label": "Client key file", "schema": {"type": ["string", "null"]}},
    "timeout": {"label": "Timeout (seconds)", "schema": {"type": ["number", "null"], "default": 10}},
}

#: Relabels and placeholders of the standard fields, in provider-info ``ui-field-behaviour`` form.
UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": [],
    "relabeling": {"port": "AMQP port", "login": "Username", "schema": "Default vhost"},
    "placeholders": {
        "host": "rabbitmq.example.com",
        "port": "5672 (5671 with TLS)",
        "login": "backup",
        "password": "the user's password",
        "schema": "/",
        "extra": '{"management_port": 15672, "stream_port": 5552, "tls": false}',
        "management_port": str(DEFAULT_MANAGEMENT_PORT),
        "stream_port": str(DEFAULT_STREAM_PORT),
        "ca_file": "/etc/ssl/certs/rabbitmq-ca.pem",
    },
}


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
            kwargs[name] = extra[name] if isinstance(extra[name], bool) else str(extra[name]).lower() in _TRUE
    if "timeout" in extra:
        try:
            kwargs["timeout"] = float(extra["timeout"])
        except (TypeError, ValueError):
            raise ConfigurationError(f"extra 'timeout' must be a number of seconds, got {extra['timeout']!r:.40}") from None
    if kwargs.get("tls") and not port:
        kwargs["amqp_port"] = 5671
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

    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Widgets of the extra fields for Airflow 2's connection form (Airflow 3.2+ reads :data:`CONN_FIELDS`)."""
        from wtforms import BooleanField, IntegerField, StringField
        from wtforms.validators import NumberRange, Optional

        widget_kinds = {"integer": IntegerField, "boolean": BooleanField}
        widgets: dict[str, Any] = {}
        for name, spec in CONN_FIELDS.items():
            kind = spec["schema"]["type"][0]
            field_class = widget_kinds.get(kind, StringField)
            validators = [Optional(), NumberRange(min=1, max=65535)] if kind == "integer" else [Optional()]
            widgets[name] = field_class(spec["label"], description=spec.get("description"), validators=validators,
                                        default=spec["schema"].get("default"))
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Relabels and placeholders of the standard fields (Airflow's snake_case keys)."""
        return {
            "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    def test_connection(self) -> tuple[bool, str]:
        """Airflow's "Test" button: every endpoint a backup uses and the user's rights; the answer names each failure.

        See :func:`airflow_rbak.broker.preflight.check_broker`: management API, tags, permissions on the
        connection's vhost, AMQP, stream port.
        """
        from airflow_rbak.broker.preflight import check_broker

        try:
            connection = self.get_conn()
        except ConfigurationError as exc:
            return False, str(exc)
        checks = check_broker(connection, self.vhost)
        failed = [c for c in checks if not c.ok]
        if failed:
            return False, "; ".join(c.line() for c in failed) + ". Passed: " + (
                ", ".join(c.name for c in checks if c.ok) or "nothing")
        return True, "; ".join(c.line() for c in checks)


def connection_type_info() -> dict[str, Any]:
    """This hook's entry for the provider info's ``connection-types`` (declarative form fields)."""
    return {
        "connection-type": RabbitMQHook.conn_type,
        "hook-class-name": f"{RabbitMQHook.__module__}.{RabbitMQHook.__name__}",
        "conn-fields": CONN_FIELDS,
        "ui-field-behaviour": UI_FIELD_BEHAVIOUR,
    }
