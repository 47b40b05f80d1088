"""Definitions export against the real broker (must-show 5): the stored file is the API's document, byte for byte."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import orjson
import pytest

from airflow_rbak.broker.definitions import export_definitions
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.compression import decompress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.storage import open_storage

from .helpers import declare

pytestmark = pytest.mark.broker


@pytest.fixture
def topology(broker, vhost):
    """An exchange, a bound queue, a policy and a user of this test's own."""
    v = quote(vhost, safe="")
    broker.api("PUT", f"exchanges/{v}/orders.x", json={"type": "topic", "durable": True})
    declare(broker.connection, vhost, "orders", "quorum", **{"x-delivery-limit": 5})
    broker.api("POST", f"bindings/{v}/e/orders.x/q/orders", json={"routing_key": "order.#"})
    broker.api("PUT", f"policies/{v}/ttl", json={"pattern": "^orders$", "definition": {"max-length": 1000}, "apply-to": "queues"})
    user = f"u-{uuid.uuid4().hex[:8]}"
    broker.api("PUT", f"users/{user}", json={"password": "pw-" + user, "tags": ""})
    yield user
    broker.api("DELETE", f"users/{user}")


def export_while_stable(client: ManagementClient, storage, backup_id: str, compression: Compression):
    """Export, and the API's document just before and after; retried when another client changed the broker meanwhile."""
    for _ in range(5):
        before = client.definitions_raw()
        counts = export_definitions(client, storage, backup_id, compression, include_users=True)
        after = client.definitions_raw()
        if before == after:
            return counts, after
    pytest.fail("the broker's definitions kept changing during the export")


@pytest.mark.parametrize("compression", list(Compression), ids=lambda c: c.name.lower())
def test_definitions_file_is_the_api_document_and_counts_match(broker, vhost, topology, compression):
    storage = open_storage("memory://")

    with ManagementClient(broker.connection) as client:
        counts, api_bytes = export_while_stable(client, storage, "d1", compression)

    # Then the decompressed file is exactly what GET /api/definitions returned
    assert counts.key == f"d1/definitions/definitions.json{compression.extension}"
    stored = decompress(storage.get(counts.key), compression, 64 * 1024 * 1024, counts.key)
    assert stored == api_bytes
    # and the manifest's counts are those of the document
    doc = orjson.loads(api_bytes)
    assert (counts.vhost_count, counts.queue_count, counts.exchange_count, counts.user_count, counts.size_bytes) == (
        len(doc["vhosts"]), len(doc["queues"]), len(doc["exchanges"]), len(doc["users"]), len(api_bytes))
    # and it holds this test's topology
    assert {"name": "orders", "vhost": vhost} in [{"name": q["name"], "vhost": q["vhost"]} for q in doc["queues"]]
    assert any(b["vhost"] == vhost and b["source"] == "orders.x" and b["routing_key"] == "order.#" for b in doc["bindings"])
    assert any(p["vhost"] == vhost and p["name"] == "ttl" for p in doc["policies"])
    assert topology in [u["name"] for u in doc["users"]]
