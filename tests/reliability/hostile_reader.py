"""Run one reader path over hostile backups in a process of its own and report how each was refused.

Usage: python -m tests.reliability.hostile_reader <path> <storage_url> <backup_id>...
Prints one JSON line per backup: the outcome (the typed error's class, or the defects a collecting
reader reported) and the process's peak resident set so far (``VmHWM``, bytes). Peak RSS, not
``tracemalloc``: decompressors allocate in C.
"""

from __future__ import annotations

import io
import sys

import orjson

from airflow_rbak.cli.main import main as rbak
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.rebuild import rebuild_manifest
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore.plan import QueuePlan, SegmentPlan, plan_restore
from airflow_rbak.restore.records import iter_window_records
from airflow_rbak.restore.request import RestoreRequest
from airflow_rbak.segments.verify import VerifyItem, check_group
from airflow_rbak.storage import open_storage
from tests.reliability.capture_worker import memory_status


def _validate(url: str, backup_id: str) -> list[str]:
    return [str(d) for d in validate_backup(open_storage(url), backup_id, deep=True).defects]


def _plan(url: str, backup_id: str) -> list[str]:
    plan_restore(open_storage(url), RestoreRequest(storage_url=url, backup_id=backup_id))
    return []


def _restore(url: str, backup_id: str) -> list[str]:
    """The publish side's reader, given a plan that trusts the segment (as if it changed after planning)."""
    storage = open_storage(url)
    queue = ManifestStore(storage).load(backup_id).queues[0]
    meta = queue.segments[0]
    segment = SegmentPlan(meta.key, 1, meta.record_count, 0, meta.record_count, meta.checksum)
    plan = QueuePlan(queue.vhost, queue.name, queue.vhost, queue.name, queue.queue_type, meta.record_count,
                     meta.record_count, (segment,))
    for _ in iter_window_records(storage, plan, RestoreRequest(storage_url=url, backup_id=backup_id)):
        pass
    return []


def _rebuild(url: str, backup_id: str) -> list[str]:
    return list(rebuild_manifest(open_storage(url), backup_id).unrecovered)


def _dump(url: str, backup_id: str) -> list[str]:
    key = ManifestStore(open_storage(url)).load(backup_id).queues[0].segments[0].key
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = io.StringIO(), io.StringIO()
    try:
        code = rbak(["segment", "dump", f"{url}/{key}"])
        message = sys.stderr.getvalue()
    finally:
        sys.stdout, sys.stderr = saved
    return [message.strip()] if code else []


def _spark_verify(url: str, backup_id: str) -> list[str]:
    """What each Spark verify task runs on its group of segments."""
    queue = ManifestStore(open_storage(url)).load(backup_id).queues[0]
    item = VerifyItem(queue.vhost, queue.name, queue.segments[0].to_json())
    return [f"{result['key']}: {d}" for result in check_group(url, [item]) for d in result["defects"]]


PATHS = {"validate": _validate, "plan": _plan, "restore": _restore, "rebuild": _rebuild, "dump": _dump,
         "spark_verify": _spark_verify}


def main(argv: list[str]) -> int:
    path, url, *backup_ids = argv
    for backup_id in backup_ids:
        try:
            outcome = {"defects": PATHS[path](url, backup_id)}
        except RbakError as exc:
            outcome = {"error": type(exc).__name__, "message": str(exc)}
        sys.stdout.write(orjson.dumps({"backup_id": backup_id, **outcome, "peak_rss": memory_status("VmHWM")}).decode() + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
