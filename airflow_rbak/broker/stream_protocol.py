"""The few stream-protocol (port 5552) calls AMQP cannot make: the stream's tail and stored consumer offsets, and
which node to read a stream from.

Uses ``rstream`` (optional dependency) through its low-level client; all
calls are synchronous wrappers around one short-lived asyncio connection.

In a cluster a stream has members (its leader and replicas) on some nodes only, and a node without one refuses to
deliver it (the stream protocol answers ``StreamNotAvailable``, AMQP closes the channel with 406 "does not have a
replica on the local node"; measured on 3.10.8). The stream protocol's metadata advertises each member's host and
stream port, and every node advertises its own when a client connects, so :func:`member_connection` finds which of the
connection's nodes hosts a member and puts it first, for both protocols. Stored offsets are answered by any node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import (
    BrokerAuthError,
    BrokerError,
    BrokerUnreachableError,
    StreamLeaderPendingError,
    StreamMemberUnreachableError,
    tls_failure,
)
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


#: An advertised endpoint: the host and stream port a node gives clients (``stream.advertised_host``/``_port``).
Endpoint = tuple[str, int]


def _advertised(client: Any) -> Endpoint | None:
    props = getattr(client, "server_properties", None) or {}
    host, port = props.get("advertised_host"), props.get("advertised_port")
    try:
        return (str(host), int(port)) if host and port is not None else None
    except (TypeError, ValueError):
        return None


def member_connection(connection: RabbitMQConnection, vhost: str, stream: str) -> RabbitMQConnection:
    """``connection`` starting at the first of its nodes that hosts a member of ``stream``, the others after it.

    The first node that answers gives the stream's members (its metadata) and its own advertised endpoint; when it is
    not a member, each other node is connected to for its own. Refuses (:class:`StreamMemberUnreachableError`) when
    no listed node hosts one, naming the members; :class:`StreamLeaderPendingError` while the stream elects a leader.
    """

    async def metadata(client: Any, rstream: Any) -> tuple[set[Endpoint], Endpoint | None]:
        try:
            leader, replicas = await client.query_leader_and_replicas(stream)
        except rstream.exceptions.LeaderNotAvailable:
            raise StreamLeaderPendingError(
                f"stream {stream!r} in vhost {vhost!r} has no leader right now (an election is under way after a node "
                "was lost); re-run") from None
        return {(str(b.host), int(b.port)) for b in (leader, *replicas)}, _advertised(client)

    async def own(client: Any, rstream: Any) -> Endpoint | None:
        return _advertised(client)

    nodes = connection.each_node()
    members: set[Endpoint] | None = None
    unreachable: list[str] = []
    for node in nodes:
        try:
            if members is None:
                members, endpoint = _run_on(node, vhost, metadata)
            else:
                endpoint = _run_on(node, vhost, own)
        except StreamLeaderPendingError:
            raise
        except BrokerUnreachableError:
            if members is None and node is nodes[-1]:
                raise  # no node answered: the last one's error, as every stream call gives it
            unreachable.append(f"{node.host}:{node.stream_port}")
            continue
        if endpoint in members:
            return connection.starting_at(node.first_node)
    assert members is not None
    listed = ", ".join(f"{h}:{p}" for h, p in sorted(members))
    raise StreamMemberUnreachableError(
        f"stream {stream!r} in vhost {vhost!r} has its members (leader and replicas) on {listed}, and none of the "
        f"connection's nodes ({', '.join(f'{n.host}:{n.stream_port}' for n in nodes)}) is one of them"
        + (f" ({', '.join(unreachable)} did not answer)" if unreachable else "")
        + ": a stream is read from a node that holds a member; list one of them in the connection's hosts")


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

    return _run(member_connection(connection, vhost, stream), vhost, work)


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
