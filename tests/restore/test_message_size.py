"""A backup holding a message larger than the target's ``max_message_size`` is refused in the plan, on RabbitMQ 4.0 and 4.3.

RabbitMQ 4.0 lowered ``max_message_size`` to 16 MiB (128 MiB before) and closes the channel of a publish over it. A
restore that met such a record half-way once waited 120 s for confirms that never came and left part of the queue
behind. So the plan lists the large records while it verifies the segments, reads the target's limit (the node
announces it over AMQP 1.0: ``broker/message_size_limit.py``) and refuses naming each record and the limit; the
approval request and a dry run show the same. A channel the broker closes is reported as that, with its reply.
"""

from __future__ import annotations

import pytest

from airflow_rbak.broker.message_size_limit import DEFAULT_FROM_4, probe_max_message_size
from airflow_rbak.codec import BackupRecord
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.approval import approval_body
from airflow_rbak.restore.errors import PublishError, RestoreRefusedError
from airflow_rbak.restore.size_limits import summary_lines
from airflow_rbak.storage import open_storage
from tests.repository.backup_writer import BackupWriter
from tests.restore.helpers import read_queue, ready_count

#: 3.10 (128 MiB, taken at the version's default) is held to in tests/broker/test_message_size_limit.py.
pytestmark = [pytest.mark.broker, pytest.mark.rabbitmq("4.0", "4.3")]

MiB = 1024 * 1024
BIG = 20 * MiB
#: Five messages, the third of them 20 MiB: over 4.x's default limit, under 3.x's.
SIZES = (100, 200, BIG, 300, 400)


def body(i: int, size: int) -> bytes:
    return bytes([65 + i]) * size


def write_backup(location: str, vhost: str = "src") -> str:
    writer = BackupWriter(open_storage(location), "big-1", source_cluster="rabbit@old", rabbitmq_version="3.10.8")
    sink = writer.queue(vhost, "big")
    sink.add_all(BackupRecord(body(i, size), routing_key="big", backed_up_at=1_000 + i, source_queue="big",
                              source_vhost=vhost) for i, size in enumerate(SIZES))
    sink.close()
    writer.finish()
    return "big-1"


def set_limit(broker, size: int) -> None:
    """The node's max_message_size at run time (4.x keeps it in a persistent term; test-only)."""
    broker.eval(f"persistent_term:put(max_message_size, {size}).")


def settings(tmp_path, vhost: str, **kwargs) -> RestoreRequest:
    """Restore the backup's vhost ``src`` into ``vhost`` (an existing, empty vhost)."""
    return RestoreRequest((tmp_path / "b").as_uri(), backup_id="big-1", vhosts=["src"], vhost_map={"src": vhost},
                          restore_definitions=False, checkpoint_state=str(tmp_path / "restore.db"), **kwargs)


@pytest.fixture
def default_limit(broker):
    set_limit(broker, DEFAULT_FROM_4)
    yield
    set_limit(broker, DEFAULT_FROM_4)


def test_the_node_announces_its_max_message_size_over_amqp_1_0(broker, vhost, default_limit):
    assert probe_max_message_size(broker.connection, vhost) == DEFAULT_FROM_4
    set_limit(broker, 32 * MiB)
    assert probe_max_message_size(broker.connection, vhost) == 32 * MiB


def test_a_message_over_the_targets_limit_is_refused_in_the_plan_and_nothing_is_published(
        broker, vhost, tmp_path, default_limit):
    # Given a backup (as if taken on 3.10) holding one 20 MiB message among four small ones, and a 4.x target
    write_backup((tmp_path / "b").as_uri())
    assert broker.api("GET", f"queues/{vhost}").json() == []

    # When it is planned as a dry run, then restored
    dry = RestoreRun(broker.connection, settings(tmp_path, vhost, dry_run=True)).plan()
    with pytest.raises(RestoreRefusedError) as refused:
        RestoreRun(broker.connection, settings(tmp_path, vhost)).run()

    # Then the plan names the record (queue, segment, index, size) and the limit the node announced
    queue = dry.queues[0]
    assert [(index, size) for _key, index, size in queue.large_messages] == [(2, BIG)]
    assert (dry.target_max_message_size, "AMQP 1.0" in (dry.target_message_size_source or "")) == (DEFAULT_FROM_4, True)
    key = queue.large_messages[0][0]
    assert f"  TOO LARGE for the target: {vhost}/big segment {key} record 2: {BIG} bytes" in summary_lines(dry)
    message = str(refused.value)
    assert f"max_message_size of {DEFAULT_FROM_4} bytes" in message
    assert f"{vhost}/big segment {key} record 2: {BIG} bytes" in message
    assert "Nothing was imported or published" in message
    # the approval request shows it too
    body_md = approval_body(dry, settings(tmp_path, vhost), "rabbitmq_default")
    assert f"1 records are larger than the target's max_message_size ({DEFAULT_FROM_4} bytes)" in body_md
    assert f"record 2: {BIG} bytes" in body_md
    # and the target is as it was: no queue was declared, nothing published
    assert broker.api("GET", f"queues/{vhost}").json() == []


def test_with_the_targets_limit_raised_the_same_backup_restores_byte_exact(broker, vhost, tmp_path,
                                                                           default_limit):
    write_backup((tmp_path / "b").as_uri())
    set_limit(broker, 32 * MiB)

    report = RestoreRun(broker.connection, settings(tmp_path, vhost)).run()

    assert (report.published, report.refused) == (len(SIZES), None)
    views = read_queue(broker.connection, vhost, "big", "classic", len(SIZES))
    assert [v[0] for v in views] == [body(i, size) for i, size in enumerate(SIZES)]


def test_a_channel_the_broker_closes_is_reported_with_its_reply_not_as_a_confirm_timeout(
        broker, vhost, tmp_path, default_limit):
    # Given a plan made while the target took 32 MiB, and the limit lowered again before publishing
    write_backup((tmp_path / "b").as_uri())
    set_limit(broker, 32 * MiB)
    run = RestoreRun(broker.connection, settings(tmp_path, vhost))
    plan = run.plan()
    set_limit(broker, DEFAULT_FROM_4)

    # When the queue is published
    with pytest.raises(PublishError) as failed:
        run.publish(plan, plan.queues[0])

    # Then the error is the broker's channel close with its reply, and the two messages before it are in the target
    message = str(failed.value)
    assert "the broker closed the channel" in message and "reply 406" in message, message
    assert "not confirmed within" not in message
    assert ready_count(broker.connection, vhost, "big") == 2
