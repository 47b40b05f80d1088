"""The `rbak` command line, run as a real process: exit codes, one-line errors, output shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.storage import open_storage
from tests.backup.sample import build_sample_backup
from tests.codec.hostile import named_cases

_SCRIPT = Path(sys.executable).with_name("rbak")
RBAK = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "airflow_rbak.cli.main"]
_MEASURE = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[2:], capture_output=True)\n"
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))\n"
    "sys.stdout.buffer.write(p.stdout); sys.stderr.buffer.write(p.stderr); sys.exit(p.returncode)\n"
)


def rbak(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*RBAK, *args], capture_output=True, text=True, timeout=120)


def rbak_measured(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """Run rbak and return its result and its peak resident memory in KiB."""
    rss_file = tmp_path / "rss"
    done = subprocess.run([sys.executable, "-c", _MEASURE, str(rss_file), *RBAK, *args], capture_output=True, text=True, timeout=120)
    return done, int(rss_file.read_text())


def test_list_describe_and_validate_a_backup(location):
    manifest = build_sample_backup(open_storage(location))

    listed = json.loads(rbak("list", "--path", location, "--format", "json").stdout)
    described = json.loads(rbak("describe", "--path", location, "--backup-id", "sample-1", "--format", "json").stdout)
    deep = rbak("validate", "--path", location, "--backup-id", "sample-1", "--deep")

    assert [(b["backup_id"], b["status"], b["total_messages"]) for b in listed] == [("sample-1", "complete", 282)]
    assert described == manifest.to_json()
    assert deep.returncode == 0, deep.stdout + deep.stderr
    assert deep.stdout.startswith(f"backup sample-1: valid (deep: {manifest.total_segments} segments, 282 records")
    text = rbak("describe", "--path", location, "--backup-id", "sample-1").stdout
    assert "events/eu" in text and "stream" in text


def test_validate_exits_1_and_names_the_damaged_segment(location):
    storage = open_storage(location)
    manifest = build_sample_backup(storage)
    victim = manifest.queues[1].segments[0].key
    data = bytearray(storage.get(victim))
    data[-20] ^= 0x10
    storage.put(victim, bytes(data))

    done = rbak("validate", "--path", location, "--backup-id", "sample-1", "--deep", "--format", "json")

    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["valid"] is False
    assert {d["key"] for d in report["defects"]} == {victim}


def test_manifest_rebuild_then_deep_validation_passes(location):
    storage = open_storage(location)
    build_sample_backup(storage)
    storage.delete(manifest_key("sample-1"))

    rebuilt = rbak("manifest", "rebuild", "--path", location, "--backup-id", "sample-1")
    validated = rbak("validate", "--path", location, "--backup-id", "sample-1", "--deep")

    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "3 queues" in rebuilt.stdout and "written to sample-1/manifest.json" in rebuilt.stdout
    assert validated.returncode == 0, validated.stdout


def test_segment_dump_prints_the_header_then_every_record(location):
    storage = open_storage(location)
    manifest = build_sample_backup(storage)
    segment = manifest.queues[0].segments[0]
    source = location.replace("?", f"/{segment.key}?", 1) if "?" in location else f"{location}/{segment.key}"

    done = rbak("segment", "dump", source)

    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0, done.stderr
    assert lines[0]["record_count"] == segment.record_count == len(lines) - 1
    assert lines[0]["sha256"] == segment.checksum and lines[0]["compression"] == "zstd"
    assert [r["delivery_tag"] for r in lines[1:]] == list(range(1, segment.record_count + 1))
    assert list(lines[1]) == ["body", "properties", "headers", "exchange", "routing_key", "delivery_tag",
                              "redelivered", "backed_up_at", "source_queue", "source_vhost"]


@pytest.mark.parametrize("case", sorted(named_cases()))
def test_a_hostile_segment_gives_exit_1_one_line_and_bounded_memory(tmp_path, case):
    path = tmp_path / f"{case}.zst"
    path.write_bytes(named_cases()[case])

    done, peak_kib = rbak_measured(tmp_path, "segment", "dump", str(path))

    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(f"rbak: error: {path}: ")
    assert "Traceback" not in done.stderr
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib} KiB"


def test_usage_errors_exit_2_and_bad_urls_exit_1_in_one_line():
    usage = rbak("validate", "--path", "file:///tmp")
    bad_url = rbak("list", "--path", "ftp://example/backups")

    assert usage.returncode == 2 and "--backup-id" in usage.stderr
    assert bad_url.returncode == 1 and bad_url.stderr.count("\n") == 1 and "Traceback" not in bad_url.stderr


def test_a_missing_manifest_is_a_clear_error(tmp_path):
    done = rbak("describe", "--path", tmp_path.as_uri(), "--backup-id", "nope")

    assert done.returncode == 1
    assert "no manifest.json" in done.stderr and "rbak manifest rebuild" in done.stderr


def test_definitions_rollback_without_a_broker_or_a_snapshot_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RBAK_ROLLBACK_BROKER_URL", raising=False)
    build_sample_backup(open_storage(tmp_path.as_uri()), "r-1")

    no_broker = rbak("definitions", "rollback", "--path", tmp_path.as_uri(), "--backup-id", "r-1")
    no_snapshot = rbak("definitions", "rollback", "--path", tmp_path.as_uri(), "--backup-id", "r-1",
                       "--broker", "amqp://guest:s3cret-pw@127.0.0.1:1/?management_port=1")

    assert no_broker.returncode == 1 and "--broker" in no_broker.stderr and no_broker.stderr.count("\n") == 1
    assert no_snapshot.returncode == 1 and "holds no rollback snapshot" in no_snapshot.stderr
    assert no_snapshot.stderr.count("\n") == 1 and "Traceback" not in no_snapshot.stderr and "s3cret" not in no_snapshot.stderr
