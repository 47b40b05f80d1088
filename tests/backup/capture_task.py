"""Run one capture task (what ``RbakCaptureQueueOperator`` runs) in a process of its own: a "worker".

Usage: python -m tests.backup.capture_task '<json>' with amqp_url, storage_url, backup_id, lock_owner, vhost, queue,
and optionally:

* ``wait_for``: a storage key; before this worker stores its first checkpoint it waits until that key exists (so two
  workers are provably mid-capture at the same time);
* ``kill_at_checkpoint`` N: the worker SIGKILLs itself just before storing its Nth checkpoint, so chunk N is stored
  and no checkpoint accounts for it (the worst moment to lose a worker), after waiting for ``kill_wait_for``.

Prints the capture result as one JSON line. Nothing is kept on this process's disk: the caller gives each worker
its own empty TMPDIR to show it.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time

import orjson

from airflow_rbak.backup.run import BackupRun, BackupSettings
from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.broker.discovery import QueueSelector, describe_queue
from airflow_rbak.broker.management import ManagementClient
from airflow_rbak.codec.layout import checkpoint_key
from airflow_rbak.storage import open_storage
from tests.reliability.faulty_storage import FaultyStorage

DEADLINE_S = 120.0


def _wait_until_stored(storage: FaultyStorage, key: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not storage.inner.exists(key):
        if time.monotonic() > deadline:
            raise SystemExit(f"{key} never appeared")
        time.sleep(0.05)


def _instrument(storage: FaultyStorage, args: dict) -> None:
    own = checkpoint_key(args["backup_id"], args["vhost"], args["queue"])
    puts = 0

    def on_put(key: str) -> None:
        nonlocal puts
        if key != own:
            return
        puts += 1
        if puts == 1 and args.get("wait_for"):
            _wait_until_stored(storage, args["wait_for"])
        if puts == args.get("kill_at_checkpoint"):
            if args.get("kill_wait_for"):
                _wait_until_stored(storage, args["kill_wait_for"])
            os.kill(os.getpid(), signal.SIGKILL)

    storage.on_put = on_put


def main(argv: list[str]) -> int:
    args = orjson.loads(argv[0])
    connection = RabbitMQConnection.from_url(args["amqp_url"])
    storage = FaultyStorage(open_storage(args["storage_url"]))
    _instrument(storage, args)
    settings = BackupSettings(args["backup_id"], args["storage_url"], selector=QueueSelector(vhosts=(args["vhost"],)),
                              lock_owner=args["lock_owner"])
    run = BackupRun(connection, settings, storage)
    run.lock.acquire()
    with ManagementClient(connection) as client:
        info = describe_queue(client, args["vhost"], args["queue"])
    result = run.capture(info)
    print(orjson.dumps(dataclasses.asdict(result)).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
