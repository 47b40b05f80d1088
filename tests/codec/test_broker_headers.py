"""The table of headers a broker adds on delivery: what each queue type drops, and the guide that shows it."""

from __future__ import annotations

from pathlib import Path

from airflow_rbak.codec.broker_headers import ALL_BROKER_HEADER_NAMES, BROKER_HEADERS, broker_headers


def test_each_queue_type_drops_the_headers_its_broker_adds():
    assert broker_headers("quorum") == {"x-delivery-count", "x-acquired-count"}
    assert broker_headers("stream") == {"x-stream-offset"}
    assert broker_headers("classic") == frozenset()
    assert ALL_BROKER_HEADER_NAMES == broker_headers("quorum") | broker_headers("stream")


def test_the_operations_guide_shows_the_table():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = doc.split("\n## What capture does to the source broker\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip() for line in section.splitlines() if line.strip().startswith("| `x-")]
    assert rows == [f"| `{h.name}` | {h.queue_type} | {h.since} | {h.meaning} |" for h in BROKER_HEADERS]
