"""A whole ``rbak restore``, as a user waits for it, beside a bare confirmed publisher on the same broker, same run.

One classic queue of ``--messages`` persistent 1 KiB messages is backed up once (``BackupRun``, file storage).
Each round then times, back to back:

* ``rbak restore`` of that backup into a new vhost (definitions included), run as a command: process start,
  imports, plan, definitions import, publish with confirms, report. Its resident set (the process's peak RSS from
  ``wait4``, not tracemalloc) and CPU are read from the kernel. ``--before DIR`` runs the same command from
  another checkout too (an unchanged ``main``), alternating which goes first, so both meet the same broker;
* the baseline: bare pika publishing the same bodies into an empty queue with publisher confirms and
  ``--in-flight`` unconfirmed at most, all confirms awaited (``bench/restore.py``'s pipelined publisher).

Figures are medians over ``--repeat`` rounds; a ratio is the median of the per-round ratios to the baseline.

    .venv/bin/python bench/restore_e2e.py --messages 100000 --repeat 3 [--before /path/to/main] \
        [--amqp-url amqp://guest:guest@127.0.0.1:5672/]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from restore import ScratchVhosts, bench_args, management, pipelined_publish  # noqa: E402

from airflow_rbak.backup.run import BackupRun, BackupSettings  # noqa: E402
from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from airflow_rbak.broker.discovery import QueueSelector  # noqa: E402

BACKUP_ID = "bench-e2e-1"


def broker_url(connection: RabbitMQConnection) -> str:
    """The URL ``rbak`` reads from ``$RBAK_BROKER_URL``: AMQP with the management port."""
    return (f"amqp://{connection.username}:{connection.password}@{connection.host}:{connection.amqp_port}/"
            f"?management_port={connection.management_port}")


def rbak_restore(tree: Path, location: str, source: str, target: str, url: str, home: Path) -> dict[str, float]:
    """Run ``rbak restore`` from checkout ``tree`` as its own process: its wall time from the start of the process,
    its CPU (core-seconds) and its peak resident set (MiB), as the kernel counts them (``wait4``)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "RBAK_BROKER_URL": url, "AIRFLOW_HOME": str(home),
           "AIRFLOW__RBAK__STATE_KEY": "bench-restore-e2e-state-key-0123456789"}
    argv = [sys.executable, "-m", "airflow_rbak.cli.main", "restore", "--path", location, "--backup-id", BACKUP_ID,
            "--vhost-map", f"{source}={target}", "--format", "json", "-c", json.dumps({"restore_definitions": True})]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile() as usage:
        started = time.perf_counter()
        child = subprocess.run([sys.executable, "-c", _RUNNER, usage.name, *argv], cwd=tree, env=env, stdout=out,
                               stderr=err, check=False)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(f"rbak restore from {tree} failed ({child.returncode}): {err.read().decode()[-3000:]}")
        report = json.loads(out.read().decode().strip().splitlines()[-1])
        rss_kib, cpu = json.loads(Path(usage.name).read_text())
    assert report["published"] == report["planned"] > 0, report
    return {"seconds": seconds, "cpu": cpu, "rss_mib": rss_kib / 1024}


#: Starts the command from a small process: Linux carries a process's peak RSS across ``exec``, so a child forked
#: from this bench (which holds the backup's messages) would report the bench's own peak, not the command's.
_RUNNER = """import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([usage.ru_maxrss, usage.ru_utime + usage.ru_stime], f)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def main(argv: list[str] | None = None) -> int:
    parser = bench_args(__doc__.split("\n")[0], 100000)
    parser.add_argument("--before", type=Path, help="another checkout whose `rbak restore` is timed in the same rounds")
    args = parser.parse_args(argv)
    connection = RabbitMQConnection.from_url(args.amqp_url)
    with ScratchVhosts(connection) as scratch, tempfile.TemporaryDirectory() as tmp:
        return _bench(connection, scratch.make("bench-src"), Path(tmp), args, scratch)


def _bench(connection: RabbitMQConnection, source: str, tmp: Path, args: argparse.Namespace,
           scratch: ScratchVhosts) -> int:
    base, auth = management(connection)
    pipelined_publish(connection, source, "source", args.messages, args.in_flight)
    location = (tmp / "backups").as_uri()
    BackupRun(connection, BackupSettings(BACKUP_ID, location, selector=QueueSelector(vhosts=(source,)))).run()
    requests.delete(f"{base}/queues/{source}/source/contents", auth=auth, timeout=60)  # the broker's memory back
    trees = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}
    rows: list[dict[str, float]] = []
    for r in range(args.repeat):
        row: dict[str, float] = {}
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            target = scratch.name(f"bench-{name}-{r}")
            measured = rbak_restore(trees[name], location, source, target, broker_url(connection), tmp)
            row.update({f"{name}_{k}": v for k, v in measured.items()})
            scratch.drop(target)
        bare = scratch.make(f"bench-bare-{r}")
        row["bare_seconds"] = pipelined_publish(connection, bare, "bare", args.messages, args.in_flight)
        scratch.drop(bare)
        rows.append(row)
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(row.items())), flush=True)
    summary = {k: round(statistics.median(row[k] for row in rows), 2) for k in rows[0]}
    for name in trees:
        summary[f"{name}_over_bare"] = round(statistics.median(row[f"{name}_seconds"] / row["bare_seconds"] for row in rows), 2)
    print(json.dumps({"messages": args.messages, "body_bytes": 1024, "in_flight": args.in_flight, "rounds": args.repeat,
                      "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
