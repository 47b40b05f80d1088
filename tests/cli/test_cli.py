"""The `rbak` command line, run as a real process: exit codes, one-line errors, output shapes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.storage import open_storage
from tests.codec.hostile import named_cases
from tests.repository.sample import build_sample_backup

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
    assert "  vhosts    every vhost (what the backup was asked for)\n" in text


def test_describe_names_the_vhosts_a_backup_was_asked_for(location):
    from airflow_rbak.codec.manifest import SELECTED_VHOSTS
    from airflow_rbak.repository.manifest_store import ManifestStore

    storage = open_storage(location)
    manifest = build_sample_backup(storage)
    manifest.extensions[SELECTED_VHOSTS] = ["/", "events/eu"]
    ManifestStore(storage).save(manifest)

    text = rbak("describe", "--path", location, "--backup-id", "sample-1").stdout

    assert "  vhosts    /, events/eu (what the backup was asked for)\n" in text


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


def test_usage_errors_and_bad_urls_exit_2_in_one_line():
    usage = rbak("validate", "--path", "file:///tmp")
    bad_url = rbak("list", "--path", "ftp://example/backups")

    assert usage.returncode == 2 and "--backup-id" in usage.stderr
    assert bad_url.returncode == 2 and bad_url.stderr.count("\n") == 1 and "Traceback" not in bad_url.stderr


def test_a_missing_manifest_is_a_clear_error(tmp_path):
    done = rbak("describe", "--path", tmp_path.as_uri(), "--backup-id", "nope")

    assert done.returncode == 2
    assert "no manifest.json" in done.stderr and "rbak manifest rebuild" in done.stderr


def test_definitions_rollback_takes_the_broker_as_restore_does_and_refuses_it_on_the_command_line(tmp_path, monkeypatch):
    monkeypatch.delenv("RBAK_BROKER_URL", raising=False)
    build_sample_backup(open_storage(tmp_path.as_uri()), "r-1")
    broker_file = tmp_path / "broker"
    broker_file.write_text("amqp://guest:s3cret-pw@127.0.0.1:1/?management_port=1\n")
    rollback = ("definitions", "rollback", "--path", tmp_path.as_uri(), "--backup-id", "r-1")

    no_broker = rbak(*rollback)
    on_the_command_line = rbak(*rollback, "--broker", "amqp://guest:s3cret-pw@127.0.0.1:1/?management_port=1")
    no_snapshot = rbak(*rollback, "--broker-file", str(broker_file))
    monkeypatch.setenv("RBAK_BROKER_URL", broker_file.read_text())
    from_the_environment = rbak(*rollback)

    assert no_broker.returncode == 2 and "$RBAK_BROKER_URL" in no_broker.stderr and "--broker-file" in no_broker.stderr
    assert on_the_command_line.returncode == 2 and "--broker is not taken" in on_the_command_line.stderr
    for done in (no_snapshot, from_the_environment):
        assert done.returncode == 5 and "holds no rollback snapshot" in done.stderr
    for done in (no_broker, on_the_command_line, no_snapshot, from_the_environment):
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr and "s3cret" not in done.stderr


def test_list_of_a_location_that_does_not_exist_fails_in_one_line_and_an_empty_one_has_no_backups(tmp_path):
    missing = rbak("list", "--path", (tmp_path / "typo").as_uri())
    (tmp_path / "empty").mkdir()
    empty = rbak("list", "--path", (tmp_path / "empty").as_uri())

    assert missing.returncode == 3 and missing.stdout == ""
    assert missing.stderr == f"rbak: error: folder {tmp_path / 'typo'} does not exist ({(tmp_path / 'typo').as_uri()}): check the path\n"
    assert (empty.returncode, empty.stdout) == (0, f"no backups under {(tmp_path / 'empty').as_uri()}\n")


def test_list_of_a_bucket_that_does_not_exist_fails_in_one_line(s3_server):
    url = f"s3://rbak-no-such-bucket/backups?region=us-east-1&endpoint={s3_server}&path_style=true"

    done = rbak("list", "--path", url)

    assert done.returncode == 3 and done.stderr.count("\n") == 1
    assert "S3 bucket 'rbak-no-such-bucket' does not exist" in done.stderr


@pytest.mark.parametrize("command", [("list",), ("describe", "--backup-id", "sample-1"),
                                     ("validate", "--backup-id", "sample-1"), ("unlock", "--backup-id", "sample-1")])
def test_names_a_backup_holds_reach_the_terminal_with_their_control_characters_escaped(tmp_path, command):
    storage = open_storage(tmp_path.as_uri())
    manifest = build_sample_backup(storage)
    manifest.queues[0].name = "orders\x1b]0;pwned\x07\x1b[2J\nforged line\x9b"
    manifest.queues[0].vhost = "naïve-ü\u202e"
    manifest.source_cluster = "rabbit@\x1b[8mhidden"
    manifest.created_at = 9_000_000_000_000_000_000
    storage.put(manifest_key("sample-1"), manifest.to_bytes())

    done = rbak(command[0], "--path", tmp_path.as_uri(), *command[1:])
    as_json = rbak(command[0], "--path", tmp_path.as_uri(), *command[1:], "--format", "json")

    for output in (done.stdout, done.stderr, as_json.stdout, as_json.stderr):
        assert not any(c in output for c in "\x1b\x07\x9b\u202e"), output
    if command[0] == "describe":
        assert "orders\\x1b]0;pwned\\x07\\x1b[2J\\nforged line\\x9b" in done.stdout
        assert "naïve-ü\\u202e" in done.stdout and "invalid time (9000000000000000000)" in done.stdout
        assert json.loads(as_json.stdout)["queues"][0]["name"] == manifest.queues[0].name
    assert "Traceback" not in done.stderr + as_json.stderr
