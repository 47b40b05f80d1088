"""Spark job: ``rbak search`` over many backups, the segments spread over the executors.

    spark-submit search_messages.py --storage-url URL --backup-id B1 [--backup-id B2 ...] \\
        --output URL [--filter JSON] [--limit N]

Each task reads its segments with :func:`~airflow_rbak.repository.message_reader.read_segment_messages` (the
checks of ``rbak validate --deep``, the filter applied as each record is parsed) and returns each matching
record's place, fingerprint and a short summary; the driver puts them in stored order and counts each message
once (:class:`~airflow_rbak.repository.message_search.SearchResult`), as the in-process search does.

A search only reads the location: unlike the other jobs it stores no report there. Its result is one JSON
object written to ``--output`` (a storage URL elsewhere, refused inside the location), whose key
(``search-result.json``) is printed as the only stdout line. The driver holds every match's place and summary
(about 400 bytes each) while it orders them; a filter that matches millions of records is better narrowed.
Exit codes as the other jobs: 0 done, 1 a segment could not be read (named in the result), 2 failed.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from airflow_rbak.codec import SegmentMetadata
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.exceptions import ConfigurationError, RbakError
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.message_filter import FilterError, MessageFilter
from airflow_rbak.repository.message_reader import DamagedSegment, queue_segments, read_segment_messages
from airflow_rbak.repository.message_search import DEFAULT_SEARCH_LIMIT, Found, SearchResult
from airflow_rbak.segments.jobs.common import (
    EXIT_DEFECTS,
    EXIT_FAILED,
    EXIT_OK,
    driver_credentials,
    positive_int,
    slices,
    spark_session,
    warm_up,
)
from airflow_rbak.segments.search import RESULT_KEY
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.storage.credentials import storage_credentials

JOB = "search"


@dataclass(frozen=True)
class SearchItem:
    """One segment to search, with its place in the stored order (picklable, small)."""

    order: tuple[int, int, int]  # backup, queue, segment
    backup_id: str
    vhost: str
    queue: str
    first_position: int
    segment: dict[str, Any]
    defect: str | None = None


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the job's arguments (``argv`` without the program name)."""
    parser = argparse.ArgumentParser(prog=JOB, description="Search the messages of backups with one filter.")
    parser.add_argument("--storage-url", required=True, help="the location: file:///path, s3://bucket/prefix?...")
    parser.add_argument("--backup-id", action="append", required=True, help="a backup to search, oldest first")
    parser.add_argument("--output", required=True, help="a storage URL outside the location for the result")
    parser.add_argument("--filter", default="{}", help="the filter's fields as a JSON object (MessageFilter)")
    parser.add_argument("--limit", type=positive_int, default=DEFAULT_SEARCH_LIMIT)
    parser.add_argument("--partitions", type=positive_int)
    parser.add_argument("--max-decompressed-bytes", type=positive_int, default=DEFAULT_MAX_DECOMPRESSED_BYTES)
    args = parser.parse_args(argv)
    try:
        args.message_filter = MessageFilter.from_params(orjson.loads(args.filter))
        check_output(args.storage_url, args.output)
    except (orjson.JSONDecodeError, ConfigurationError) as exc:
        parser.error(str(exc))
    return args


def check_output(storage_url: str, output_url: str) -> None:
    """Refuse an output inside the location: a search never writes there."""
    location, output = open_storage(storage_url).url.rstrip("/"), open_storage(output_url).url.rstrip("/")
    if output == location or output.startswith(location + "/"):
        raise ConfigurationError(f"--output {output_url!r} lies inside the location searched; a search writes nothing there")


def plan_items(storage_url: str, backup_ids: Sequence[str], result: SearchResult) -> list[SearchItem]:
    """Every segment of the backups in stored order; a backup whose manifest cannot be read is named as skipped."""
    store = ManifestStore(open_storage(storage_url))
    items = []
    for b, backup_id in enumerate(backup_ids):
        try:
            manifest = store.load(backup_id)
        except RbakError as exc:
            result.backups_skipped.append({"backup_id": backup_id, "status": "damaged", "problem": str(exc)})
            continue
        result.backups_searched.append(backup_id)
        queues: dict[tuple[str, str], int] = {}
        for s, (entry, segment, first, defect) in enumerate(queue_segments(manifest)):
            q = queues.setdefault((entry.vhost, entry.name), len(queues))
            items.append(SearchItem((b, q, s), backup_id, entry.vhost, entry.name, first, segment.to_json(), defect))
    return items


