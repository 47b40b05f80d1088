"""Where a search across backups runs: in this process for a small location, as a Spark job for a large one.

The rule is the encode's (:class:`~airflow_rbak.segments.stages.Placement`): ``auto`` keeps the work in process
while the segments' payloads (their ``uncompressed_bytes``, what is decompressed and parsed) add up to at most
``in_process_max_bytes``, since below that Spark's start-up costs more than the work it would spread;
``process`` and ``spark`` force either way. Both give the same result (:mod:`.jobs.search_messages`).

A Spark search is submitted by the caller's ``submit`` (:data:`SubmitJob`): the command line passes the provider's
hook (``hooks/spark.py``'s ``submit_application``), the one path to spark-submit the operators take too, which this
layer, below Airflow, cannot import.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import orjson

from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import FilterError, MessageFilter
from airflow_rbak.repository.message_search import search_backups
from airflow_rbak.segments.stages import Placement
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage, read_bounded

#: The Spark job (submitted as a file: importing it here would import pyspark's session code) and its result's key
#: in the ``--output`` folder.
JOB_FILE = Path(__file__).parent / "jobs" / "search_messages.py"
RESULT_KEY = "search-result.json"
#: The most bytes of a Spark search's result read back (its hits are at most ``limit``).
MAX_RESULT_BYTES = 256 * 1024**2


#: Runs a Spark application: (the job's file, its arguments, the master); raises when spark-submit fails.
SubmitJob = Callable[[str, Sequence[str], str], None]


class SearchJobError(RbakError):
    """The Spark search job failed; the submit's error says why."""


def payload_bytes(storage: Storage, backup_ids: Sequence[str]) -> int:
    """The segments' payload bytes of the backups (what a search decompresses and parses); unreadable manifests
    count nothing (the search names them)."""
    total, store = 0, ManifestStore(storage)
    for backup_id in backup_ids:
        try:
            manifest = store.load(backup_id)
        except RbakError:
            continue
        total += sum(s.uncompressed_bytes for q in manifest.queues for s in q.segments)
    return total


def choose_placement(storage: Storage, backup_ids: Sequence[str], placement: Placement) -> str:
    """``process`` or ``spark`` for this search; ``auto`` without ``spark-submit`` on the PATH stays in process."""
    if placement.mode != "auto":
        return placement.mode
    if placement.in_process(payload_bytes(storage, backup_ids)):
        return "process"
    return "spark" if spark_submit() else "process"


def run_search(
    storage_url: str, backup_ids: Sequence[str], message_filter: MessageFilter, *, limit: int, placement: str,
    master: str = "local[2]", cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES, submit: SubmitJob | None = None,
) -> dict[str, Any]:
    """The search's result as JSON (:meth:`SearchResult.to_json` with its ``hits``), from either placement; ``submit``
    runs the Spark job (required on Spark)."""
    if placement == "spark":
        if submit is None:
            raise ConfigurationError("a search on Spark needs a way to submit its job; search with placement process")
        return submit_search(storage_url, backup_ids, message_filter, limit=limit, master=master, cap=cap,
                             submit=submit)
    result = search_backups(open_storage(storage_url), backup_ids, message_filter, limit=limit, cap=cap)
    return {**result.to_json(), "hits": [hit.to_json() for hit in result.hits.values()]}


def spark_submit() -> str | None:
    """The ``spark-submit`` beside this interpreter (pyspark's), else the one on the PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else shutil.which("spark-submit")


def submit_search(
    storage_url: str, backup_ids: Sequence[str], message_filter: MessageFilter, *, limit: int, master: str,
    submit: SubmitJob, cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> dict[str, Any]:
    """Run the search job on ``master`` through ``submit`` and read its result from a private folder.

    A failed job that wrote its result (a filter it refused) is told by the result; one that wrote none, by the
    submit's error."""
    if spark_submit() is None:
        raise ConfigurationError("spark-submit is not installed here (pip install 'airflow-rbak[spark]'); "
                                 "search in this process with --placement process")
    with tempfile.TemporaryDirectory(prefix="rbak-search-") as folder:
        output = Path(folder).as_uri()
        argv = ["--storage-url", storage_url, "--output", output, "--filter",
                orjson.dumps(message_filter.to_params()).decode(), "--limit", str(limit), "--max-decompressed-bytes",
                str(cap)]
        for backup_id in backup_ids:
            argv += ["--backup-id", backup_id]
        failure: Exception | None = None
        try:
            submit(str(JOB_FILE), argv, master)
        except Exception as exc:  # the submitter's own error type (the provider's AirflowException): said below
            failure = exc
        try:
            body = orjson.loads(read_bounded(open_storage(output), RESULT_KEY, MAX_RESULT_BYTES, "a search result"))
        except RbakError:
            raise SearchJobError(f"the Spark search left no result: {failure or 'the job wrote none'}") from None
    if "error" in body:
        if body.get("field"):
            raise FilterError(body["field"], str(body["error"]).removeprefix(f"{body['field']}: "))
        raise SearchJobError(f"the Spark search failed: {body['error']}")
    return body

