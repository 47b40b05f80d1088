"""``rbak journal``: enable, status, archive and disable a vhost's journal from the command line."""

from __future__ import annotations

import json

from airflow_rbak.cli.main import main
from tests.journal.helpers import channel_of, records_of


def _rbak(capsys, *argv: str) -> tuple[int, dict]:
    code = main(["--format", "json", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else {}


def test_enable_status_archive_and_disable_from_the_command_line(broker, vhost, tmp_path, monkeypatch, capsys):
    c = broker.connection
    monkeypatch.setenv("RBAK_BROKER_URL", f"amqp://{c.username}:{c.password}@{c.host}:{c.amqp_port}/"
                                          f"?management_port={c.management_port}&stream_port={c.stream_port}")
    url = f"file://{tmp_path}"

    code, enabled = _rbak(capsys, "journal", "enable", "--vhost", vhost, "--max-messages", "1000")
    assert code == 0 and set(enabled["nodes"].values()) == {"on"} and enabled["max_length"] == 1000
    conn, channel = channel_of(c, vhost)
    channel.queue_declare("q")
    channel.confirm_delivery()
    channel.basic_publish("", "q", b"from the cli")
    conn.close()

    code, archived = _rbak(capsys, "journal", "archive", "--vhost", vhost, "--path", url, "--seconds", "30")
    assert code == 0 and archived["messages"] == 1 and archived["gaps"] == []
    assert [bytes(r["body"]) for r in records_of(url, archived["backup_id"])] == [b"from the cli"]

    code, state = _rbak(capsys, "journal", "status", "--vhost", vhost)
    assert code == 0 and state["depth"] == 0 and state["bound"] is True and state["full"] is False

    code, disabled = _rbak(capsys, "journal", "disable", "--vhost", vhost, "--delete-queue")
    assert code == 0 and set(disabled["nodes"].values()) == {"off"}
    code, state = _rbak(capsys, "journal", "status", "--vhost", vhost)
    assert state["queue_exists"] is False and set(state["nodes"].values()) == {"off"}
