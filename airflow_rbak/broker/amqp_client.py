"""The captures' AMQP connections: opened with typed errors and wider socket reads, closed quietly."""

from __future__ import annotations

import pika
import pika.exceptions

from airflow_rbak.broker import amqp_types
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerAuthError, BrokerUnreachableError, tls_failure

#: What a broker going away looks like to a consumer; a capture turns it into ``CaptureInterruptedError``.
CONNECTION_ERRORS = (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError, pika.exceptions.StreamLostError, OSError)
#: Bytes per socket read. pika reads 4 KiB (three or four 1 KiB messages) and re-slices its frame buffer once per
#: frame, so far larger reads cost more than they save; 16 KiB took 6-11% less client CPU per message (measured).
SOCKET_READ_BYTES = 16384


def open_connection(connection: RabbitMQConnection, vhost: str) -> pika.BlockingConnection:
    """A blocking AMQP connection with typed errors (never showing the password)."""
    amqp_types.install()
    try:
        return _widen_reads(pika.BlockingConnection(connection.pika_parameters(vhost)))
    except pika.exceptions.ProbableAuthenticationError:
        raise BrokerAuthError(f"AMQP login refused for user {connection.username!r} on vhost {vhost!r}") from None
    except pika.exceptions.ProbableAccessDeniedError:
        raise BrokerAuthError(f"user {connection.username!r} may not access vhost {vhost!r}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        tls = tls_failure(exc, f"{connection.host}:{connection.amqp_port}")
        if tls is not None:
            raise tls from None
        raise BrokerUnreachableError(
            f"cannot connect to RabbitMQ at {connection.host}:{connection.amqp_port} (vhost {vhost!r}): "
            f"{type(exc).__name__}; check host, amqp_port and that the broker is running"
        ) from None


def _widen_reads(conn: pika.BlockingConnection) -> pika.BlockingConnection:
    """Read :data:`SOCKET_READ_BYTES` at a time on this connection. pika has no setting for it, so this sets its
    transport's class constant on the instance, and leaves a pika whose internals differ as it is."""
    transport = getattr(getattr(conn, "_impl", None), "_transport", None)
    if isinstance(getattr(transport, "_MAX_RECV_BYTES", None), int):
        transport._MAX_RECV_BYTES = SOCKET_READ_BYTES
    return conn


def close_quietly(conn: pika.BlockingConnection) -> None:
    """Close if still open; a connection that is already gone is not an error here."""
    try:
        if conn.is_open:
            conn.close()
    except Exception:  # noqa: BLE001 - the connection may already be gone
        pass
