"""Run one queue's publish step in a process of its own, so a test can kill it mid-queue.

Usage: python -m tests.restore.publish_worker '<json>' with amqp_url, settings (RestoreSettings fields),
source_vhost and source_queue.
"""

from __future__ import annotations

import sys

import orjson

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.restore import RestoreRun, RestoreSettings


def main(argv: list[str]) -> int:
    args = orjson.loads(argv[0])
    run = RestoreRun(RabbitMQConnection.from_url(args["amqp_url"]), RestoreSettings(**args["settings"]))
    plan = run.plan()
    run.publish(plan, {"source_vhost": args["source_vhost"], "source_queue": args["source_queue"]})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
