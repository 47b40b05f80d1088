"""What the operators' tasks do the same way, whichever DAG they belong to.

Every operator runs its one step through :func:`run_step`, so an error of the layers below reaches Airflow as one
message naming the step, and a configuration error fails without retries; mapped tasks take their input in one
shape (:func:`mapped_payload`) and hand their results on flat (:func:`flat_results`); every task of one DAG run
works under the backup lock of one owner (:func:`lock_owner`, :func:`backup_run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowException, AirflowFailException

from airflow_rbak.airflow_settings import rbak_settings, state_seal
from airflow_rbak.backup.run import BackupAlreadyCompleteError, BackupRun, BackupSettings
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import group_queues
from airflow_rbak.capture.errors import ConsumerTimeoutError, UnsafeQueueError
from airflow_rbak.display import printable
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.lock import BackupLockedError

T = TypeVar("T")


def run_step(step: str, action: Callable[[], T]) -> T:
    """Run one step; turn RBAK errors into Airflow errors naming the step (no retry for bad settings)."""
    try:
        return action()
    except ConfigurationError as exc:
        raise AirflowFailException(printable(f"rbak {step} failed: invalid setting: {exc}")) from exc
    except (BackupLockedError, BackupAlreadyCompleteError, UnsafeQueueError, ConsumerTimeoutError) as exc:
        # a retry would only be refused again
        raise AirflowFailException(printable(f"rbak {step} failed: {exc}")) from exc
    except RbakError as exc:
        raise AirflowException(printable(f"rbak {step} failed: {exc}. A re-run resumes where this one stopped.")) from exc


def mapped_groups(items: list[T], max_tasks: int) -> list[list[T]]:
    """``items`` in at most ``max_tasks`` groups, and never more than Airflow maps (``[core] max_map_length``)."""
    from airflow.sdk.configuration import conf

    return run_step("grouping", lambda: group_queues(items, min(max_tasks, conf.getint("core", "max_map_length"))))


def mapped_payload(items: list[T], max_tasks: Any) -> list[list[T]]:
    """What a mapped task takes, always one shape: a group (list) of items per task, one item each without
    ``max_tasks``, else at most that many groups."""
    return [[item] for item in items] if max_tasks is None else mapped_groups(items, int(max_tasks))


def flat_results(results: Any) -> list[dict[str, Any]]:
    """A mapped task's results, one per item in order: each task returned its group's list."""
    results = results or []
    # Index by length: iterating Airflow's lazy XCom sequence probes one past the end (a logged 404).
    return [dict(r) for i in range(len(results)) for r in results[i]]


def lock_owner(context: Any) -> str:
    """The backup lock's owner for every task of one DAG run: ``<dag_id>/<run_id>``."""
    return f"{context['ti'].dag_id}/{context['run_id']}"


def backup_run(context: Any, connection: RabbitMQConnection | None, backup_id: str, storage_url: str,
               **settings: Any) -> BackupRun:
    """The :class:`BackupRun` of one task: settings validated before any I/O, the DAG run the lock's owner."""
    return run_step("setup", lambda: BackupRun(
        connection, BackupSettings(backup_id, storage_url, lock_owner=lock_owner(context), **settings), seal=state_seal(),
        state_dir=rbak_settings().state_dir()))
