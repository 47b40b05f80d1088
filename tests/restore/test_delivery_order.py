"""A quorum queue holding priorities, backed up on one RabbitMQ version and restored on the session's.

Quorum queues order priorities by version (``tests/broker/behaviour.py``): none before 4.0, two levels on 4.0 (high
first, every third delivery the older of the two levels' oldest), 32 strict levels on 4.3. A restore publishes the
records in the order the backup stored them (the source's delivery order), and the test reads the target to hold
the broker to what it does with that order: on 3.10 every source's order comes back; on 4.0 a 3.10 backup's is
reordered, while a 4.3 backup's comes back (highest first, its high messages are all older than its normal ones);
on 4.3 a 3.10 or a 4.0 backup's is reordered. The plan and the approval request warn exactly when it is reordered.
"""

from __future__ import annotations

import pytest

from airflow_rbak.codec import BackupProperties, BackupRecord
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.plan_log import summary_lines
from airflow_rbak.storage import open_storage
from tests.broker.behaviour import Behaviour
from tests.repository.backup_writer import BackupWriter
from tests.restore.helpers import read_queue

pytestmark = pytest.mark.broker

#: The priorities of the source's messages in publish order: both 4.0 levels, several 4.3 levels, repeats.
PRIORITIES = (0, 7, 2, 9, 4, 5, 1, 8, 3, 7)


def source_order(version: str) -> list[int]:
    """The indices of the published messages in the order a quorum queue of ``version`` delivered them."""
    return Behaviour(version).delivery_order("quorum", PRIORITIES)


def write_backup(location: str, version: str) -> None:
    """A backup, as if taken on ``version``, of one quorum queue: its messages in that version's delivery order."""
    writer = BackupWriter(open_storage(location), "prio-1", source_cluster="rabbit@old", rabbitmq_version=version)
    sink = writer.queue("src", "prio", queue_type="quorum")
    sink.add_all(BackupRecord(bytes([i]), properties=BackupProperties(priority=PRIORITIES[i]), routing_key="prio",
                              backed_up_at=1_000 + n, source_queue="prio", source_vhost="src")
                 for n, i in enumerate(source_order(version)))
    sink.close()
    writer.finish()


@pytest.mark.parametrize("source_version", ["3.10.8", "4.0.5", "4.3.6"])
def test_the_plan_warns_exactly_when_the_target_delivers_a_quorum_queue_in_another_order(
        broker, behaviour, vhost, tmp_path, source_version):
    # Given a backup of a quorum queue holding priorities, taken on source_version
    location = (tmp_path / "b").as_uri()
    write_backup(location, source_version)
    stored = source_order(source_version)
    # what the session's broker should deliver after the stored order is published into it
    expected = [stored[j] for j in behaviour.delivery_order("quorum", [PRIORITIES[i] for i in stored])]
    settings = RestoreRequest(location, backup_id="prio-1", vhosts=["src"], vhost_map={"src": vhost},
                              restore_definitions=False, checkpoint_state=str(tmp_path / "r.db"))

    # When it is planned and restored into the session's broker
    run = RestoreRun(broker.connection, settings)
    plan = run.plan()
    report = run.run()

    # Then the target delivers every message in the order the broker's version gives the stored order
    found = [view[0][0] for view in read_queue(broker.connection, vhost, "prio", "quorum", len(PRIORITIES))]
    assert report.published == len(PRIORITIES)
    assert found == expected
    # and the plan and the approval request warn exactly when that is not the source's order
    warning = plan.queues[0].delivery_order_warning
    body = approval_body(plan, settings, "rabbitmq_default")
    assert (warning is not None) == (found != stored), (source_version, broker.version, warning)
    assert plan.source_rabbitmq_version == source_version and plan.target_rabbitmq_version == broker.version
    if warning:
        assert f"RabbitMQ {source_version} quorum queues" in warning and f"RabbitMQ {broker.version}" in warning
        assert f"    WARNING: {warning}" in summary_lines(plan)
        assert "### Delivery order (1 queues)" in body and warning in body
    else:
        assert "### Delivery order" not in body
