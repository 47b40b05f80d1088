"""Chains in stored manifests, without a broker: declaration, validation, verify, retention and compaction.

A chain here is built the way ``finish_backup`` builds one: a second backup
whose stream entry lists the first backup's segments before its own.
"""

from __future__ import annotations

import copy
import json

import pytest

from airflow_rbak.cli.main import main as rbak
from airflow_rbak.codec import BackupManifest, ManifestError
from airflow_rbak.repository import chain, chain_link
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.segments.jobs import compact_segments, verify_segments
from airflow_rbak.storage import open_storage
from tests.repository.sample import STREAM
from tests.repository.sample import build_sample_chain as _build_chain
from tests.repository.sample import chained as _chained
from tests.spark_jobs.conftest import spark_submit_available, submit  # noqa: F401 - a fixture among them
from tests.spark_jobs.local_spark import LocalSpark


@pytest.fixture
def url(tmp_path) -> str:
    return _build_chain((tmp_path / "store").as_uri())


def test_a_chained_manifest_declares_its_base_and_stays_a_valid_rbak_v1_manifest(url):
    storage = open_storage(url)
    raw = json.loads(storage.get("sample-2/manifest.json"))
    manifest = BackupManifest.from_json(raw)

    assert raw["depends_on"] == ["sample-1"] and chain.dependencies(manifest) == ("sample-1",)
    assert list(raw)[:11] == ["backup_id", "created_at", "completed_at", "source_cluster", "rabbitmq_version",
                              "backup_tool_version", "definitions", "queues", "total_messages", "total_bytes",
                              "total_segments"]  # the schema's fields first; what a foreign reader ignores after
    (entry,) = raw["queues"]
    assert [s["sequence"] for s in entry["segments"]] == list(range(1, len(entry["segments"]) + 1))
    assert [chain.segment_owner(s["key"]) for s in entry["segments"]][-2:] == ["sample-1", "sample-2"]
    assert entry["message_count"] == sum(s["record_count"] for s in entry["segments"])
    assert validate_backup(storage, "sample-2", deep=True).defects == []


def test_keys_in_an_undeclared_backup_folder_are_a_defect(url):
    storage = open_storage(url)
    manifest = ManifestStore(storage).load("sample-2")
    manifest.extensions["depends_on"] = []
    ManifestStore(storage).save(manifest)

    defects = validate_backup(storage, "sample-2").defects

    # each of sample-1's segments is named as undeclared (and none is read)
    listed = [s.key for q in manifest.queues for s in q.segments if s.key.startswith("sample-1/")]
    undeclared = {d.key for d in defects if d.reason == "not an object of backup 'sample-2': it lies in the folder of "
                  "backup 'sample-1', which its depends_on does not declare"}
    assert listed and undeclared == set(listed)


def test_a_malformed_declaration_is_refused():
    manifest = BackupManifest("x", 0, "0", extensions={"depends_on": "sample-1"})
    with pytest.raises(ManifestError, match="depends_on must be an array"):
        chain.dependencies(manifest)


def test_validate_and_verify_name_a_missing_base(url, capsys):
    storage = open_storage(url)
    for info in list(storage.list("sample-1/")):
        storage.delete(info.key)

    code = rbak(["validate", "--path", url, "--backup-id", "sample-2", "--deep"])
    report = verify_segments.run(LocalSpark(), verify_segments.parse_args(["--storage-url", url, "--backup-id", "sample-2"]))

    out = capsys.readouterr().out
    listed = sum(1 for q in ManifestStore(storage).load("sample-2").queues for s in q.segments
                 if chain.segment_owner(s.key) == "sample-1")
    assert code == 1 and f"missing base backup 'sample-1': {listed} of the {listed} segments" in out
    assert report.ok is False and report.summary["depends_on"] == ["sample-1"]
    assert [m.split(":")[0] for m in report.summary["missing_bases"]] == ["missing base backup 'sample-1'"]


def test_verify_checks_the_segments_a_chain_takes_from_its_base(url):
    report = verify_segments.run(LocalSpark(), verify_segments.parse_args(["--storage-url", url, "--backup-id", "sample-2"]))

    checked = {chain.segment_owner(r["key"]) for r in report.details["segments"]}
    assert report.ok and checked == {"sample-1", "sample-2"} and report.summary["missing_bases"] == []


