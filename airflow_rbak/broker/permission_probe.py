"""Whether a user may read, write or configure in a vhost, asked of the broker without changing anything.

Only an administrator may read a user's permission patterns through the
management API, so the connection test asks the broker itself: each AMQP
method below checks the user's permission on a name *before* it looks the
name up, and the probe name never exists. The broker answers ``403
ACCESS_REFUSED`` when the permission is missing and ``404 NOT_FOUND`` (or,
for a delete, an empty ``delete-ok``) when it is granted, and nothing is
created, consumed, published or deleted either way. A pattern narrower than
``.*`` may refuse the probe name and still allow the queues a run uses: a
capture or publish checks its own queue when it starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pika
import pika.adapters.blocking_connection
import pika.exceptions

from airflow_rbak.broker.errors import BrokerError, BrokerUnreachableError

#: RabbitMQ's reply codes for a missing permission and a missing object.
ACCESS_REFUSED, NOT_FOUND = 403, 404

#: Each permission and the AMQP method that checks it first: consuming needs read on the queue, publishing write
#: on the exchange, deleting configure on the queue.
PROBES: dict[str, Callable[[pika.adapters.blocking_connection.BlockingChannel, str], object]] = {
    "read": lambda channel, name: channel.basic_consume(name, lambda *_: None),
    "write": lambda channel, name: channel.basic_publish(name, "", b""),
    "configure": lambda channel, name: channel.queue_delete(name, if_unused=True, if_empty=True),
}


def probe_name() -> str:
    """A queue or exchange name nobody uses (a random suffix)."""
    return f"rbak-permission-probe-{uuid.uuid4().hex[:12]}"


def permitted(conn: pika.BlockingConnection, permission: str) -> bool:
    """Whether the connection's user has ``permission`` (read, write, configure) on a name in the connection's vhost.

    Raises :class:`BrokerError` when the broker answers something a probe does not expect.
    """
    channel = conn.channel()
    if permission == "write":
        channel.confirm_delivery()  # the publish then waits for the broker's answer
    try:
        PROBES[permission](channel, probe_name())
    except pika.exceptions.ChannelClosedByBroker as exc:
        if exc.reply_code == ACCESS_REFUSED:
            return False
        if exc.reply_code == NOT_FOUND:
            return True
        raise BrokerError(f"the {permission} probe got {exc.reply_code} {exc.reply_text!r:.120}") from None
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerUnreachableError(f"the connection failed during the {permission} probe ({type(exc).__name__})") from None
    if channel.is_open:
        channel.close()
    return True
