"""The journal on the broker: enable and disable keep the vhost's own fields, and status says what it sees."""

from __future__ import annotations

from urllib.parse import quote

from airflow_rbak.broker import journal
from tests.broker.conftest import vhost_of_its_own


def _fields(broker, name):
    info = broker.api("GET", f"vhosts/{quote(name, safe='')}").json()
    meta = info.get("metadata") or {}
    return {"description": meta.get("description", info.get("description")), "tags": sorted(meta.get("tags", info.get("tags")) or []),
            "default_queue_type": meta.get("default_queue_type", info.get("default_queue_type")),
            "tracing": info["tracing"]}


def test_enable_and_disable_keep_the_vhosts_description_tags_and_default_queue_type(broker):
    with vhost_of_its_own(broker, "jf", create=False) as name:
        broker.api("PUT", f"vhosts/{quote(name, safe='')}",
                   json={"description": "orders of the shop", "tags": "prod,eu", "default_queue_type": "quorum"})
        broker.api("PUT", f"permissions/{quote(name, safe='')}/guest", json={"configure": ".*", "write": ".*", "read": ".*"})
        before = _fields(broker, name)
        assert before["tracing"] is False

        state = journal.enable(broker.connection, name, max_messages=1000)

        assert _fields(broker, name) == {**before, "tracing": True}
        assert state.tracing_everywhere and state.queue_exists and state.bound and state.max_length == 1000
        assert not state.full and state.uncovered == []
        queue = broker.api("GET", f"queues/{quote(name, safe='')}/rbak.journal").json()
        assert queue["type"] == "quorum" and queue["durable"] is True
        assert queue["arguments"] == {"x-queue-type": "quorum", "x-max-length": 1000, "x-overflow": "drop-head"}
        exchange = broker.api("GET", f"exchanges/{quote(name, safe='')}/rbak.journal.clock").json()
        assert exchange["type"] == "fanout" and exchange["durable"] is True

        journal.disable(broker.connection, name)

        assert _fields(broker, name) == {**before, "tracing": False}
        after = journal.status(broker.connection, name)
        assert after.queue_exists and not after.bound and after.depth >= 1  # the enable's clock mark stays for an archive
        assert {n.state for n in after.nodes} == {"off"}


def test_status_names_a_node_it_cannot_reach_and_a_full_journal(broker, vhost):
    from dataclasses import replace

    from airflow_rbak.broker.connection import BrokerAddress

    journal.enable(broker.connection, vhost, max_messages=1)  # the enable's clock mark fills it
    nowhere = BrokerAddress("127.0.0.1", 1, 1, 1)
    state = journal.status(replace(broker.connection, more_nodes=(nowhere,)), vhost)

    assert [n.state for n in state.nodes] == ["on", "unreachable"]
    assert state.full and state.depth == 1


def test_a_stream_protocol_publisher_is_named_as_not_covered(broker, vhost):
    import asyncio

    import rstream

    from tests.broker.helpers import declare

    declare(broker.connection, vhost, "s", "stream")
    journal.enable(broker.connection, vhost)
    c = broker.connection

    async def publishing() -> list[str]:
        producer = rstream.Producer(c.host, c.stream_port, vhost=vhost, username=c.username, password=c.password)
        await producer.start()
        try:
            await producer.send("s", b"not traced")
            deadline = asyncio.get_running_loop().time() + 60
            while True:  # the management API lists a publisher once its stats are in (every few seconds)
                found = (await asyncio.to_thread(journal.status, c, vhost)).uncovered
                if found or asyncio.get_running_loop().time() > deadline:
                    return found
                await asyncio.sleep(1)
        finally:
            await producer.close()

    uncovered = asyncio.run(publishing())

    assert [u for u in uncovered if u.startswith("stream publisher")] and all(" on s " in u for u in uncovered
                                                                                if u.startswith("stream publisher"))
