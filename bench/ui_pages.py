"""The backups view's pages with realistic data: the time to build each, as the api-server does, without HTTP.

Writes into a temporary folder ``--backups`` backups of ``--queues`` queues (manifests only) and one backup whose
queue holds ``--messages`` messages of 1 KiB of JSON in segments of ``--segment-mib`` MiB (the default segment
size is 128 MiB), then times, warm (the catalog's listing cached, as when a user clicks through): the list page,
a backup's page, a queue's first messages page, the last page of its largest segment, and a
filtered page that matches rarely (it reads up to SCAN_BUDGET records). Prints the median and the slowest of
``--repeat`` rounds per page.

    .venv/bin/python bench/ui_pages.py [--messages 200000] [--segment-mib 128] [--backups 200] [--repeat 9]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue
from airflow_rbak.repository.message_filter import MessageFilter
from airflow_rbak.storage import open_storage
from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.message_browser import Position, message_page
from airflow_rbak.ui.messages_page import messages_page
from airflow_rbak.ui.pages import Links, detail_page, list_page
from airflow_rbak.ui.runs import RunIndex
from bench.catalog import write_manifests
from tests.repository.backup_writer import BackupWriter

LINKS = Links(airflow_root="", view_root="/rbak")


def write_messages(url: str, messages: int, segment_mib: int) -> None:
    writer = BackupWriter(open_storage(url), "messages-1", segment_max_bytes=segment_mib << 20)
    sink = writer.queue("/", "orders", "quorum")
    pad = "x" * 900
    for i in range(messages):
        sink.add(BackupRecord(
            body=orjson.dumps({"order": i, "customer": f"c-{i % 977}", "pad": pad}),
            properties=BackupProperties(content_type="application/json", message_id=f"order-{i}", delivery_mode=2),
            headers=(("x-tenant", HeaderValue.short_string("eu" if i % 3 else "us")),),
            exchange="orders", routing_key=f"orders.{i % 7}", backed_up_at=1_764_200_000_000 + i,
            source_queue="orders", source_vhost="/"))
    sink.close()
    writer.finish()


def timed(call: Callable[[], object], repeat: int, before: Callable[[], object] | None = None) -> tuple[float, float]:
    runs = []
    for _ in range(repeat):
        if before is not None:
            before()  # untimed: the page a user was on
        began = time.perf_counter()
        call()
        runs.append((time.perf_counter() - began) * 1000)
    return statistics.median(runs), max(runs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--segment-mib", type=int, default=128)
    parser.add_argument("--backups", type=int, default=200)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        url = Path(folder).as_uri()
        write_manifests(url, args.backups, args.queues, 5)
        write_messages(url, args.messages, args.segment_mib)
        catalog, runs = BackupCatalog([url]), RunIndex()
        location = catalog.locations[0]
        manifest = catalog.manifest(location, "messages-1")
        segments = manifest.queues[0].segments
        biggest = max(segments, key=lambda s: s.record_count)
        deep = Position(biggest.sequence, max(0, biggest.record_count - 20))
        rare = MessageFilter.from_params({"message_id": "no-such-message"})
        storage = catalog.storage(location)

        def messages(start: Position | None = None, message_filter: MessageFilter | None = None,
                     limit: int = 20) -> str:
            page = message_page(storage, catalog.manifest(location, "messages-1"), 0, start=start, limit=limit,
                                message_filter=message_filter, show_bodies=True)
            return messages_page({**page, "backup_id": "messages-1", "location": location.to_json(), "filters": [],
                                  "bodies_refused": None}, LINKS)

        pages = {
            "list (first 50 of the location)": lambda: list_page([catalog.page(location, runs)], LINKS),
            "a backup's page": lambda: detail_page(catalog.detail(location, "messages-1", runs), LINKS,
                                                   {"restore": True, "verify": True}, {}),
            "messages: first page (20)": messages,
            "messages: the last page of the largest segment, jumped to": lambda: messages(deep),
            "messages: a rare filter (reads the scan budget)": lambda: messages(None, rare),
        }
        catalog.page(location, runs)  # the listing, as the first page load does
        print(f"{args.backups} backups; {args.messages:,} messages of about 1 KiB in {len(segments)} segment(s) "
              f"of up to {args.segment_mib} MiB; median and slowest of {args.repeat}:")
        for name, call in pages.items():
            median, slowest = timed(call, args.repeat)
            print(f"  {name:60} {median:7.1f} ms  (slowest {slowest:.1f} ms)")
        previous = Position(deep.segment, deep.record - 20)
        median, slowest = timed(lambda: messages(deep), args.repeat, before=lambda: messages(previous))
        print(f"  {'messages: that page as next from the page before':60} {median:7.1f} ms  (slowest {slowest:.1f} ms)")


if __name__ == "__main__":
    main()
