"""The few stream-protocol (port 5552) calls AMQP cannot make: the stream's tail and stored consumer offsets.

Uses ``rstream`` (optional dependency) through its low-level client; all
calls are synchronous wrappers around one short-lived asyncio connection.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerAuthError, BrokerError, BrokerUnreachableError, tls_failure
from airflow_rbak.exceptions import ConfigurationError


def _require_rstream() -> Any:
    try:
        import rstream
    except ImportError:  # pragma: no cover - depends on the installation
        raise ConfigurationError("stream capture needs the 'rstream' package: pip install rstream") from None
    return rstream


async def _with_client(connection: RabbitMQConnection, vhost: str, work: Any) -> Any:
    rstream = _require_rstream()
    consumer = rstream.Consumer(
        host=connection.host, port=connection.stream_port, vhost=vhost, username=connection.username,
        password=connection.password, ssl_context=connection.ssl_context(), connection_name="airflow-rbak",
    )
    try:
        await asyncio.wait_for(consumer.start(), connection.timeout)
        client = await consumer.default_client
        return await work(client, rstream)
    finally:
        try:
            await asyncio.wait_for(consumer.close(), connection.timeout)
        except Exception:  # noqa: BLE001 - closing a failed connection
            pass


#: The stream protocol's answers that mean "not this user": its login, its vhost, or its permission on the stream.
_REFUSALS = {"AuthenticationFailure": "login refused", "SASLAuthenticationFailureLoopback": "login refused",
             "VirtualHostAccessFailure": "may not access the vhost", "AccessRefused": "lacks the permission"}


def _run(connection: RabbitMQConnection, vhost: str, work: Any) -> Any:
    """``work`` on the first of the connection's nodes whose stream port answers (every call here may be repeated:
    reads, and a store of the same offset); the last node's error when none does."""
    *others, last = connection.each_node()
    for node in others:
        try:
            return _run_on(node, vhost, work)
        except BrokerUnreachableError:
            continue
    return _run_on(last, vhost, work)


def _run_on(connection: RabbitMQConnection, vhost: str, work: Any) -> Any:
    rstream = _require_rstream()
    try:
        return asyncio.run(_with_client(connection, vhost, work))
    except rstream.ServerError as exc:
        name = type(exc).__name__
        where = f"stream port {connection.host}:{connection.stream_port}, vhost {vhost!r}"
        if name in _REFUSALS:
            raise BrokerAuthError(f"{where}: user {connection.username!r} {_REFUSALS[name]} ({name})") from None
        raise BrokerError(f"{where}: the broker answered {name}") from None
    except (OSError, asyncio.TimeoutError) as exc:
        raise tls_failure(exc, f"{connection.host}:{connection.stream_port}") or BrokerUnreachableError(
            f"stream port {connection.host}:{connection.stream_port} unreachable ({type(exc).__name__}); "
            "check stream_port and that the rabbitmq_stream plugin is enabled"
        ) from None


def stream_tail(connection: RabbitMQConnection, vhost: str, stream: str, wait: float = 3.0) -> int | None:
    """The offset of the stream's last message now, or None when the stream is empty.

    Subscribing at ``last`` delivers the last chunk first; its header gives
    the first offset and the number of records, hence the exact tail.
    """

    async def work(client: Any, rstream: Any) -> int | None:
        from rstream import schema
        from rstream.constants import OffsetType

        found: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def on_deliver(frame: Any) -> None:
            if not found.done():
                found.set_result(frame.chunk_first_offset + frame.num_records - 1)

        sub = 200  # rstream routes Deliver frames by the handler's name, which must be the subscription id
        client.add_handler(schema.Deliver, on_deliver, name=str(sub))
        await client.run_queue_listener_task(sub, on_deliver)
        await client.subscribe(
            stream, subscription_id=sub, offset_spec=schema.OffsetSpec.from_params(OffsetType.LAST, None), initial_credit=1
        )
        try:
            return await asyncio.wait_for(found, wait)
        except asyncio.TimeoutError:
            return None
        finally:
            client.remove_handler(schema.Deliver, name=str(sub))
            await client.unsubscribe(sub)
            await client.stop_queue_listener_task(sub)

    return _run(connection, vhost, work)


def query_consumer_offsets(connection: RabbitMQConnection, vhost: str, stream: str, references: Iterable[str]) -> dict[str, int]:
    """Stored offsets of named consumers (``store_offset`` references); names without one are left out."""
    names = sorted(set(references))
    if not names:
        return {}

    async def work(client: Any, rstream: Any) -> dict[str, int]:
        found: dict[str, int] = {}
        for name in names:
            try:
                found[name] = await client.query_offset(stream, name)
            except Exception:  # noqa: BLE001 - rstream raises ServerError when nothing is stored
                continue
        return found

    return _run(connection, vhost, work)


def store_consumer_offset(connection: RabbitMQConnection, vhost: str, stream: str, reference: str, offset: int,
                          wait: float = 30.0) -> None:
    """Store a named consumer's offset and return once the broker answers it (restore, tests).

    ``store_offset`` has no reply: the broker writes it to the stream later, and a query made at once can still
    miss it (measured on 3.10). So this asks until the stored value comes back, and fails after ``wait`` seconds.
    """

    async def work(client: Any, rstream: Any) -> None:
        await client.store_offset(stream, reference, offset)
        deadline = asyncio.get_running_loop().time() + wait
        while True:
            try:
                if await client.query_offset(stream, reference) == offset:
                    return
            except Exception:  # noqa: BLE001 - rstream raises ServerError while nothing is stored yet
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise BrokerError(f"stream {stream!r} in vhost {vhost!r} did not confirm the offset {offset} stored for "
                                  f"consumer {reference!r} within {wait:.0f} s")
            await asyncio.sleep(0.05)

    _run(connection, vhost, work)


def stream_handshake(connection: RabbitMQConnection, vhost: str) -> None:
    """Open and close a stream-protocol connection (TCP, TLS, login, vhost): a connection test's stream check."""

    async def work(client: Any, rstream: Any) -> None:
        return None

    _run(connection, vhost, work)
