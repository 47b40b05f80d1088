"""Capture one queue in a process of its own and report its peak RSS, so a test can bound the client's memory.

Usage: python -m tests.reliability.capture_worker '<json>' with amqp_url, vhost, queue, storage_url, backup_id
and optional CaptureOptions fields under "options". Prints one JSON line: the CaptureResult fields,
``rss_before`` (bytes resident once everything is imported, just before the capture) and ``peak_rss`` (the
high-water mark of this program's resident set, ``VmHWM``). Not ``ru_maxrss``: Linux carries that across
``execve``, so it reports the parent's size at the fork whenever the parent (pytest) is the larger.
"""

from __future__ import annotations

import dataclasses
import sys

import orjson

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage import open_storage
from tests.capture.helpers import capture_queue


def memory_status(field: str) -> int:
    """``VmRSS``, ``VmHWM``, ... of this process in bytes, from /proc/self/status."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # kB


def main(argv: list[str]) -> int:
    args = orjson.loads(argv[0])
    connection = RabbitMQConnection.from_url(args["amqp_url"])
    storage = open_storage(args["storage_url"])
    rss_before = memory_status("VmRSS")
    try:
        result = capture_queue(connection, storage, args["backup_id"], args["vhost"], args["queue"],
                               **args.get("options", {}))
    except RbakError as exc:
        print(orjson.dumps({"error": type(exc).__name__, "message": str(exc)}).decode())
        return 1
    peak = memory_status("VmHWM")
    print(orjson.dumps({**dataclasses.asdict(result), "rss_before": rss_before, "peak_rss": peak}).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
