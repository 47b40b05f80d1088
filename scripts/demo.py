"""The README's first command: a real backup and restore through the DAGs, on a private loopback RabbitMQ.

Starts the packaged broker (unless ``RABBITMQ_URL`` names one), seeds a vhost
``rbak-demo-<time>`` with a classic, a quorum and a stream queue of realistic
messages, runs ``airflow dags test rbak_backup`` and then ``airflow dags test
rbak_restore`` (into ``rbak-demo-<time>-restored``) in an isolated Airflow
under ``.run/demo`` (SQLite, connections as ``AIRFLOW_CONN_*``, Spark
``local[2]``), and prints the manifest summary, the verify result and a
per-queue comparison. Exit 0 only when every count matches.

Idempotent: each run deletes the ``rbak-demo*`` vhosts earlier runs left and
uses a fresh backup id. It stops the broker only if it started it, and
deletes its vhosts at the end unless ``--keep``. ``STORAGE_URL`` stores the
backup elsewhere (default ``.run/demo/backups``, where the three newest demo
backups are kept); ``RBAK_DEMO_DIR`` moves ``.run/demo`` itself.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pika  # noqa: E402
import pika.exceptions  # noqa: E402
import requests  # noqa: E402
from demo_messages import QUEUES, seed_messages  # noqa: E402  (beside this script)

from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.stream_protocol import stream_tail  # noqa: E402
from airflow_rbak.codec import BackupManifest  # noqa: E402
from airflow_rbak.exceptions import RbakError  # noqa: E402
from airflow_rbak.repository.manifest_store import ManifestStore  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.dags.airflow_env import VENV_BIN, airflow_env, dags_test, run, runs_facts  # noqa: E402

# Each run seeds a vhost of its own: a stream re-created under a name an earlier backup in the same location
# holds would be backed up from that backup's last offset on (incremental streams), i.e. not at all.
PREFIX = "rbak-demo"
WORK = Path(os.environ.get("RBAK_DEMO_DIR") or REPO / ".run" / "demo")
SCRIPT = REPO / "scripts" / "rabbitmq.sh"


def _shown(path: Path) -> Path:
    """A path as the user finds it: relative to the checkout when it lies inside it."""
    return path.relative_to(REPO) if path.is_relative_to(REPO) else path


class DemoError(Exception):
    """A step of the demo failed; the message says which and where to look."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the demo vhosts and a broker the demo started")
    args = parser.parse_args(argv)
    began = time.monotonic()
    connection, started = None, False
    try:
        connection, started = _broker()
        ok = _demo(connection)
        print(f"\ndemo {'passed' if ok else 'FAILED'} in {time.monotonic() - began:.0f} s")
        return 0 if ok else 1
    except (DemoError, RbakError, requests.RequestException, pika.exceptions.AMQPError, subprocess.CalledProcessError,
            OSError) as exc:
        reason = str(exc) if isinstance(exc, DemoError) else f"{type(exc).__name__}: {exc}"
        print(f"\ndemo failed: {reason}", file=sys.stderr)
        return 1
    finally:
        if connection is not None and not args.keep:
            _cleanup(connection, started)


def _demo(connection: RabbitMQConnection) -> bool:
    """Seed, back up, restore, compare; True when every count matches."""
    storage_url = os.environ.get("STORAGE_URL") or (WORK / "backups").as_uri()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    backup_id, source = f"demo-{stamp}", f"{PREFIX}-{stamp}"
    target = f"{source}-restored"
    _reset_vhosts(connection, source)
    env = _airflow(connection)
    seed_messages(connection, source)
    before = _depths(connection, source, expected={name: count for name, _, count in QUEUES})
    print(f"seeded vhost {source}: " + ", ".join(f"{n} ({t}) {before[n]}" for n, t, _ in QUEUES))

    retention = None if os.environ.get("STORAGE_URL") else {"keep_last": 3}
    _dags_test(env, "rbak_backup", {"storage_url": storage_url, "backup_id": backup_id, "vhosts": [source],
                                    "retention": retention})
    after = _depths(connection, source, expected=before)
    checkpoints = WORK / "restore-checkpoints" / f"{backup_id}.db"
    _dags_test(env, "rbak_restore", {"storage_url": storage_url, "backup_id": backup_id, "vhosts": [source],
                                     "vhost_map": {source: target}, "restore_definitions": True,
                                     "checkpoint_state": str(checkpoints),
                                     "skip_approval": True})  # `dags test` runs unattended: nobody to approve
    restored = _depths(connection, target, expected=before)
    facts = _facts(env)

    manifest = ManifestStore(open_storage(storage_url)).load(backup_id)
    _print_manifest(manifest, storage_url)
    verified = _print_verify(facts["rbak_backup"]["xcom"].get("encode[-1].return_value") or {})
    report = facts["rbak_restore"]["xcom"].get("report[-1].return_value") or {}
    matched = _print_comparison(target, before, after, manifest, report, restored)
    print(f"\ninspect: .venv/bin/rbak describe --path {storage_url} --backup-id {backup_id}")
    return verified and matched


