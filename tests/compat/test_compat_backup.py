"""The compatibility promise (docs/format.md#compatibility): a backup written by an earlier version stays readable
and restorable, byte-exact, by every later one.

``backups/v1`` was written once by ``scripts/make_compat_backup.py`` with version 0.1.0 against RabbitMQ 3.10.8 and
is never regenerated: a classic, a quorum and a stream queue, an exchange bound to the classic one, and two backups,
the second's stream continuing the first's segments (a chain). ``expected.json`` beside it holds what was published,
not what the backup holds. A change that makes this test fail breaks every user's existing backups.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.restore import RestoreRequest, RestoreRun
from tests.broker.conftest import vhost_of_its_own
from tests.compat.messages import FULL, INCREMENTAL, QUEUES, SOURCE_VHOST, view_json
from tests.restore.helpers import read_queue

V1 = Path(__file__).parent / "backups" / "v1"
EXPECTED = json.loads((V1 / "expected.json").read_text())


@pytest.fixture
def location(tmp_path: Path) -> str:
    """A copy of the checked-in location (a restore writes its checkpoints there; the original stays as written)."""
    shutil.copytree(V1 / "location", tmp_path / "location")
    return (tmp_path / "location").as_uri()


@pytest.fixture
def target(broker) -> Iterator[str]:
    """The name of a vhost the restore creates; deleted afterwards."""
    with vhost_of_its_own(broker, "compat", create=False) as name:
        yield name


def rbak(capsys, *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    return code, capsys.readouterr().out


def test_rbak_lists_both_backups_complete_the_second_depending_on_the_first_and_validates_each_deep(location, capsys):
    code, out = rbak(capsys, "--format", "json", "list", "--path", location)

    assert code == 0
    listed = {b["backup_id"]: b for b in json.loads(out)}
    assert sorted(listed) == [FULL, INCREMENTAL]
    for backup_id, expected in EXPECTED["backups"].items():
        assert listed[backup_id]["status"] == "complete", backup_id
        assert listed[backup_id]["total_messages"] == sum(expected["messages"].values()), backup_id
        assert list(listed[backup_id]["depends_on"]) == expected["depends_on"], backup_id
        # every segment read: CRC, SHA-256, records, timestamps (the chain's segments of the first backup too)
        assert rbak(capsys, "validate", "--deep", "--path", location, "--backup-id", backup_id)[0] == 0, backup_id


@pytest.mark.broker
@pytest.mark.parametrize("backup_id", [FULL, INCREMENTAL])
def test_each_backup_restores_its_definitions_and_every_message_byte_exact_in_order(broker, location, target, backup_id):
    request = RestoreRequest(location, backup_id=backup_id, vhosts=[SOURCE_VHOST], vhost_map={SOURCE_VHOST: target},
                             restore_definitions=True)

    report = RestoreRun(broker.connection, request).run()

    counts = EXPECTED["backups"][backup_id]["messages"]
    assert (report.planned, report.published, report.unroutable) == (sum(counts.values()),) * 2 + (0,)
    # the definitions: each queue with its type, the exchange and its binding
    assert {q["name"]: q["type"] for q in broker.api("GET", f"queues/{target}").json()} == EXPECTED["definitions"]["queues"]
    exchanges = {e["name"]: e["type"] for e in broker.api("GET", f"exchanges/{target}").json() if e["name"] and
                 not e["name"].startswith("amq.")}
    assert exchanges == EXPECTED["definitions"]["exchanges"]
    bindings = [[b["source"], b["destination"], b["routing_key"]] for b in broker.api("GET", f"bindings/{target}").json()
                if b["source"]]
    assert bindings == EXPECTED["definitions"]["bindings"]
    # every message: body, every property, every header with its wire type, in the order published
    for queue, queue_type in QUEUES.items():
        restored = read_queue(broker.connection, target, queue, queue_type, counts[queue])
        assert [view_json(body, _Props(props), headers) for body, props, headers in restored] == \
            EXPECTED["messages"][queue][:counts[queue]], queue


class _Props:
    """read_queue's property tuple (in PIKA_NAMES order) as attributes, for :func:`view_json`."""

    def __init__(self, values: tuple) -> None:
        from airflow_rbak.codec.properties import PIKA_NAMES

        self.__dict__.update(zip(PIKA_NAMES, values))
