"""``rbak``'s habits: one exit code per kind of failure, ``latest`` wherever a backup id goes, ``--format`` before or
after the command, and each command's help showing examples of that command."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from airflow_rbak.cli.main import EXAMPLES, build_parser
from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.repository.chain_link import ChainLock
from airflow_rbak.storage import open_storage
from tests.cli.test_cli import rbak
from tests.repository.sample import build_sample_backup


@pytest.fixture
def two_backups(tmp_path) -> str:
    location = (tmp_path / "backups").as_uri()
    storage = open_storage(location)
    build_sample_backup(storage, "older")
    build_sample_backup(storage, "newer")
    return location


@pytest.mark.parametrize("command", [("describe",), ("validate", "--deep"), ("unlock",), ("manifest", "rebuild")])
def test_latest_names_the_newest_complete_backup_in_every_command_that_takes_an_id(two_backups, command):
    done = rbak("--format", "json", *command, "--path", two_backups, "--backup-id", "latest")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["backup_id"] == "newer"


def test_format_goes_before_or_after_the_command_and_after_wins(two_backups):
    before = rbak("--format", "json", "list", "--path", two_backups)
    after = rbak("list", "--path", two_backups, "--format", "json")
    both = rbak("--format", "json", "list", "--path", two_backups, "--format", "text")

    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert [b["backup_id"] for b in json.loads(before.stdout)] == ["older", "newer"]
    assert both.stdout.startswith("BACKUP ID")


def test_each_command_has_its_own_examples_in_its_help():
    parser = build_parser()
    # (a subcommand whose name another command has, as `definitions export` has `export`'s, or whose examples are
    # keyed by its full name, as `journal enable`'s, is keyed by its full name)
    helps = {sub.prog.removeprefix("rbak ").replace(" ", "-")
             if sub.prog.endswith("definitions export") or name not in EXAMPLES else name:
             sub.format_help() for name, sub in _commands(parser)}

    assert set(helps) == set(EXAMPLES)
    for name, text in helps.items():
        examples = text.split("examples:", 1)[1]
        assert examples.strip().startswith(("rbak", "RBAK_BROKER_URL")), name
        spelled = {"dump": "segment dump", "rebuild": "manifest rebuild", "rollback": "definitions rollback",
                   "definitions-export": "definitions export"}.get(name, name.replace("journal-", "journal "))
        assert all(f"rbak {spelled}" in line or f"rbak --format json {spelled}" in line
                   for line in examples.strip().splitlines()), (name, examples)


def _commands(parser):
    for action in parser._subparsers._group_actions:  # argparse keeps its subcommands here (no public accessor)
        for name, sub in action.choices.items():
            if sub._subparsers is None:
                yield name, sub
            else:
                yield from _commands(sub)


def test_exit_codes_tell_a_damaged_backup_a_usage_error_an_unreachable_location_and_a_held_lock(tmp_path, two_backups):
    storage = open_storage(two_backups)
    storage.put(manifest_key("older"), b"{not json")
    empty = (tmp_path / "empty").as_uri()
    (tmp_path / "empty").mkdir()

    damaged = rbak("describe", "--path", two_backups, "--backup-id", "older")
    usage = [rbak("describe", "--path", two_backups), rbak("list", "--path", "ftp://example/backups"),
             rbak("describe", "--path", two_backups, "--backup-id", "no-such"),
             rbak("validate", "--path", empty, "--backup-id", "latest"), rbak("forget", "--path", two_backups)]
    unreachable = rbak("list", "--path", (tmp_path / "typo").as_uri())
    with ChainLock(storage, "another forget").held():
        locked = rbak("forget", "--path", two_backups, "--keep-last", "1", "--wait", "0")

    assert damaged.returncode == 1 and "manifest" in damaged.stderr
    assert [u.returncode for u in usage] == [2] * 5, [u.stderr for u in usage]
    assert "say what to keep" in usage[4].stderr and "no complete backup for 'latest'" in usage[3].stderr
    assert unreachable.returncode == 3 and "does not exist" in unreachable.stderr
    assert locked.returncode == 4 and "another forget" in locked.stderr
    for done in (damaged, *usage[1:], unreachable, locked):
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr


def test_a_restores_definitions_are_shown_as_lines_a_person_reads():
    from airflow_rbak.cli.runs import definitions_lines

    result = {"rollback_key": "b/definitions/rollback-before-import-1.zst", "imported": True, "dry_run": False,
              "vhosts": {"dr": {"queues": 2}}, "created_vhosts": ["dr"], "transformed_key": None,
              "restore_run": "cli:20261122T041500123Z-0a1b2c3d", "cluster": "rabbitmq-cluster-id-x",
              "cluster_name": "rabbit@dr",
              "changes": {"mode": "missing", "create": ["vhost dr"] + [f"queue dr/q{i}" for i in range(25)], "replace": [],
                          "cannot_replace": ["queue dr/old"], "unchanged": 3}}

    assert definitions_lines(result) == [
        "  definitions (missing mode): did create vhost dr, " + ", ".join(f"queue dr/q{i}" for i in range(19))
        + " and 6 more; replace nothing; 3 already as in the backup",
        "    different but kept (delete them first to take the backup's): queue dr/old",
        "    rollback snapshot: b/definitions/rollback-before-import-1.zst",
        "    import record: restore run cli:20261122T041500123Z-0a1b2c3d into cluster rabbit@dr (id rabbitmq-cluster-id-x)",
        "    created vhosts: dr",
    ]
    assert definitions_lines({**result, "dry_run": True, "imported": False})[0].startswith("  definitions (missing mode): would create")
    assert definitions_lines({}) == []


def test_a_command_imports_only_what_it_uses(two_backups):
    # Given a deep validation of a location named by --path, run as its own process that records every import
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "airflow_rbak.cli.main", "validate", "--deep",
                           "--path", two_backups, "--backup-id", "latest"], capture_output=True, text=True, timeout=120)
    modules = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}

    # Then it validated, with no other command's engine, no [rbak] settings (--path names the location) and no Airflow
    assert done.returncode == 0, done.stderr[-2000:]
    assert "airflow_rbak.repository.validate" in modules
    assert not {"airflow_rbak.restore", "airflow_rbak.restore.plan", "airflow_rbak.settings", "airflow_rbak.doctor",
                "airflow_rbak.broker", "airflow", "numpy"} & modules


def test_an_error_of_a_module_a_command_did_not_import_keeps_its_exit_code():
    from airflow_rbak.cli.main import exit_code
    from airflow_rbak.restore.errors import DamagedSegmentsError

    assert exit_code(DamagedSegmentsError("damaged", {"segment-0001.zst": ["CRC"]})) == 1
