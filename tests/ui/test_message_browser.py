"""A queue's messages page by page, without Airflow: positions, the read budget, and what a page shows of a body."""

from __future__ import annotations

import itertools

import pytest

from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.storage import open_storage
from airflow_rbak.ui.message_browser import MessagePageError, Position, body_preview, filter_of, message_page
from airflow_rbak.ui.messages_page import messages_page
from airflow_rbak.ui.pages import Links
from tests.ui.message_samples import SCRIPT, TOTAL, build_message_backups


@pytest.fixture(scope="module")
def backup():
    url = "memory://ui-message-browser"
    build_message_backups(url)
    storage = open_storage(url)
    from airflow_rbak.repository.manifest_store import ManifestStore

    return storage, ManifestStore(storage).load("messages-1")


def test_a_page_that_runs_out_of_time_stops_and_says_where_the_next_one_starts(backup):
    storage, manifest = backup
    ticks = itertools.count(step=1.0)  # every reading of the clock is a second later: the budget ends after one record
    rare = MessageFilter.from_params({"message_id": "other-45"})

    first = message_page(storage, manifest, 0, message_filter=rare, clock=lambda: next(ticks))
    rest = message_page(storage, manifest, 0, message_filter=rare, start=Position.parse(first["next"]))

    assert (first["messages"], first["scanned"], first["next"]) == ([], 1, "1.1")
    assert [m["number"] for m in rest["messages"]] == [TOTAL] and rest["next"] is None


def test_a_viewers_page_holds_no_body_and_every_byte_of_a_shown_one_is_escaped(backup):
    storage, manifest = backup
    hidden = message_page(storage, manifest, 0, limit=100, show_bodies=False)
    shown = message_page(storage, manifest, 0, limit=100, show_bodies=True)
    extra = {"backup_id": "messages-1", "location": {"id": "loc", "url": "memory://x"}, "filters": [("header", "<i>")]}
    html = messages_page({**shown, **extra, "bodies_refused": None}, Links("", "/rbak"))

    assert all(m["body"] is None for m in hidden["messages"]) and hidden["messages"][0]["body_bytes"] > 0
    assert SCRIPT not in html.encode() and "&lt;script&gt;window.rbakInjected=1&lt;/script&gt;" in html
    assert "<i>" not in html and 'value="&lt;i&gt;"' in html


def test_a_body_is_previewed_by_what_it_is_and_bounded():
    assert body_preview(b'{"a": [1, 2]}', None)["preview"] == '{\n  "a": [\n    1,\n    2\n  ]\n}'
    assert body_preview(b"\x1b[31mred\n", "text/plain") == {"kind": "text", "preview": "\\x1b[31mred\n", "more_bytes": 0}
    assert body_preview(("a" + "é" * 2000).encode(), None)["more_bytes"] == 4001 - 2047  # a cut character is not shown
    assert body_preview(b"\xff\xfe" * 600, None)["more_bytes"] == 1200 - 512


def test_a_position_or_filter_that_cannot_be_used_is_refused_by_name():
    with pytest.raises(MessagePageError, match="at: "):
        Position.parse("1.x")
    with pytest.raises(ValueError, match="header: "):
        filter_of([("header", "no-equals-sign")])
    assert filter_of([("routing_key", " ")]) is None


def test_a_segment_whose_bytes_the_manifest_does_not_vouch_for_is_named_and_the_others_are_shown(tmp_path):
    from airflow_rbak.repository.manifest_store import ManifestStore

    url = tmp_path.as_uri()
    build_message_backups(url)
    storage = open_storage(url)
    manifest = ManifestStore(storage).load("messages-1")
    first, second = manifest.queues[0].stored_order()[:2]
    planted = bytearray(storage.get(first.key))
    planted[-40] ^= 0xFF  # a writer's bytes changed afterwards: the SHA-256 no longer agrees
    storage.put(first.key, bytes(planted))

    page = message_page(storage, manifest, 0, limit=100, show_bodies=True)
    html = messages_page({**page, "backup_id": "messages-1", "location": {"id": "loc", "url": url}, "filters": [],
                          "bodies_refused": None}, Links("", "/rbak"))

    assert page["damaged"] == [{"segment": first.key, "reason": page["damaged"][0]["reason"],
                                "records": first.record_count}]
    assert "SHA-256" in page["damaged"][0]["reason"]
    assert page["messages"][0]["number"] == first.record_count + 1  # the next segment's first record, numbered in place
    assert page["messages"][0]["position"] == f"{second.sequence}.0"
    assert f"Segment {first.key} could not be read" in html


def test_pages_number_records_in_sequence_order_however_the_manifest_lists_segments(tmp_path):
    from airflow_rbak.repository.manifest_store import ManifestStore

    url = tmp_path.as_uri()
    build_message_backups(url)
    storage = open_storage(url)
    store = ManifestStore(storage)
    manifest = store.load("messages-1")
    in_order = message_page(storage, manifest, 0, limit=100)["messages"]
    manifest.queues[0].segments.reverse()
    store.save(manifest)

    listed_backwards = message_page(storage, store.load("messages-1"), 0, limit=100)["messages"]

    assert len(manifest.queues[0].segments) > 1
    assert [(m["number"], m["position"], m["properties"]) for m in listed_backwards] == [
        (m["number"], m["position"], m["properties"]) for m in in_order]


def test_a_segment_damaged_inside_shows_what_came_before_and_counts_only_the_rest(tmp_path):
    from airflow_rbak.codec.records import encode_record
    from airflow_rbak.codec.segment import iter_records
    from airflow_rbak.repository.manifest_store import ManifestStore
    from tests.repository.test_message_search import reseal

    url = tmp_path.as_uri()
    build_message_backups(url)
    storage = open_storage(url)
    manifest = ManifestStore(storage).load("messages-1")
    first = manifest.queues[0].stored_order()[0]
    before = message_page(storage, manifest, 0, limit=3)["messages"]
    kept = [encode_record(r) for r in iter_records(storage.get(first.key), first.key)]
    reseal(storage, manifest, first, [*kept[:3], b'{"not": "a record"}', *kept[:2]])  # six records, the 4th bad

    page = message_page(storage, manifest, 0, limit=100)

    assert [m["properties"] for m in page["messages"][:3]] == [m["properties"] for m in before]
    assert page["damaged"][0]["segment"] == first.key and page["damaged"][0]["records"] == 6 - 3
    assert "record 3" in page["damaged"][0]["reason"]
