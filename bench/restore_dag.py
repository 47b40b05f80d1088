"""A whole ``rbak_restore`` DAG run (``airflow dags test``) beside as many bare confirmed publishers at once.

``--queues`` classic queues of ``--count`` persistent 1 KiB messages are backed up once (``BackupRun``, file
storage). Each round then times, back to back on the same broker:

* ``airflow dags test rbak_restore`` of that backup into a new vhost: plan, approval (``skip_approval``, as the
  DAG tests give it: ``dags test`` cannot wait for a person), definitions included, publish tasks (``dags test`` runs them one after another), each
  publishing its group of queues ``--publish-threads`` at once (the DAG's ``publish_threads``; the plan groups up
  to that many queues per task; ``--before``'s tree is given it only with ``--before-threads``), report. Timed from the command's start to its end; its CPU is the
  command's and every process it waited for, plus the broker's;
* the baseline: one bare pika publisher per queue, all at once (a process each, released together), each
  publishing the same bodies into an empty queue with publisher confirms and ``--in-flight`` unconfirmed at most,
  all confirms awaited (``bench/restore.py``'s pipelined publisher). Timed from the release to the last confirm;
  its CPU is the publishers' plus the broker's.

The restore's CPU divided by the cores is the shortest wall time its work allows on this machine however well it
overlaps; over the baseline's wall time it is the ``cpu_bound`` ratio (as ``docs/performance.md`` gives it for the
backup). ``--before DIR`` runs the same DAG from another checkout too, in the same rounds (alternating first).
Figures are medians over ``--repeat`` rounds; a ratio is the median of the per-round ratios.

    .venv/bin/python bench/restore_dag.py --queues 10 --count 100000 --repeat 3 [--before /path/to/main] \
        [--amqp-url amqp://guest:guest@127.0.0.1:5672/?management_port=15672]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from backup_e2e import broker_cpu_seconds  # noqa: E402
from restore import ScratchVhosts, management, pipelined_publish  # noqa: E402

from airflow_rbak.backup.run import BackupRun, BackupSettings  # noqa: E402
from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.discovery import QueueSelector  # noqa: E402
from tests.dags.airflow_env import VENV_BIN, airflow_env, rabbitmq_conn, run, run_facts  # noqa: E402

BACKUP_ID = "bench-dag-1"
PHASES = ("plan", "approve", "definitions", "publish", "report")
_TIMES = r'''
import json
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    run = s.query(DagRun).filter(DagRun.dag_id == "rbak_restore").order_by(DagRun.id.desc()).first()
    rows = s.query(TaskInstance).filter(TaskInstance.dag_id == "rbak_restore", TaskInstance.run_id == run.run_id).all()
    print(json.dumps([[t.task_id, t.start_date.timestamp(), t.end_date.timestamp()] for t in rows]))
'''


def children_cpu_seconds() -> float:
    """Core-seconds of every process this one has waited for (and those they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def phase_times(rows: list[list[Any]]) -> dict[str, float]:
    """Wall seconds per phase (first start to last end of its tasks), and from the plan's start to the report's end."""
    spans: dict[str, list[float]] = {}
    for task_id, start, end in rows:
        span = spans.setdefault(task_id, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    times = {f"{p}_s": spans[p][1] - spans[p][0] for p in PHASES if p in spans}
    times["tasks_s"] = spans["report"][1] - spans["plan"][0]
    return times


def dag_restore(tree: Path, home: Path, connection: RabbitMQConnection, conf: dict[str, Any]) -> dict[str, float]:
    """``airflow dags test rbak_restore`` from checkout ``tree``: its wall time, core-seconds (broker included) and
    the tasks' phases; every record must be published."""
    env = airflow_env(home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        connection.host, connection.amqp_port, connection.management_port, connection.stream_port,
        connection.username, connection.password),
        AIRFLOW__CORE__DAGS_FOLDER=str(tree / "dags"), PYTHONPATH=str(tree))
    if not (home / "airflow.db").exists():
        assert run([str(VENV_BIN / "airflow"), "db", "migrate"], env).returncode == 0
    cpu = children_cpu_seconds() + broker_cpu_seconds(connection.amqp_port)
    started = time.perf_counter()
    done = run([str(VENV_BIN / "airflow"), "dags", "test", "rbak_restore", "-c", json.dumps(conf)], env, timeout=3600)
    seconds = time.perf_counter() - started
    cpu = children_cpu_seconds() + broker_cpu_seconds(connection.amqp_port) - cpu
    if done.returncode != 0:
        raise SystemExit(f"rbak_restore from {tree} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    report = run_facts(env, dag_id="rbak_restore")["xcom"]["report[-1].return_value"]
    assert report["published"] == report["planned"] > 0, report
    rows = json.loads(run([str(VENV_BIN / "python"), "-c", _TIMES], env).stdout.strip().splitlines()[-1])
    return {"seconds": seconds, "cpu": cpu, **phase_times(rows)}


def _bare_one(url: str, vhost: str, queue: str, count: int, in_flight: int, go: Any, out: Any) -> None:
    """One bare publisher (a process of its own): connected and its messages built before the release."""

    def ready() -> None:
        out.put("ready")
        go.wait()

    seconds = pipelined_publish(RabbitMQConnection.from_url(url), vhost, queue, count, in_flight, gate=ready)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((seconds, usage.ru_utime + usage.ru_stime))


def bare_at_once(url: str, connection: RabbitMQConnection, vhost: str, queues: int, count: int,
                 in_flight: int) -> dict[str, float]:
    """``queues`` bare publishers at once, one queue each: wall seconds from their release to the last confirm, and
    core-seconds (theirs and the broker's)."""
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_bare_one, args=(url, vhost, f"bare-{q}", count, in_flight, go, out))
             for q in range(queues)]
    for p in procs:
        p.start()
    for _ in procs:  # every publisher connected and its messages built (not timed)
        assert out.get(timeout=600) == "ready"
    broker = broker_cpu_seconds(connection.amqp_port)
    started = time.perf_counter()
    go.set()
    results = [out.get(timeout=3600) for _ in procs]
    seconds = time.perf_counter() - started
    broker = broker_cpu_seconds(connection.amqp_port) - broker
    for p in procs:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return {"seconds": seconds, "slowest_own_s": max(r[0] for r in results),
            "cpu": broker + sum(r[1] for r in results)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--count", type=int, default=100000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--in-flight", type=int, default=1000)
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    parser.add_argument("--before", type=Path, help="another checkout whose rbak_restore is timed in the same rounds")
    parser.add_argument("--publish-threads", type=int, default=4,
                        help="the DAG's publish_threads param (queues a publish task publishes at once; default 4)")
    parser.add_argument("--before-threads", action="store_true",
                        help="give --before's DAG publish_threads too (a checkout that knows the param)")
    args = parser.parse_args(argv)
    connection = RabbitMQConnection.from_url(args.amqp_url)
    with ScratchVhosts(connection) as scratch, tempfile.TemporaryDirectory() as tmp:
        return _bench(connection, scratch.make("bench-src"), Path(tmp), args, scratch)


