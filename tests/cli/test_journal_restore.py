"""``rbak restore --journal-until T``: the recovery to a point in time from the command line, without Airflow."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.broker import journal
from airflow_rbak.broker.pika_connection import blocking_connection
from tests.broker.conftest import broker, vhost  # noqa: F401 - fixtures
from tests.cli.without_airflow import broker_url, deleted_afterwards, rbak_without_airflow
from tests.journal.helpers import archive
from tests.restore.helpers import backup, body_of, props_of, publish, read_queue
from tests.restore.journal_archives import Published
from tests.restore.test_journal_recovery import publish_all


class _Guest:
    name, password = "guest", "guest"


@pytest.mark.broker
def test_rbak_restore_recovers_to_a_moment_and_refuses_one_past_the_journal(broker, vhost, tmp_path):  # noqa: F811
    with blocking_connection(broker.connection.pika_parameters(vhost)) as conn:
        conn.channel().queue_declare("orders", durable=True)
    journal.enable(broker.connection, vhost)
    publish(broker.connection, vhost, "orders", 0, 2)
    location = (tmp_path / "b").as_uri()
    archive(broker.connection, vhost, location)
    backup(broker.connection, location, "snap-1", vhost)
    records = [Published(0, "", "orders", body_of(100 + n, 50), props_of(100 + n)) for n in range(1, 5)]
    publish_all(broker, vhost, records[:3])
    before_t = archive(broker.connection, vhost, location)
    publish_all(broker, vhost, records[3:])
    last = archive(broker.connection, vhost, location)
    url = broker_url(broker.connection, _Guest)
    home = tmp_path / "home"
    home.mkdir()
    with deleted_afterwards(broker, f"{vhost}-pit") as target:
        args = ["restore", "--path", location, "--vhost", vhost, "--vhost-map", f"{vhost}={target}",
                "--conf", json.dumps({"restore_definitions": True, "checkpoint_state": str(tmp_path / "r.db")})]
        past, _ = rbak_without_airflow([*args, "--journal-until", str(last.to_ms + 1)], home, RBAK_BROKER_URL=url)
        assert past.returncode != 0 and "coverage ends at" in past.stderr, past.stderr
        done, _ = rbak_without_airflow([*args, "--journal-until", str(before_t.to_ms)], home, RBAK_BROKER_URL=url)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "recovery to" in done.stdout and "2 from snapshot snap-1, 3 from the journal" in done.stdout
        got = read_queue(broker.connection, target, "orders", "classic", 5)
        assert [m[0] for m in got] == [body_of(0, 300), body_of(1, 300)] + [r.body for r in records[:3]]
