"""Run one queue's publish step in a process of its own, so a test can kill it mid-queue.

Usage: python -m tests.restore.publish_worker '<json>' with amqp_url, settings (RestoreRequest fields),
source_vhost and source_queue; with ``kill_after`` N the worker SIGKILLs itself right after sending its Nth message
(a crash at a known point: that message and up to ``max_in_flight`` before it are unconfirmed); with
``hold_after_commit`` N it stops for good in the first checkpoint commit that reaches N confirmed records, for the
test to kill it there (a checkpoint every 500 confirms, at most ``max_in_flight`` confirmed at once: well before the
queue's end).
"""

from __future__ import annotations

import os
import signal
import sys

import orjson

from airflow_rbak.broker.connection import RabbitMQConnection
from airflow_rbak.restore import RestoreRequest, RestoreRun
from airflow_rbak.restore.publisher import ConfirmPipeline


def _die_after(count: int) -> None:
    send = ConfirmPipeline.publish

    def publish(self: ConfirmPipeline, *args: object, **kwargs: object) -> None:
        send(self, *args, **kwargs)
        if self.published >= count:
            os.kill(os.getpid(), signal.SIGKILL)

    ConfirmPipeline.publish = publish


def _hold_after(count: int) -> None:
    commit = ConfirmPipeline._commit

    def hold(self: ConfirmPipeline) -> None:
        commit(self)
        if self.cp.published >= count:
            signal.pause()  # stopped mid-queue, messages in flight, until the test kills it: no race with the publish

    ConfirmPipeline._commit = hold


def main(argv: list[str]) -> int:
    args = orjson.loads(argv[0])
    if args.get("kill_after"):
        _die_after(int(args["kill_after"]))
    if args.get("hold_after_commit"):
        _hold_after(int(args["hold_after_commit"]))
    run = RestoreRun(RabbitMQConnection.from_url(args["amqp_url"]), RestoreRequest(**args["settings"]))
    plan = run.plan()
    run.publish(plan, plan.queue(args["source_vhost"], args["source_queue"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
