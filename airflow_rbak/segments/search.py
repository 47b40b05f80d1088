"""Where a search across backups runs: in this process for a small location, as a Spark job for a large one.

The rule is the encode's (:class:`~airflow_rbak.segments.stages.Placement`): ``auto`` keeps the work in process
while the segments' payloads (their ``uncompressed_bytes``, what is decompressed and parsed) add up to at most
``in_process_max_bytes``, since below that Spark's start-up costs more than the work it would spread;
``process`` and ``spark`` force either way. Both give the same result (:mod:`.jobs.search_messages`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
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


class SearchJobError(RbakError):
    """The Spark search job failed; its stderr's tail says why."""


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
    master: str = "local[2]", cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> dict[str, Any]:
    """The search's result as JSON (:meth:`SearchResult.to_json` with its ``hits``), from either placement."""
    if placement == "spark":
        return submit_search(storage_url, backup_ids, message_filter, limit=limit, master=master, cap=cap)
    result = search_backups(open_storage(storage_url), backup_ids, message_filter, limit=limit, cap=cap)
    return {**result.to_json(), "hits": [hit.to_json() for hit in result.hits.values()]}


def spark_submit() -> str | None:
    """The ``spark-submit`` beside this interpreter (pyspark's), else the one on the PATH."""
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else shutil.which("spark-submit")


def submit_search(
    storage_url: str, backup_ids: Sequence[str], message_filter: MessageFilter, *, limit: int, master: str,
    cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> dict[str, Any]:
    """Run the search job with ``spark-submit --master MASTER`` and read its result from a private folder."""
    command = spark_submit()
    if command is None:
        raise ConfigurationError("spark-submit is not installed here (pip install 'airflow-rbak[spark]'); "
                                 "search in this process with --placement process")
    with tempfile.TemporaryDirectory(prefix="rbak-search-") as folder:
        output = Path(folder).as_uri()
        argv = [command, "--master", master, str(JOB_FILE), "--storage-url", storage_url, "--output", output,
                "--filter", orjson.dumps(message_filter.to_params()).decode(), "--limit", str(limit),
                "--max-decompressed-bytes", str(cap)]
        for backup_id in backup_ids:
            argv += ["--backup-id", backup_id]
        done = subprocess.run(argv, capture_output=True, text=True, env=_spark_env(), check=False)
        try:
            body = orjson.loads(read_bounded(open_storage(output), RESULT_KEY, MAX_RESULT_BYTES, "a search result"))
        except RbakError:
            raise SearchJobError(f"the Spark search ended with exit code {done.returncode} and no result: "
                                 f"{done.stderr[-2000:]}") from None
    if "error" in body:
        if body.get("field"):
            raise FilterError(body["field"], str(body["error"]).removeprefix(f"{body['field']}: "))
        raise SearchJobError(f"the Spark search failed: {body['error']}")
    return body


def _spark_env() -> dict[str, str]:
    """This interpreter for the job's driver and workers, so they import this airflow_rbak."""
    path = os.pathsep.join(p for p in sys.path if p and Path(p).is_dir() and (Path(p) / "airflow_rbak").is_dir())
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONWARNINGS": "ignore::FutureWarning",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    if path:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (path, os.environ.get("PYTHONPATH"))))
    return env
