"""A full ``rbak_backup`` DAG run: wall time per phase and end-to-end MB/s.

Publishes ``--queues`` classic queues × ``--count`` persistent messages of
``--size`` bytes into a fresh vhost, runs ``airflow dags test rbak_backup``
(Spark ``local[2]``, file storage, deep verify) in an isolated AIRFLOW_HOME,
and reads each task's start and end from Airflow's database. A phase's wall
time runs from its first task's start to its last task's end (capture spans
every mapped capture task); end-to-end runs from discover's start to
finalize's end, and MB/s counts message bodies.

    scripts/rabbitmq.sh start
    .venv/bin/python bench/backup_e2e.py [--queues 10] [--count 20000] [--size 1024] [--body random|pattern] [--amqp-url amqp://guest:guest@127.0.0.1:5672/]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from tests.dags.airflow_env import VENV_BIN, airflow_env, dags_test, rabbitmq_conn, run  # noqa: E402

PHASES = ("discover", "export_definitions", "capture", "encode", "verify", "finalize")
_TIMES = r'''
import json
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    rows = s.query(TaskInstance).filter(TaskInstance.dag_id == "rbak_backup").all()
    print(json.dumps([[t.task_id, t.start_date.timestamp(), t.end_date.timestamp(), str(t.state)] for t in rows]))
'''


def seed(conn: RabbitMQConnection, vhost: str, queues: int, count: int, size: int, body_kind: str) -> None:
    """A fresh vhost with ``queues`` classic queues of ``count`` persistent messages each.

    ``random`` bodies do not compress (the codec's worst case); ``pattern`` bodies repeat 0..255.
    """
    api, auth = f"{conn.management_base_url}/api", (conn.username, conn.password)
    requests.put(f"{api}/vhosts/{quote(vhost, safe='')}", auth=auth, timeout=30).raise_for_status()
    requests.put(f"{api}/permissions/{quote(vhost, safe='')}/{conn.username}", auth=auth, timeout=30,
                 json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
    pattern = bytes(range(256)) * (size // 256) + bytes(size % 256)
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        ch = c.channel()
        for q in range(queues):
            ch.queue_declare(f"bench-{q}", durable=True)
            for i in range(count):
                body = os.urandom(size) if body_kind == "random" else pattern
                ch.basic_publish("", f"bench-{q}", body, pika.BasicProperties(delivery_mode=2, message_id=str(i)))
        for q in range(queues):
            while ch.queue_declare(f"bench-{q}", passive=True).method.message_count < count:
                time.sleep(0.1)


def phase_times(rows: list[list]) -> dict[str, float]:
    """Wall seconds per phase: first start to last end of its tasks."""
    spans: dict[str, list[float]] = {}
    for task_id, start, end, _ in rows:
        span = spans.setdefault(task_id, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    times = {p: round(spans[p][1] - spans[p][0], 1) for p in PHASES if p in spans}
    times["end_to_end"] = round(spans["finalize"][1] - spans["discover"][0], 1)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--body", choices=("random", "pattern"), default="random")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    args = parser.parse_args()
    conn = RabbitMQConnection.from_url(args.amqp_url)
    vhost = f"bench-{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="rbak-bench-"))
    env = airflow_env(home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        conn.host, conn.amqp_port, conn.management_port, conn.stream_port, conn.username, conn.password))
    try:
        seed(conn, vhost, args.queues, args.count, args.size, args.body)
        assert run([str(VENV_BIN / "airflow"), "db", "migrate"], env).returncode == 0
        done = dags_test(env, {"storage_url": (home / "backups").as_uri(), "backup_id": "bench-1", "vhosts": [vhost]})
        if done.returncode != 0:
            print(done.stdout[-5000:], done.stderr[-5000:], file=sys.stderr)
            return 1
        rows = json.loads(run([str(VENV_BIN / "python"), "-c", _TIMES], env).stdout.strip().splitlines()[-1])
    finally:
        requests.delete(f"{conn.management_base_url}/api/vhosts/{quote(vhost, safe='')}",
                        auth=(conn.username, conn.password), timeout=60)
    times = phase_times(rows)
    payload_mb = args.queues * args.count * args.size / 1e6
    result = {"body": args.body, "queues": args.queues, "messages_per_queue": args.count, "size": args.size, "payload_mb": round(payload_mb, 1),
              "seconds": times, "end_to_end_mb_per_s": round(payload_mb / times["end_to_end"], 2)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
