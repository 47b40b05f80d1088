"""Where a backup's segment work should run: the task's own process against one Spark application, same staging.

Stages ``--queues`` queues of ``--count`` messages of ``--size`` random bytes on file storage (as a capture
stages them), then, ``--repeat`` times in alternation, encodes and deep-verifies all of them with the
in-process stages and with ``spark-submit backup_segments.py`` (``local[N]``), and times an application with
nothing to do: Spark's fixed cost. The crossover (the fixed cost times the in-process rate) is the staged size
up to which Spark costs more than the work it would spread; ``auto`` keeps a queue in process up to
``in_process_max_bytes``, which is set from it.

    .venv/bin/python bench/placement.py [--queues 4] [--count 20000] [--size 1024] [--repeat 3] [--master local[2]]
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

from pika import spec

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_rbak.broker.amqp_types import DeliveredProperties  # noqa: E402
from airflow_rbak.segments import encode as er  # noqa: E402
from airflow_rbak.segments import stages  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.spark_jobs.conftest import spark_env  # noqa: E402
from tests.spark_jobs.staging import stage_queue  # noqa: E402


def stage(url: str, queues: int, count: int, size: int) -> list[er.QueueRef]:
    """Queues of random bodies staged as a capture stages them (the test helper's records, with bodies this size)."""
    import tests.spark_jobs.staging as staging

    plain = staging.staged_delivery

    def with_body(record: object) -> bytes:
        method = spec.Basic.Deliver(consumer_tag="rbak-00001", delivery_tag=record.delivery_tag, redelivered=False,
                                    exchange="", routing_key=record.routing_key)
        props = b"".join(spec.BasicProperties(delivery_mode=2, message_id=str(record.delivery_tag)).encode())
        from airflow_rbak.capture.staged_delivery import stage_delivery

        return stage_delivery(method, DeliveredProperties(props), os.urandom(size), record.backed_up_at, 0)

    staging.staged_delivery = with_body
    try:
        storage = open_storage(url)
        for q in range(queues):
            stage_queue(storage, "b1", "/", f"q{q}", count, chunk_records=2000)
    finally:
        staging.staged_delivery = plain
    return [er.QueueRef("/", f"q{q}") for q in range(queues)]


def spark_seconds(url: str, master: str, queues: list[er.QueueRef] | None) -> float:
    args = ["--queues-json", json.dumps([{"vhost": r.vhost, "name": r.name} for r in queues])] if queues else []
    started = time.perf_counter()
    done = subprocess.run(["spark-submit", "--master", master, str(REPO / "spark_jobs" / "backup_segments.py"),
                           "--storage-url", url, "--backup-id", "b1", *args], capture_output=True, text=True,
                          env=spark_env(), cwd=REPO, timeout=1800)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="rbak-placement-"))
    url, empty = (root / "store").as_uri(), (root / "empty").as_uri()
    open_storage(empty).put("b1/.keep", b"")
    refs = stage(url, args.queues, args.count, args.size)
    staged = sum(stages.staged_bytes(url, "b1", r) for r in refs)
    here, there, fixed = [], [], []
    for _ in range(args.repeat):
        started = time.perf_counter()
        stages.encode_here(url, "b1", refs, stages.SegmentWork(verify="deep"))
        here.append(time.perf_counter() - started)
        there.append(spark_seconds(url, args.master, refs))
        fixed.append(spark_seconds(empty, args.master, None))
    h, t, f = statistics.median(here), statistics.median(there), statistics.median(fixed)
    rate = staged / h
    print(json.dumps({
        "staged_mb": round(staged / 1e6, 1), "messages": args.queues * args.count, "master": args.master,
        "in_process_s": round(h, 1), "spark_s": round(t, 1), "spark_fixed_s": round(f, 1),
        "in_process_mb_per_s": round(rate / 1e6, 1),
        "spark_work_mb_per_s": round(staged / (t - f) / 1e6, 1) if t > f else None,
        "crossover_mb": round(f * rate / 1e6), "runs": args.repeat,
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