def search_group(storage_url: str, filter_params: dict[str, Any], cap: int, items: list[SearchItem]) -> list[Any]:
    """One task: search each segment of the group; ``(order, index, found or damaged JSON)`` per match or defect."""
    storage = open_storage(storage_url)
    message_filter = MessageFilter.from_params(filter_params)
    out: list[Any] = []
    try:
        _search_items(storage, message_filter, cap, items, out)
    except FilterError as exc:  # a regex that ran away: an RbakError the driver raises again, not a task failure
        out.append(((-1, -1, -1), -1, {"filter_error": [exc.field, str(exc)]}))
    return out


def _search_items(storage: Storage, message_filter: MessageFilter, cap: int, items: list[SearchItem],
                  out: list[Any]) -> None:
    for item in items:
        segment = SegmentMetadata.from_json(item.segment)
        if item.defect is not None:
            out.append((item.order, -1, {"damaged": [item.backup_id, item.vhost, item.queue, segment.key,
                                                      segment.sequence, item.defect, 0]}))
            continue
        for found in read_segment_messages(storage, item.backup_id, item.vhost, item.queue, segment,
                                           item.first_position, message_filter, cap):
            if isinstance(found, DamagedSegment):
                out.append((item.order, 1 << 62, {"damaged": [found.backup_id, found.vhost, found.queue, found.segment,
                                                              found.sequence, found.reason, found.records_read]}))
            else:
                out.append((item.order, found.index, Found.of(found).to_json()))


def run(spark: Any, args: argparse.Namespace) -> SearchResult:
    """Search every segment of the backups in parallel, then count the matches in stored order."""
    result = SearchResult(args.message_filter.describe(), args.limit, placement="spark")
    items = plan_items(args.storage_url, args.backup_id, result)
    if not items:
        return result
    warm_up(spark, __name__)
    url, params, cap = args.storage_url, args.message_filter.to_params(), args.max_decompressed_bytes
    groups = _contiguous(items, slices(spark, len(items), args.partitions, per_core=4))
    rdd = spark.sparkContext.parallelize(groups, len(groups))
    for _order, _index, body in sorted(rdd.flatMap(lambda group: search_group(url, params, cap, group)).collect(),
                                       key=lambda row: (row[0], row[1])):
        if "filter_error" in body:
            field_name, message = body["filter_error"]
            raise FilterError(field_name, message.removeprefix(f"{field_name}: "))
        if "damaged" in body:
            result.damaged.append(DamagedSegment(*body["damaged"]))
        else:
            result.add(Found.from_json(body))
    return result


def _contiguous(items: list[SearchItem], groups: int) -> list[list[SearchItem]]:
    size = -(-len(items) // groups)
    return [items[i:i + size] for i in range(0, len(items), size)]


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, search in a fresh session, write the result to ``--output``, print its key; return the exit code."""
    args = parse_args(argv)
    spark = spark_session(f"rbak-{JOB}")
    started = time.perf_counter()
    with storage_credentials(driver_credentials(spark)):
        try:
            result = run(spark, args)
            body, code = result.to_json(), EXIT_OK if result.ok else EXIT_DEFECTS
            body["hits"] = [hit.to_json() for hit in result.hits.values()]
        except RbakError as exc:  # a regex that ran away, a storage fault: the result says why
            body, code = {"error": str(exc), "field": getattr(exc, "field", None), "ok": False}, EXIT_FAILED
        except Exception as exc:  # noqa: BLE001 - the result must say why, whatever failed
            traceback.print_exc(file=sys.stderr)
            body, code = {"error": f"{type(exc).__name__}: {exc}", "ok": False}, EXIT_FAILED
        finally:
            spark.stop()
        body["seconds"] = round(time.perf_counter() - started, 3)
        open_storage(args.output).put(RESULT_KEY, orjson.dumps(body))
    print(RESULT_KEY, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
