"""A full ``rbak_backup`` DAG run: wall time per phase and end-to-end MB/s, beside the floor of any backup.

Publishes ``--queues`` classic queues × ``--count`` persistent messages of
``--size`` bytes into a fresh vhost and backs them up, in one of two ways:

- default: ``airflow dags test rbak_backup`` (tasks one after another in one
  process, Spark ``local[2]``, file storage) in an isolated AIRFLOW_HOME;
- ``--deployed``: as deployed (tests/deployed): scheduler with the
  LocalExecutor, dag-processor and api-server as separate processes, a Spark
  standalone master and worker whose executors' Python has none of the
  project's dependencies, S3 on a loopback moto server reached through an
  Airflow connection; the run is triggered with the CLI and timed from the
  trigger to its success.

Each task's start and end come from Airflow's database. A phase's wall time
runs from its first task's start to its last task's end (capture spans every
mapped capture task); end-to-end runs from discover's start to finalize's end
(``trigger_to_success`` adds the scheduling before and after), and MB/s counts
message bodies. The same run then fills identical queues and times a bare pika
consumer draining them all at once (one connection, a consumer per queue,
acks every 1,000): the physical floor of any backup of them on this machine.

Both are also measured in CPU core-seconds: the broker's, plus the ``dags test``
command's and every process it waited for (Spark included), or for ``--deployed``
the whole machine's busy time from trigger to success; the floor's is the
broker's plus the bare consumer's (the broker's share of each is also given
apart, ``*_broker_core_s``). Divided by the cores, the backup's gives the
shortest wall time its work allows here however well it overlaps
(``cpu_bound_over_floor``): where that is above a target, the machine is short
of cores for it, whatever the code does.

    scripts/rabbitmq.sh start
    .venv/bin/python bench/backup_e2e.py [--deployed] [--queues 10] [--count 20000] [--size 1024] [--body random|pattern] [--amqp-url amqp://guest:guest@127.0.0.1:5672/]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import pika
import psutil
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_rbak.broker.connection import RabbitMQConnection  # noqa: E402
from tests.airflow_stack import airflow_stack  # noqa: E402
from tests.dags.airflow_env import VENV_BIN, airflow_env, dags_test, rabbitmq_conn, run  # noqa: E402
from tests.spark_cluster import standalone_cluster  # noqa: E402

PHASES = ("discover", "export_definitions", "capture", "encode", "finalize")
_TIMES = r'''
import json
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
with create_session() as s:
    rows = s.query(TaskInstance).filter(TaskInstance.dag_id == "rbak_backup").all()
    print(json.dumps([[t.task_id, t.start_date.timestamp(), t.end_date.timestamp(), str(t.state)] for t in rows]))
'''


def seed(conn: RabbitMQConnection, vhost: str, queues: int, count: int, size: int, body_kind: str,
         prefix: str = "bench") -> list[str]:
    """A fresh vhost with ``queues`` classic queues of ``count`` persistent messages each.

    ``random`` bodies do not compress (the codec's worst case); ``pattern`` bodies repeat 0..255.
    """
    api, auth = f"{conn.management_base_url}/api", (conn.username, conn.password)
    requests.put(f"{api}/vhosts/{quote(vhost, safe='')}", auth=auth, timeout=30).raise_for_status()
    requests.put(f"{api}/permissions/{quote(vhost, safe='')}/{conn.username}", auth=auth, timeout=30,
                 json={"configure": ".*", "write": ".*", "read": ".*"}).raise_for_status()
    names = [f"{prefix}-{q}" for q in range(queues)]
    pattern = bytes(range(256)) * (size // 256) + bytes(size % 256)
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        ch = c.channel()
        for name in names:
            ch.queue_declare(name, durable=True)
            for i in range(count):
                body = os.urandom(size) if body_kind == "random" else pattern
                ch.basic_publish("", name, body, pika.BasicProperties(delivery_mode=2, message_id=str(i)))
        for name in names:
            while ch.queue_declare(name, passive=True).method.message_count < count:
                time.sleep(0.1)
    return names


def bare_drain(conn: RabbitMQConnection, vhost: str, queues: list[str], count: int) -> float:
    """Seconds a bare pika consumer takes to drain every queue at once (a consumer each, acks every 1,000)."""
    left = dict.fromkeys(queues, count)
    with pika.BlockingConnection(conn.pika_parameters(vhost)) as c:
        ch = c.channel()
        ch.basic_qos(prefetch_count=2000)
        started = time.perf_counter()
        for name in queues:
            def on_message(_ch: object, method: pika.spec.Basic.Deliver, _p: object, _b: bytes, name: str = name) -> None:
                left[name] -= 1
                if left[name] % 1000 == 0:
                    ch.basic_ack(method.delivery_tag, multiple=True)
            ch.basic_consume(name, on_message)
        while any(left.values()):
            c.process_data_events(time_limit=0.25)
        return time.perf_counter() - started


def busy_cpu_seconds() -> float:
    """Core-seconds the whole machine has spent busy (not idle, not waiting on I/O) since boot."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def children_cpu_seconds() -> float:
    """Core-seconds of every process this one has waited for (and those they waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def broker_cpu_seconds(amqp_port: int) -> float:
    """Core-seconds the RabbitMQ node listening on ``amqp_port`` has used since it started."""
    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == amqp_port and conn.pid:
            t = psutil.Process(conn.pid).cpu_times()
            return t.user + t.system
    raise SystemExit(f"no process listens on port {amqp_port}")


def phase_times(rows: list[list]) -> dict[str, float]:
    """Wall seconds per phase: first start to last end of its tasks."""
    spans: dict[str, list[float]] = {}
    for task_id, start, end, _ in rows:
        span = spans.setdefault(task_id, [start, end])
        span[0], span[1] = min(span[0], start), max(span[1], end)
    times = {p: round(spans[p][1] - spans[p][0], 1) for p in PHASES if p in spans}
    times["end_to_end"] = round(spans["finalize"][1] - spans["discover"][0], 1)
    return times


def dags_test_run(conn: RabbitMQConnection, home: Path, vhost: str) -> tuple[list[list], float, float]:
    """``airflow dags test``: the task rows, the seconds the command took and its core-seconds (the broker's
    included)."""
    env = airflow_env(home, AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
        conn.host, conn.amqp_port, conn.management_port, conn.stream_port, conn.username, conn.password))
    assert run([str(VENV_BIN / "airflow"), "db", "migrate"], env).returncode == 0
    started, cpu = time.perf_counter(), children_cpu_seconds() + broker_cpu_seconds(conn.amqp_port)
    done = dags_test(env, {"storage_url": (home / "backups").as_uri(), "backup_id": "bench-1", "vhosts": [vhost]})
    seconds = time.perf_counter() - started
    cpu = children_cpu_seconds() + broker_cpu_seconds(conn.amqp_port) - cpu
    if done.returncode != 0:
        raise SystemExit(f"rbak_backup failed:\n{done.stdout[-5000:]}\n{done.stderr[-5000:]}")
    rows = json.loads(run([str(VENV_BIN / "python"), "-c", _TIMES], env).stdout.strip().splitlines()[-1])
    return rows, seconds, cpu


def deployed_run(conn: RabbitMQConnection, home: Path, vhost: str) -> tuple[list[list], float, float]:
    """The stack of tests/deployed: the task rows, the seconds from the CLI trigger to the run's success, and the
    machine's busy core-seconds meanwhile."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="bench",
                 aws_secret_access_key="bench").create_bucket(Bucket="rbak-bench")
    (home / "spark").mkdir(parents=True)
    try:
        with standalone_cluster(home / "spark") as master:
            s3 = json.dumps({"conn_type": "aws", "login": "bench", "password": "bench",
                             "extra": {"endpoint_url": endpoint, "region_name": "us-east-1"}})
            (home / "airflow").mkdir()
            stack = airflow_stack(home / "airflow", AIRFLOW__CORE__PARALLELISM="8", AIRFLOW_CONN_RBAK_S3=s3, AIRFLOW__RBAK__STORAGE_CONN_ID="rbak_s3",
                                 AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": master}),
                                 AIRFLOW_CONN_RABBITMQ_DEFAULT=rabbitmq_conn(
                                     conn.host, conn.amqp_port, conn.management_port, conn.stream_port,
                                     conn.username, conn.password))
            stack.start()
            try:
                stack.wait_for_dag("rbak_backup")
                started, cpu = time.perf_counter(), busy_cpu_seconds()
                run_id = stack.trigger("rbak_backup", {
                    "storage_url": "s3://rbak-bench/backups?region=us-east-1&path_style=true",
                    "backup_id": "bench-1", "vhosts": [vhost]})
                state = stack.wait_for_run("rbak_backup", run_id, 3600)
                seconds, cpu = time.perf_counter() - started, busy_cpu_seconds() - cpu
                if state != "success":
                    raise SystemExit(f"rbak_backup ended {state}; logs under {stack.home}")
                times = stack.task_times("rbak_backup", run_id)
                return [[key.split("[")[0], start, end, "success"] for key, (start, end) in times.items()], seconds, cpu
            finally:
                stack.stop()
    finally:
        server.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deployed", action="store_true", help="scheduler, Spark standalone cluster, S3 (see above)")
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--count", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--body", choices=("random", "pattern"), default="random")
    parser.add_argument("--amqp-url", default="amqp://guest:guest@127.0.0.1:5672/")
    args = parser.parse_args()
    conn = RabbitMQConnection.from_url(args.amqp_url)
    vhost, floor_vhost = f"bench-{uuid.uuid4().hex[:8]}", f"bench-floor-{uuid.uuid4().hex[:8]}"
    home = Path(tempfile.mkdtemp(prefix="rbak-bench-"))
    try:
        seed(conn, vhost, args.queues, args.count, args.size, args.body)
        broker_before = broker_cpu_seconds(conn.amqp_port)
        rows, seconds, backup_cpu = (deployed_run if args.deployed else dags_test_run)(conn, home, vhost)
        backup_broker = broker_cpu_seconds(conn.amqp_port) - broker_before
        floor_queues = seed(conn, floor_vhost, args.queues, args.count, args.size, args.body)
        cpu_before, broker_before = time.process_time(), broker_cpu_seconds(conn.amqp_port)
        floor = bare_drain(conn, floor_vhost, floor_queues, args.count)
        floor_broker = broker_cpu_seconds(conn.amqp_port) - broker_before
        floor_cpu = time.process_time() - cpu_before + floor_broker
    finally:
        for name in (vhost, floor_vhost):
            requests.delete(f"{conn.management_base_url}/api/vhosts/{quote(name, safe='')}",
                            auth=(conn.username, conn.password), timeout=60)
    times = phase_times(rows)
    times["trigger_to_success" if args.deployed else "dags_test_command"] = round(seconds, 1)
    times["bare_pika_floor"] = round(floor, 1)
    payload_mb = args.queues * args.count * args.size / 1e6
    result = {"mode": "deployed" if args.deployed else "dags test", "body": args.body, "queues": args.queues,
              "messages_per_queue": args.count, "size": args.size, "payload_mb": round(payload_mb, 1),
              "seconds": times, "end_to_end_mb_per_s": round(payload_mb / times["end_to_end"], 2),
              "end_to_end_over_floor": round(times["end_to_end"] / floor, 1),
              "total_over_floor": round(seconds / floor, 1),
              "cpu": {"cores": psutil.cpu_count(), "backup_core_s": round(backup_cpu, 1),
                      "backup_broker_core_s": round(backup_broker, 1), "floor_core_s": round(floor_cpu, 1),
                      "floor_broker_core_s": round(floor_broker, 1),
                      "cpu_bound_over_floor": round(backup_cpu / psutil.cpu_count() / floor, 1)}}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
