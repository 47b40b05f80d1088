"""The README's first command: a real backup of sample queues on a private loopback RabbitMQ.

Starts the packaged broker (unless ``RABBITMQ_URL`` names one), seeds a classic,
a quorum and a stream queue with realistic messages, backs them up to
``STORAGE_URL`` (default ``.run/demo-backups``), validates the backup deeply,
checks that every queue still holds what it held, and cleans up what it started.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pika
import requests

REPO = Path(__file__).resolve().parents[1]
VHOST = "rbak-demo"
QUEUES = (("demo.orders", "classic", 3000), ("demo.payments", "quorum", 1500), ("demo.events", "stream", 2000))


def main() -> int:
    url = os.environ.get("RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672/")
    storage_url = os.environ.get("STORAGE_URL", (REPO / ".run" / "demo-backups").as_uri())
    started = _ensure_broker() if "RABBITMQ_URL" not in os.environ else False
    try:
        from airflow_rbak.backup.run import BackupRun, BackupSettings
        from airflow_rbak.backup.validate import validate_backup
        from airflow_rbak.broker.connection import RabbitMQConnection
        from airflow_rbak.broker.discovery import QueueSelector

        connection = RabbitMQConnection.from_url(url)
        depths = _seed(connection)
        backup_id = time.strftime("demo-%Y%m%dT%H%M%S", time.gmtime())
        settings = BackupSettings(backup_id=backup_id, storage_url=storage_url, selector=QueueSelector(vhosts=(VHOST,)))
        began = time.monotonic()
        manifest = BackupRun(connection, settings).run()
        took = time.monotonic() - began
        report = validate_backup(BackupRun(connection, settings).storage, backup_id, deep=True)
        after = _depths(connection)
        _print_summary(manifest, report, took, depths, after, storage_url)
        return 0 if report.valid and after == depths and manifest.total_messages == sum(depths.values()) else 1
    finally:
        if started:
            subprocess.run([str(REPO / "scripts" / "rabbitmq.sh"), "stop"], check=False)


def _ensure_broker() -> bool:
    """Start the private broker unless one is already running; return whether we started it."""
    script = str(REPO / "scripts" / "rabbitmq.sh")
    if subprocess.run([script, "status"], capture_output=True).returncode == 0:
        return False
    subprocess.run([script, "start"], check=True)
    return True


def _api(connection, method: str, path: str, **kwargs) -> requests.Response:
    response = requests.request(method, f"{connection.management_base_url}/api/{path}",
                                auth=(connection.username, connection.password), timeout=30, **kwargs)
    response.raise_for_status()
    return response


def _seed(connection) -> dict[str, int]:
    """A fresh demo vhost with three queues of realistic messages; returns their depths."""
    _api(connection, "DELETE", f"vhosts/{quote(VHOST, safe='')}") if _vhost_exists(connection) else None
    _api(connection, "PUT", f"vhosts/{quote(VHOST, safe='')}", json={})
    _api(connection, "PUT", f"permissions/{quote(VHOST, safe='')}/{quote(connection.username)}",
         json={"configure": ".*", "write": ".*", "read": ".*"})
    params = connection.pika_parameters(VHOST)
    with pika.BlockingConnection(params) as conn:
        channel = conn.channel()
        channel.confirm_delivery()
        rng = random.Random(42)
        for name, queue_type, count in QUEUES:
            channel.queue_declare(name, durable=True, arguments={"x-queue-type": queue_type})
            for i in range(count):
                body = json.dumps({"order_id": f"o-{i}", "amount": round(rng.uniform(1, 500), 2),
                                   "items": [rng.choice("ABCDEFG") for _ in range(rng.randint(1, 6))]}).encode()
                props = pika.BasicProperties(content_type="application/json", delivery_mode=2, message_id=f"{name}-{i}",
                                             timestamp=1_700_000_000 + i, app_id="rbak-demo",
                                             headers={"x-attempt": i % 3, "x-region": rng.choice(["eu", "us"])})
                channel.basic_publish("", name, body, props)
    time.sleep(1)
    return _depths(connection, settle=True)


def _vhost_exists(connection) -> bool:
    return any(v["name"] == VHOST for v in _api(connection, "GET", "vhosts").json())


def _depths(connection, settle: bool = False) -> dict[str, int]:
    """Each queue's depth (streams: their message count), waiting for the management stats to settle."""
    deadline = time.monotonic() + 30
    while True:
        rows = _api(connection, "GET", f"queues/{quote(VHOST, safe='')}").json()
        depths = {r["name"]: int(r.get("messages") or 0) for r in rows}
        wanted = {name: count for name, _, count in QUEUES}
        if depths == wanted or time.monotonic() > deadline:
            return depths
        time.sleep(1)


def _print_summary(manifest, report, took, before, after, storage_url) -> None:
    print(f"\nbackup {manifest.backup_id} -> {storage_url}")
    print(f"  {manifest.total_messages} messages, {manifest.total_segments} segments, {manifest.total_bytes} bytes in {took:.1f} s")
    for q in manifest.queues:
        print(f"  {q.queue_type:8} {q.name:15} {q.message_count:6d} messages in {len(q.segments)} segment(s)")
    verdict = "valid" if report.valid else f"INVALID: {[str(d) for d in report.defects]}"
    print(f"verify (deep): {verdict}; {report.segments_checked} segments, {report.records_checked} records checked")
    print(f"queues before backup: {before}\nqueues after backup:  {after}  ({'unchanged' if before == after else 'CHANGED'})")
    print(f"\ninspect it: .venv/bin/rbak describe --path {storage_url} --backup-id {manifest.backup_id}")


if __name__ == "__main__":
    sys.exit(main())
