"""The captures' AMQP connections (``pika_connection.py``: typed header tables, wider reads): typed errors, closed quietly."""

from __future__ import annotations

import pika
import pika.exceptions

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerAuthError, BrokerUnreachableError, tls_failure
from airflow_rbak.broker.pika_connection import blocking_connection

#: What a broker going away looks like to a consumer; a capture turns it into ``CaptureInterruptedError``.
CONNECTION_ERRORS = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.AMQPChannelError,
    pika.exceptions.StreamLostError,
    OSError,
)


def open_connection(connection: RabbitMQConnection, vhost: str) -> pika.BlockingConnection:
    """A blocking AMQP connection with typed errors (never showing the password), to the first of the connection's
    nodes that takes it."""
    try:
        return blocking_connection(connection.pika_parameters_all(vhost))
    except pika.exceptions.ProbableAuthenticationError:
        raise BrokerAuthError(f"AMQP login refused for user {connection.username!r} on vhost {vhost!r}") from None
    except pika.exceptions.ProbableAccessDeniedError:
        raise BrokerAuthError(f"user {connection.username!r} may not access vhost {vhost!r}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        tls = tls_failure(exc, connection.addresses)
        if tls is not None:
            raise tls from None
        raise BrokerUnreachableError(
            f"cannot connect to RabbitMQ at {connection.addresses} (vhost {vhost!r}): "
            f"{type(exc).__name__}; check host, amqp_port and that the broker is running"
        ) from None


def close_quietly(conn: pika.BlockingConnection) -> None:
    """Close if still open; a connection that is already gone is not an error here."""
    try:
        if conn.is_open:
            conn.close()
    except Exception:  # noqa: BLE001 - the connection may already be gone
        pass