def _broker() -> tuple[RabbitMQConnection, bool]:
    """The broker to use, and whether the demo started it (``RABBITMQ_URL`` or the private node)."""
    if shutil.which("java") is None:
        raise DemoError("Spark needs Java 17 (apt-get install openjdk-17-jre-headless)")
    if os.environ.get("RABBITMQ_URL"):
        connection = RabbitMQConnection.from_url(os.environ["RABBITMQ_URL"])
        print(f"broker: {connection.management_base_url} (RABBITMQ_URL)")
        return connection, False
    # RBAK_RABBITMQ_VERSION=4.0|4.3 runs the node in a chroot scripts/rabbitmq.sh builds; 3.10 is the host's package
    series = os.environ.get("RBAK_RABBITMQ_VERSION", "3.10")
    if (series == "3.10" and shutil.which("rabbitmq-server") is None) or os.geteuid() != 0:
        raise DemoError("no RABBITMQ_URL, and starting the private broker needs rabbitmq-server and root "
                        "(apt-get install rabbitmq-server; see scripts/rabbitmq.sh)")
    connection = RabbitMQConnection(amqp_port=int(os.environ.get("RBAK_AMQP_PORT", 5672)),
                                    management_port=int(os.environ.get("RBAK_MGMT_PORT", 15672)),
                                    stream_port=int(os.environ.get("RBAK_STREAM_PORT", 5552)))
    running = subprocess.run([str(SCRIPT), "status"], capture_output=True).returncode == 0
    if not running:
        subprocess.run([str(SCRIPT), "start"], check=True)
    print(f"broker: private RabbitMQ {series} node on 127.0.0.1:{connection.amqp_port} "
          f"({'already running' if running else 'started'})")
    return connection, not running


def _airflow(connection: RabbitMQConnection) -> dict[str, str]:
    """The isolated Airflow's environment, its database migrated (a few seconds; idempotent)."""
    home = WORK / "airflow"
    home.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(WORK / "restore-checkpoints", ignore_errors=True)
    # the demo's restore runs unattended (`dags test`), which the administrator's option must allow (docs/security.md)
    env = airflow_env(home, AIRFLOW_CONN_RABBITMQ_DEFAULT=json.dumps(_airflow_connection(connection)),
                      AIRFLOW__RBAK__ALLOW_SKIP_APPROVAL="True")
    stamp = home / f".migrated-{importlib.metadata.version('apache-airflow')}"
    if not (stamp.exists() and (home / "airflow.db").exists()):  # a re-run skips migrating (5-15 s) unless Airflow changed
        done = run([str(VENV_BIN / "airflow"), "db", "migrate"], env, timeout=300)
        if done.returncode != 0:
            raise DemoError(f"airflow db migrate failed: {(done.stdout + done.stderr)[-2000:]}")
        stamp.touch()
    return env


def _facts(env: dict[str, str]) -> dict[str, Any]:
    """The latest runs of both DAGs (states and XComs) from the demo Airflow's database."""
    try:
        return runs_facts(env, "rbak_backup", "rbak_restore")
    except AssertionError as exc:
        raise DemoError(f"could not read the DAG runs from .run/demo/airflow/airflow.db: {exc}") from None


def _airflow_connection(c: RabbitMQConnection) -> dict[str, Any]:
    """``c`` as an ``AIRFLOW_CONN_RABBITMQ_DEFAULT`` value (the ``rabbitmq`` connection type's JSON form)."""
    extra = {"management_port": c.management_port, "stream_port": c.stream_port, "tls": c.tls,
             "tls_verify": c.tls_verify, "timeout": c.timeout, "management_url": c.management_url,
             "ca_file": c.ca_file, "cert_file": c.cert_file, "key_file": c.key_file}
    return {"conn_type": "rabbitmq", "host": c.host, "port": c.amqp_port, "login": c.username, "password": c.password,
            "extra": {k: v for k, v in extra.items() if v is not None}}


def _dags_test(env: dict[str, str], dag_id: str, conf: dict[str, Any]) -> None:
    """``airflow dags test dag_id -c conf``, its output in ``.run/demo/logs``; raises DemoError when it fails."""
    log = WORK / "logs" / f"{dag_id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    print(f"airflow dags test {dag_id} ... ", end="", flush=True)
    began = time.monotonic()
    done = dags_test(env, conf, dag_id=dag_id)
    log.write_text(done.stdout + done.stderr)
    print(f"{'ok' if done.returncode == 0 else 'FAILED'} in {time.monotonic() - began:.0f} s (log: {_shown(log)})")
    if done.returncode != 0:
        raise DemoError(f"{dag_id} failed; the end of its log:\n{(done.stdout + done.stderr)[-3000:]}")


def _api(c: RabbitMQConnection, method: str, path: str, **kwargs: Any) -> requests.Response:
    response = requests.request(method, f"{c.management_base_url}/api/{path}", auth=(c.username, c.password),
                                timeout=60, **kwargs)
    if response.status_code >= 400 and not (method == "DELETE" and response.status_code == 404):
        raise DemoError(f"management API {method} /api/{path}: HTTP {response.status_code} {response.text[:200]}")
    return response


