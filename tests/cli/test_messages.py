"""``rbak messages`` and ``rbak search`` as a user runs them: output shapes, the limit, exit codes."""

from __future__ import annotations

import base64
import dataclasses
import json

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.repository.message_search import preview
from airflow_rbak.storage import open_storage
from tests.repository.message_backups import ORDERS, T0, write_backup


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_messages_prints_each_record_with_its_place_as_json_lines(location, capsys):
    manifest = write_backup(open_storage(location), "b1", ORDERS)
    code, out, _ = run(capsys, "messages", "--path", location, "--backup-id", "b1", "--queue", "orders",
                       "--routing-key", "orders.us.*", "--format", "jsonl")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [m["position"] for m in lines] == [i for i in range(len(ORDERS)) if i % 2]
    segments = manifest.queue("/", "orders").segments
    first = lines[0]
    assert (first["kind"], first["backup_id"], first["vhost"], first["queue"]) == ("message", "b1", "/", "orders")
    assert (first["segment"], first["sequence"], first["index"]) == (segments[0].key, 1, 1)
    assert first["properties"]["message_id"] == "order-1" and first["headers"] == [["x-tenant", {"LongString": "acme"}],
                                                                                   ["x-n", {"Long": 1}]]
    assert first["body_encoding"] == "utf-8" and first["body"].encode() == ORDERS[1].body
    binary = next(m for m in lines if m["position"] == 7)
    assert binary["body_encoding"] == "base64" and base64.b64decode(binary["body"]) == ORDERS[7].body


def test_messages_as_a_table_stops_at_the_limit_and_says_so(tmp_path, capsys):
    url = tmp_path.as_uri()
    write_backup(open_storage(url), "b1", ORDERS)
    code, out, _ = run(capsys, "messages", "--path", url, "--backup-id", "latest", "--vhost", "/",
                       "--header", "x-tenant=globex", "--limit", "3")
    assert code == 0
    rows = out.splitlines()
    assert rows[0] == "backup b1: messages with header 'x-tenant' = 'globex'"
    assert rows[2] == "vhost '/' queue 'orders'"
    assert [r.split()[0] for r in rows[4:7]] == ["0", "3", "6"]
    assert "order-3" in rows[5] and '{"order":4703,"amount":30}' in rows[5]
    assert rows[-1] == "3 message(s) shown, stopped at --limit 3"


def test_messages_refuses_a_queue_the_backup_does_not_hold_and_a_bad_filter_naming_it(tmp_path, capsys):
    url = tmp_path.as_uri()
    write_backup(open_storage(url), "b1", ORDERS[:2])
    code, _, err = run(capsys, "messages", "--path", url, "--backup-id", "b1", "--queue", "nope")
    assert code == 2 and "holds no queue 'nope'" in err
    code, _, err = run(capsys, "messages", "--path", url, "--backup-id", "b1", "--since", "yesterday")
    assert code == 2 and err.startswith("rbak: error: since: expected epoch milliseconds")
    code, _, err = run(capsys, "messages", "--path", url, "--backup-id", "b1", "--header", "x-tenant")
    assert code == 2 and "NAME=VALUE" in err


def test_a_runaway_body_regex_stops_the_command_and_says_why(tmp_path, capsys):
    url = tmp_path.as_uri()
    write_backup(open_storage(url), "b1", [ORDERS[0], dataclasses.replace(ORDERS[1], body=b"a" * 5000 + b"!")])
    code, _, err = run(capsys, "search", "--path", url, "--body-regex", "(a|aa)+$")
    assert code == 2 and "body_regex: searching one 5001-byte body took longer than" in err


def test_search_lists_each_message_once_with_every_backup_and_the_damage_it_met(location, capsys):
    storage = open_storage(location)
    b1 = write_backup(storage, "b1", ORDERS, dlq=False)
    write_backup(storage, "b2", ORDERS, later_by_ms=60_000, dlq=False)
    bad = b1.queue("/", "orders").segments[-1]
    storage.put(bad.key, storage.get(bad.key)[:-1] + b"!")

    code, out, _ = run(capsys, "search", "--path", location, "--message-id", "order-59", "--format", "json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    (match, summary) = lines
    assert match["kind"] == "match" and match["backups"] == ["b2"] and match["held_by"][0]["position"] == 59
    assert summary["damaged_segments"][0]["segment"] == bad.key and summary["backups_searched"] == ["b1", "b2"]

    code, out, _ = run(capsys, "search", "--path", location, "--message-id", "order-0", "--until-date",
                       str(2**62))
    assert code == 1
    assert "  message_id order-0  routing key 'orders.eu.paid'" in out
    assert "    in b1: segment 1 record 0 (position 0 in the queue), backed up 2024-11-22 02:00:00 UTC" in out
    assert "    in b2: segment 1 record 0 (position 0 in the queue), backed up 2024-11-22 02:01:00 UTC" in out
    assert "1 distinct message(s) in 2 matching record(s)" in out and f"! b1: {bad.key}: SHA-256" in out


def test_search_of_a_time_window_across_backups(tmp_path, capsys):
    url = tmp_path.as_uri()
    write_backup(open_storage(url), "b1", ORDERS, dlq=False)
    code, out, _ = run(capsys, "search", "--path", url, "--since", str(T0 + 58_000), "--format", "json")
    assert code == 0
    assert [json.loads(line).get("message_id") for line in out.splitlines()] == ["order-58", "order-59", None]


@pytest.mark.parametrize("body, shown", [
    (b'{"a": 1}', '{"a": 1}'),
    (b"\x00\xff\x10", "hex:00ff10"),
    ("é" * 60, "é" * 47 + "…"),
    (b"\x1b[31mred", "\x1b[31mred"),  # escaped by the output layer, not here
])
def test_a_body_preview_is_text_when_it_is_utf8_and_hex_otherwise(body, shown):
    assert preview(body.encode() if isinstance(body, str) else body, 48) == shown
