"""The ``copy`` task: skipped without ``copy_to``; a copy verified at the destination; a damaged backup fails it."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from airflow_rbak.operators.second_copy import RbakCopyBackupOperator
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.storage import open_storage
from tests.repository.test_second_copy import damaged_source


def copy_task(source: str, backup_id: str, copy_to: str | None, retention=None) -> RbakCopyBackupOperator:
    return RbakCopyBackupOperator(task_id="copy", storage_url=source, backup_id=backup_id, copy_to=copy_to,
                                  copy_retention=retention)


def test_without_copy_to_the_task_is_skipped(tmp_path):
    with pytest.raises(AirflowSkipException, match="no copy_to"):
        copy_task((tmp_path / "a").as_uri(), "b1", None).execute({})


def test_the_backup_goes_to_copy_to_with_its_base_and_a_damaged_one_fails_the_task_without_retries(tmp_path):
    source, copy_to = (tmp_path / "source").as_uri(), (tmp_path / "copy").as_uri()
    damaged_source(source)

    done = copy_task(source, "sample-2", copy_to, {"keep_last": 5}).execute({})
    with pytest.raises(AirflowFailException, match="rbak copy refused: bad-1: bad-1/queues/.*damaged at the source"):
        copy_task(source, "bad-1", copy_to).execute({})

    assert done["copied"] == ["sample-1", "sample-2"] and done["refused"] == []
    assert {b.backup_id: b.status for b in list_backups(open_storage(copy_to))} == {"sample-1": "complete",
                                                                                   "sample-2": "complete"}
