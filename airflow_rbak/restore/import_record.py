"""The import record: what a definitions import created and replaced, on which cluster, for which restore run.

A restore writes one beside each rollback snapshot (:mod:`.definitions`), sealed; ``rbak definitions rollback``
(:mod:`.rollback`) acts on it. Besides the snapshot's pin and the objects, it names the cluster the import changed
(``cluster``: :meth:`~airflow_rbak.broker.management.ManagementClient.cluster_identity`, the identity restore
checkpoints are keyed by; ``cluster_name`` only for people) and the restore run that wrote it (``run``): a rollback
acts only on the cluster the import was made on, and a person can name the run to undo.

A run reference is ``airflow:<dag_id>/<run_id>`` for a restore run in Airflow (:func:`airflow_run_ref`), else
``cli:<timestamp>-<random>`` (:func:`local_run_ref`: ``rbak restore``, library callers).
"""

from __future__ import annotations

import secrets
from datetime import datetime, timezone
from typing import Any

from airflow_rbak.display import printable

#: The seal purpose of an import record.
IMPORT_RECORD = "definitions-import-record"
#: The longest cluster identity, cluster name or run reference a record may hold (a run id is at most 250
#: characters in Airflow; ``dag_id`` likewise).
MAX_NAME_CHARS = 600


def airflow_run_ref(dag_id: str, run_id: str) -> str:
    """The reference of a restore run in Airflow, as its import record names it: ``airflow:<dag_id>/<run_id>``."""
    return f"airflow:{dag_id}/{run_id}"


def local_run_ref(now: datetime | None = None) -> str:
    """A new reference for a restore run outside Airflow: ``cli:<UTC timestamp>-<8 random hex digits>``."""
    now = now or datetime.now(timezone.utc)
    return f"cli:{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z-{secrets.token_hex(4)}"


def import_record_key(rollback_key: str) -> str:
    """Where the list of what an import created and replaced is kept, beside its rollback snapshot."""
    head, _, name = rollback_key.rpartition("/rollback-before-import-")
    return f"{head}/import-record-{name.split('.', 1)[0]}.json"


def record_body(snapshot_key: str, pin: dict[str, Any], mode: str, created: list[tuple[str, dict[str, Any]]],
                replaced: list[tuple[str, dict[str, Any]]], cluster: str, cluster_name: str | None,
                run_ref: str) -> dict[str, Any]:
    """The record of one import, as sealed: the snapshot's pin, the target cluster and run, what it changes."""
    return {"snapshot": snapshot_key, "snapshot_sha256": pin["sha256"], "snapshot_size": pin["size"],
            "cluster": cluster, "cluster_name": cluster_name, "run": run_ref, "mode": mode,
            "created": [{"kind": k, "item": i} for k, i in created],
            "replaced": [{"kind": k, "item": i} for k, i in replaced]}


def shown(value: Any) -> str:
    """A record's name field as an error or a listing shows it: escaped, and at most :data:`MAX_NAME_CHARS`."""
    return printable(value)[:MAX_NAME_CHARS] if isinstance(value, str) else "(none)"


def cluster_label(identity: Any, name: Any) -> str:
    """``'rabbit@prod' (id 8f3c...)``: a cluster as people read it, its name first, the identity that decides."""
    return f"'{shown(name)}' (id {shown(identity)})"


def cluster_refusal(record: dict[str, Any], key: str, here: str, here_name: str | None) -> str | None:
    """Why the record at ``key`` must not be rolled back on the cluster ``here`` (None: it was written for it)."""
    run, cluster = shown(record.get("run")), record.get("cluster")
    reaches = f"the connection reaches cluster {cluster_label(here, here_name)}"
    if not isinstance(cluster, str) or not cluster:
        return (f"{key} names no cluster (written by an older version): a rollback cannot tell which cluster its "
                f"import changed, and {reaches}; nothing was changed. Roll that import back by hand from its snapshot")
    if cluster != here:
        return (f"{key} is the import record of restore run {run} into cluster "
                f"{cluster_label(cluster, record.get('cluster_name'))}, but {reaches}: a rollback undoes an import "
                "only on the cluster it changed; nothing was changed. Connect to that cluster, or name the import "
                "made on this one (--restore-run, --snapshot)")
    return None
