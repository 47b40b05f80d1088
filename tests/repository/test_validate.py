"""Validation finds every defect, names the object and says why; a clean backup passes."""

from __future__ import annotations

import orjson

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.storage import open_storage
from tests.repository.sample import build_sample_backup


def test_a_clean_backup_passes_quick_and_deep_validation(location):
    storage = open_storage(location)
    manifest = build_sample_backup(storage)

    quick = validate_backup(storage, "sample-1")
    deep = validate_backup(storage, "sample-1", deep=True)

    assert quick.valid and deep.valid, (quick.defects, deep.defects)
    assert deep.segments_checked == manifest.total_segments > 3
    assert deep.records_checked == manifest.total_messages == 282


def test_one_changed_byte_in_a_segment_is_reported_with_its_key_and_reason(location):
    storage = open_storage(location)
    manifest = build_sample_backup(storage)
    victim = manifest.queues[0].segments[1].key
    data = bytearray(storage.get(victim))
    data[50] ^= 0xFF
    storage.put(victim, bytes(data))

    report = validate_backup(storage, "sample-1", deep=True)

    assert not report.valid
    assert {d.key for d in report.defects} == {victim}
    reasons = " | ".join(d.reason for d in report.defects)
    assert "SHA-256" in reasons and "CRC-32 mismatch" in reasons


def test_one_changed_checksum_in_the_manifest_is_reported_for_that_segment(location):
    storage = open_storage(location)
    build_sample_backup(storage)
    raw = orjson.loads(storage.get(manifest_key("sample-1")))
    segment = raw["queues"][1]["segments"][0]
    segment["checksum"] = "0" * 64
    storage.put(manifest_key("sample-1"), orjson.dumps(raw))

    report = validate_backup(storage, "sample-1", deep=True)

    assert [(d.key, d.reason.split(",")[0]) for d in report.defects] == [
        (segment["key"], f"SHA-256 is {storage_sha(storage, segment['key'])}")
    ]
    assert report.defects[0].reason.endswith("manifest says " + "0" * 64)


def test_quick_validation_reports_missing_and_resized_segments(location):
    storage = open_storage(location)
    manifest = build_sample_backup(storage)
    missing = manifest.queues[0].segments[0].key
    resized = manifest.queues[2].segments[0].key
    storage.delete(missing)
    storage.put(resized, storage.get(resized) + b"x")

    report = validate_backup(storage, "sample-1")

    assert [str(d) for d in report.defects] == [
        f"{missing}: missing",
        f"{resized}: size is {manifest.queues[2].segments[0].size_bytes + 1} bytes, manifest says "
        f"{manifest.queues[2].segments[0].size_bytes}",
    ]


def test_an_incomplete_backup_and_inconsistent_totals_are_defects(location):
    storage = open_storage(location)
    build_sample_backup(storage)
    raw = orjson.loads(storage.get(manifest_key("sample-1")))
    raw["completed_at"] = None
    raw["total_messages"] += 1
    storage.put(manifest_key("sample-1"), orjson.dumps(raw))

    reasons = [d.reason for d in validate_backup(storage, "sample-1").defects]

    assert reasons == ["backup did not complete (completed_at is null)", "total_messages is 283, the queues add up to 282"]


def test_a_missing_manifest_is_one_defect_not_a_crash(location):
    storage = open_storage(location)

    report = validate_backup(storage, "nothing-here", deep=True)

    assert [d.key for d in report.defects] == ["nothing-here/manifest.json"]


def storage_sha(storage, key):
    import hashlib

    return hashlib.sha256(storage.get(key)).hexdigest()
