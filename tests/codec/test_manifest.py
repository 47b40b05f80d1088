"""The definitions summary: one count of an export, written by the backup and the rebuild, checked by validate."""

from __future__ import annotations

from airflow_rbak.codec.manifest import DefinitionsBackup, count_definitions


def test_counts_each_section_and_treats_absent_or_null_as_empty():
    doc = {"vhosts": [{}, {}], "queues": [{}] * 3, "exchanges": None, "bindings": [{}], "rabbit_version": "3.10.8"}

    assert count_definitions(doc) == {"vhost_count": 2, "queue_count": 3, "exchange_count": 0, "user_count": 0}
    assert set(count_definitions(["not", "an", "object"]).values()) == {0}


def test_the_manifest_entry_carries_the_counts_and_round_trips():
    entry = DefinitionsBackup.of("b1/definitions/definitions.json.zst", {"users": [{}], "queues": [{}]}, 120)

    assert (entry.vhost_count, entry.queue_count, entry.exchange_count, entry.user_count, entry.size_bytes) == (0, 1, 0, 1, 120)
    assert DefinitionsBackup.from_json(entry.to_json()) == entry