def _bench(connection: RabbitMQConnection, source: str, tmp: Path, args: argparse.Namespace,
           scratch: ScratchVhosts) -> int:
    base, auth = management(connection)
    for q in range(args.queues):
        pipelined_publish(connection, source, f"q-{q}", args.count, args.in_flight)
    location = (tmp / "backups").as_uri()
    BackupRun(connection, BackupSettings(BACKUP_ID, location, selector=QueueSelector(vhosts=(source,)))).run()
    for q in range(args.queues):  # the broker's memory back
        requests.delete(f"{base}/queues/{source}/q-{q}/contents", auth=auth, timeout=120)
    trees = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}
    rows: list[dict[str, float]] = []
    for r in range(args.repeat):
        row: dict[str, float] = {"load_1m": psutil.getloadavg()[0]}
        for name in (list(trees) if r % 2 == 0 else list(reversed(trees))):
            target = scratch.name(f"bench-{name}-{r}")
            conf = {"storage_url": location, "backup_id": BACKUP_ID, "vhosts": [source], "vhost_map": {source: target},
                    "restore_definitions": True, "checkpoint_state": str(tmp / f"{target}.db"), "skip_approval": True}
            if name == "after" or args.before_threads:
                conf["publish_threads"] = args.publish_threads
            measured = dag_restore(trees[name], tmp / f"home-{name}", connection, conf)
            row.update({f"{name}_{k}": v for k, v in measured.items()})
            scratch.drop(target)
        bare = scratch.make(f"bench-bare-{r}")
        measured = bare_at_once(args.amqp_url, connection, bare, args.queues, args.count, args.in_flight)
        row.update({f"bare_{k}": v for k, v in measured.items()})
        scratch.drop(bare)
        row["load_1m_after"] = psutil.getloadavg()[0]
        rows.append(row)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(row.items())), flush=True)
    cores = psutil.cpu_count()
    summary = {k: round(statistics.median(row[k] for row in rows), 2) for k in rows[0]}
    for name in trees:
        summary[f"{name}_over_bare"] = round(statistics.median(
            row[f"{name}_seconds"] / row["bare_seconds"] for row in rows), 2)
        summary[f"{name}_cpu_bound_over_bare"] = round(statistics.median(
            row[f"{name}_cpu"] / cores / row["bare_seconds"] for row in rows), 2)
    print(json.dumps({"queues": args.queues, "messages_per_queue": args.count, "body_bytes": 1024, "cores": cores,
                      "in_flight": args.in_flight, "rounds": args.repeat, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
