"""The verify job: every injected defect found and named, one result per segment, exit code 1."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.segments import verify as vf
from airflow_rbak.segments.jobs import verify_segments
from airflow_rbak.storage import open_storage
from tests.repository.sample import build_sample_backup
from tests.spark_jobs.conftest import submit
from tests.spark_jobs.local_spark import LocalSpark


def verify(url: str, *args: str) -> dict:
    argv = ["--storage-url", url, "--backup-id", "sample-1", *args]
    return json.loads(json.dumps(verify_segments.run(LocalSpark(), verify_segments.parse_args(argv)).to_json()))


def inject_defects(url: str) -> dict[str, str]:
    """Damage four segments of the sample backup, one way each; return key -> expected phrase."""
    storage = open_storage(url)
    manifest = ManifestStore(storage).load("sample-1")
    keys = [s.key for s in manifest.queue("/", "orders").segments]
    flip, cut, wrong, gone = keys[1], keys[3], keys[5], keys[7]
    data = bytearray(storage.get(flip))
    data[len(data) // 2] ^= 0x10
    storage.put(flip, bytes(data))
    storage.put(cut, storage.get(cut)[:-11])
    storage.delete(gone)
    for segment in manifest.queue("/", "orders").segments:
        if segment.key == wrong:
            segment.checksum = "0" * 64
    ManifestStore(storage).save(manifest)
    return {flip: "CRC-32 mismatch", cut: "size is", wrong: "SHA-256 is", gone: "missing"}


@pytest.fixture
def url(tmp_path) -> str:
    url = (tmp_path / "store").as_uri()
    build_sample_backup(open_storage(url))
    return url


def test_clean_backup_passes_with_one_result_per_segment(url):
    report = verify(url)
    manifest = ManifestStore(open_storage(url)).load("sample-1")
    assert report["ok"] and report["summary"]["segments_failed"] == 0
    assert sorted(r["key"] for r in report["details"]["segments"]) == sorted(s.key for q in manifest.queues for s in q.segments)
    assert report["summary"]["records_checked"] == manifest.total_messages


def test_each_injected_defect_is_found_and_named(url):
    expected = inject_defects(url)
    report = verify(url)
    failed = {r["key"]: r["defects"] for r in report["details"]["segments"] if not r["ok"]}
    assert not report["ok"] and set(failed) == set(expected)
    for key, phrase in expected.items():
        assert any(phrase in defect for defect in failed[key]), (key, failed[key])


def test_sample_is_a_stable_subset_for_a_seed(url):
    report = verify(url, "--sample-percent", "30", "--sample-seed", "s1")
    again = verify(url, "--sample-percent", "30", "--sample-seed", "s1")
    listed = report["summary"]["segments_listed"]
    assert 0 < report["summary"]["segments_checked"] < listed
    assert [r["key"] for r in report["details"]["segments"]] == [r["key"] for r in again["details"]["segments"]]


def test_groups_are_balanced_by_size():
    items = [vf.VerifyItem("/", "q", {"key": f"k{i}", "size_bytes": size}) for i, size in enumerate([9, 1, 5, 5, 3, 7])]
    groups = vf.balanced_groups(items, 2)
    assert sorted(sum(i.size for i in g) for g in groups) == [15, 15]


def test_missing_manifest_is_a_failure_not_a_pass(tmp_path):
    with pytest.raises(Exception, match="no manifest"):
        verify((tmp_path / "empty").as_uri())


@pytest.mark.spark
def test_spark_verify_on_loopback_s3_passes_a_clean_backup(s3_storage_url, spark_submit_available):
    build_sample_backup(open_storage(s3_storage_url))
    run = submit("verify_segments", s3_storage_url, "sample-1")
    assert run.returncode == 0, run.stderr
    assert run.report["ok"] and run.report["summary"]["segments_checked"] == run.report["summary"]["segments_listed"] > 10


@pytest.mark.spark
def test_spark_verify_exits_1_and_names_every_defect(url, spark_submit_available):
    expected = inject_defects(url)
    run = submit("verify_segments", url, "sample-1")
    assert run.returncode == 1, run.stderr
    named = {d["key"]: d["reason"] for d in run.report["summary"]["defects"]}
    assert set(named) == set(expected)
    for key, phrase in expected.items():
        assert any(phrase in d["reason"] for d in run.report["summary"]["defects"] if d["key"] == key)


def test_before_finalize_the_segments_of_an_encode_report_are_verified(tmp_path):
    from airflow_rbak.segments.jobs import backup_segments
    from tests.spark_jobs.staging import stage_queue

    url = (tmp_path / "staged").as_uri()
    stage_queue(open_storage(url), "b2", "/", "q", 500)
    encoded = backup_segments.run(LocalSpark(), backup_segments.parse_args(["--storage-url", url, "--backup-id", "b2"]))
    key = encoded.save(open_storage(url))

    argv = ["--storage-url", url, "--backup-id", "b2", "--encode-report", key]
    report = verify_segments.run(LocalSpark(), verify_segments.parse_args(argv)).to_json()
    assert report["ok"] and report["summary"]["segments_checked"] == encoded.summary["segments"] >= 1
    assert not open_storage(url).exists("b2/manifest.json")