def test_list_and_describe_show_dependencies_both_ways(url, capsys):
    summaries = {s.backup_id: s for s in list_backups(open_storage(url))}

    assert summaries["sample-2"].depends_on == ("sample-1",) and summaries["sample-1"].needed_by == ("sample-2",)
    assert rbak(["list", "--path", url]) == 0 and rbak(["describe", "--path", url, "--backup-id", "sample-1"]) == 0
    out = capsys.readouterr().out
    assert "  depends on sample-1 (its streams continue their segments)" in out
    assert "  needed by sample-2\n" in out and "  depends on nothing (restores on its own data alone)" in out


def test_retention_keeps_stream_segments_when_a_manifest_is_unreadable(url, caplog):
    storage = open_storage(url)
    third = _chained(storage, "sample-2", "sample-3", 10**13)
    storage.put("broken/manifest.json", b"{not json")
    base_stream = {s.key for s in ManifestStore(storage).load("sample-1").queue(*STREAM).segments}

    with caplog.at_level("INFO", logger="airflow_rbak.repository.retention"):
        result = apply_retention(storage, RetentionPolicy(keep_last=1), now_ms=10**13 + 5, protect="sample-3")

    assert result.deleted == ["sample-1", "sample-2"]
    remaining = {i.key for i in storage.list("")}
    assert base_stream <= remaining  # the damaged manifest might list them
    assert not any(k.startswith("sample-1/queues/_default/") for k in remaining)  # classic data went
    assert "a damaged manifest may list them" in caplog.text
    assert "retention keeps backup sample-3: the backup just written" in caplog.text
    assert validate_backup(storage, third.backup_id, deep=True).defects == []


def test_compaction_leaves_queues_shared_with_other_backups_alone(url):
    storage = open_storage(url)
    before = {i.key: i.size for i in storage.list("sample-1/queues/prod/")}
    argv = ["--storage-url", url, "--backup-id", "sample-1", "--threshold-bytes", "100000"]

    report = compact_segments.run(LocalSpark(), compact_segments.parse_args(argv)).to_json()

    assert report["summary"]["queues_shared_with_other_backups"] == 1
    assert {i.key: i.size for i in storage.list("sample-1/queues/prod/events%2Feu/")} == \
        {k: v for k, v in before.items() if "/events%2Feu/" in k}
    assert validate_backup(storage, "sample-2", deep=True).defects == []


@pytest.mark.spark
def test_spark_submit_verify_of_a_chain_on_loopback_s3_exits_1_naming_the_missing_base(s3_storage_url, spark_submit_available):
    # Given a chain in loopback S3 whose base's stream segments are then deleted
    storage = open_storage(_build_chain(s3_storage_url))
    for info in list(storage.list("sample-1/queues/prod/")):
        storage.delete(info.key)

    # When the verify job runs through spark-submit
    run = submit("verify_segments", s3_storage_url, "sample-2")

    # Then it fails and its report names the missing base
    assert run.returncode == 1, run.stderr
    assert run.report["summary"]["depends_on"] == ["sample-1"]
    assert [m.split(":")[0] for m in run.report["summary"]["missing_bases"]] == ["missing base backup 'sample-1'"]


def test_a_stream_taken_from_the_middle_without_its_base_fails_instead_of_completing_with_a_hole(url):
    storage = open_storage(url)
    entry = copy.deepcopy(ManifestStore(storage).load("sample-2").queue(*STREAM))
    entry.segments = [s for s in entry.segments if s.key.startswith("sample-2/")]

    entry.extensions["stream_offsets"] = {"first": 40, "last": 45}  # no complete backup ends at offset 39
    with pytest.raises(chain.ChainBaseMissingError, match="no complete backup .* ends at offset 39"):
        chain_link.link_stream_chain(storage, "sample-3", entry)

    entry.extensions["stream_offsets"] = {"first": 13, "last": 20}  # sample-2 ends at 12, but lost a segment
    lost = ManifestStore(storage).load("sample-2").queue(*STREAM).segments[0].key
    storage.delete(lost)
    with pytest.raises(chain.ChainBaseMissingError, match=f"backup 'sample-2' ends there but does not count: .*{lost}.* is not stored"):
        chain_link.link_stream_chain(storage, "sample-3", entry)