def _demo_vhosts(c: RabbitMQConnection) -> list[str]:
    """The vhosts demo runs made (``rbak-demo-*``; ``rbak-demo`` itself from older versions of the demo)."""
    names = [v["name"] for v in _api(c, "GET", "vhosts").json()]
    return [n for n in names if n == PREFIX or n.startswith(f"{PREFIX}-")]


def _reset_vhosts(c: RabbitMQConnection, source: str) -> None:
    """Demo vhosts of earlier runs deleted, ``source`` created empty with full permissions."""
    for vhost in _demo_vhosts(c):
        _api(c, "DELETE", f"vhosts/{quote(vhost, safe='')}")
    _api(c, "PUT", f"vhosts/{quote(source, safe='')}", json={})
    _api(c, "PUT", f"permissions/{quote(source, safe='')}/{quote(c.username, safe='')}",
         json={"configure": ".*", "write": ".*", "read": ".*"})


def _depths(c: RabbitMQConnection, vhost: str, expected: dict[str, int], wait: float = 30) -> dict[str, int]:
    """Each demo queue's message count in ``vhost``, read until it equals ``expected`` or ``wait`` runs out."""
    deadline = time.monotonic() + wait
    while True:
        with pika.BlockingConnection(c.pika_parameters(vhost)) as conn:
            found = {name: _depth(conn, c, vhost, name, kind) for name, kind, _ in QUEUES}
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _depth(conn: pika.BlockingConnection, c: RabbitMQConnection, vhost: str, name: str, kind: str) -> int:
    if kind == "stream":  # AMQP reports no depth for streams: read the tail over the stream protocol
        tail = stream_tail(c, vhost, name, wait=2.0)
        return 0 if tail is None else tail + 1
    channel = conn.channel()
    try:
        return int(channel.queue_declare(name, passive=True).method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return 0


def _print_manifest(manifest: BackupManifest, storage_url: str) -> None:
    state = "complete" if manifest.completed_at is not None else "INCOMPLETE"
    print(f"\nbackup {manifest.backup_id} ({state}) in {storage_url}")
    print(f"  {'queue':16} {'type':8} {'messages':>9} {'segments':>9} {'bytes':>10}")
    for q in manifest.queues:
        size = sum(s.size_bytes for s in q.segments)
        print(f"  {q.name:16} {q.queue_type:8} {q.message_count:9,} {len(q.segments):9} {size:10,}")
    print(f"  {'total':16} {'':8} {manifest.total_messages:9,} {manifest.total_segments:9} {manifest.total_bytes:10,}")


def _print_verify(encoded: dict[str, Any]) -> bool:
    """The encode task's verify of every segment it listed (in the capture tasks or on Spark: ``ran``)."""
    summary = encoded.get("verify") or {}
    ok = summary.get("ok") is True and summary.get("segments_checked") == encoded.get("segments")
    print(f"verify ({summary.get('mode', '?')}, {' and '.join(encoded.get('ran') or ['?'])}): {'ok' if ok else 'FAILED'}: "
          f"{summary.get('segments_checked')} of {encoded.get('segments')} segments, "
          f"{summary.get('records_checked')} records checked, {summary.get('segments_failed')} failed")
    for defect in summary.get("defects") or []:
        print(f"  {defect['key']}: {defect['reason']}")
    return ok


def _print_comparison(target: str, before: dict[str, int], after: dict[str, int], manifest: BackupManifest,
                      report: dict[str, Any], restored: dict[str, int]) -> bool:
    """Per queue: source depth before and after the backup, backed up, published by the restore, target depth."""
    backed_up = {q.name: q.message_count for q in manifest.queues}
    published = {r["source_queue"]: r["published"] for r in report.get("queues", [])}
    print(f"\nrestore into vhost {target}:")
    print(f"  {'queue':16} {'source':>7} {'after backup':>13} {'backed up':>10} {'published':>10} {'restored':>9}")
    ok = True
    for name, _, _ in QUEUES:
        row = [before[name], after[name], backed_up.get(name, 0), published.get(name, 0), restored[name]]
        same = len(set(row)) == 1
        ok &= same
        print(f"  {name:16} " + " ".join(f"{v:>{w},}" for v, w in zip(row, (7, 13, 10, 10, 9))) + ("" if same else "  MISMATCH"))
    total = sum(before.values())
    print(f"result: {'backup and restore counts match' if ok else 'COUNTS DIFFER'} ({total:,} messages in {len(QUEUES)} queues)")
    return ok


def _cleanup(c: RabbitMQConnection, started: bool) -> None:
    """Stop the broker the demo started; otherwise delete the demo vhosts it made on someone else's broker."""
    if started:
        subprocess.run([str(SCRIPT), "stop"], check=False)
        return
    try:
        for vhost in _demo_vhosts(c):
            _api(c, "DELETE", f"vhosts/{quote(vhost, safe='')}")
    except (DemoError, requests.RequestException) as exc:
        print(f"could not delete the demo vhosts ({type(exc).__name__})", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
