"""Broker-facing operators: errors become Airflow errors that name the step, checkpoints stay per location."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.errors import BrokerUnreachableError
from airflow_rbak.capture.checkpoints import QueueProgress
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.operators.backup import RbakDiscoverQueuesOperator
from airflow_rbak.operators.steps import run_step


def _fail(exc: Exception):
    def action():
        raise exc
    return action


def test_a_bad_setting_fails_without_retry_and_a_broker_fault_says_a_rerun_resumes():
    with pytest.raises(AirflowFailException, match="rbak capture failed: invalid setting: window must be"):
        run_step("capture", _fail(ConfigurationError("window must be 1-65535")))
    with pytest.raises(AirflowException, match="rbak discover failed: management API .* unreachable.*re-run resumes"):
        run_step("discover", _fail(BrokerUnreachableError("management API at http://h:1 is unreachable")))


def test_the_same_backup_id_in_two_locations_keeps_separate_checkpoints(tmp_path):
    def checkpoints(url: str):
        return BackupRun(RabbitMQConnection(), BackupSettings("b", url)).checkpoints()

    writer = BackupRun(RabbitMQConnection(), BackupSettings("b", (tmp_path / "a").as_uri()))
    writer.lock.acquire()  # every write of a backup's task is made under its lock
    writer.checkpoints().save(QueueProgress("b", "/", "q", "classic", target_count=5, last_chunk=1))

    assert checkpoints((tmp_path / "a").as_uri()).get("b", "/", "q").last_chunk == 1
    assert checkpoints((tmp_path / "b").as_uri()).get("b", "/", "q") is None


def test_the_selector_comes_from_the_templated_lists():
    op = RbakDiscoverQueuesOperator(task_id="d", storage_url="memory://", backup_id="b", vhosts=["/"], include=["o*"],
                                    exclude=["x"], queue_types=["quorum"])

    selector = op.selector()

    assert (selector.vhosts, selector.include, selector.exclude, selector.queue_types) == (("/",), ("o*",), ("x",), ("quorum",))
