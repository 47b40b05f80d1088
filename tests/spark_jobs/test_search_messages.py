"""The search as a Spark job: the same result as in process, the location untouched, its failures said.

One real ``spark-submit`` (through ``rbak search --placement spark``, as a user runs it); the job's other paths
run on the in-process stand-in for Spark (``local_spark``), whose tasks are pickled as on an executor.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.message_filter import FilterError, MessageFilter
from airflow_rbak.repository.message_search import search_backups
from airflow_rbak.segments.jobs import search_messages as job
from airflow_rbak.segments.search import JOB_FILE, SearchJobError, choose_placement, run_search
from airflow_rbak.segments.stages import Placement
from airflow_rbak.storage import open_storage
from tests.repository.message_backups import ORDERS, write_backup
from tests.spark_jobs.conftest import spark_env
from tests.spark_jobs.local_spark import LocalSpark


def args(url: str, backups: list[str], params: dict, tmp_path, limit: int = 100) -> argparse.Namespace:
    return argparse.Namespace(storage_url=url, backup_id=backups, message_filter=MessageFilter.from_params(params),
                              limit=limit, partitions=None, max_decompressed_bytes=2**26, output=(tmp_path / "out").as_uri())


def two_backups(url: str):
    storage = open_storage(url)
    b1 = write_backup(storage, "b1", ORDERS[:40])
    write_backup(storage, "b2", ORDERS, later_by_ms=60_000)
    return storage, b1


def test_the_job_finds_what_the_process_finds_in_the_same_order(tmp_path):
    url = (tmp_path / "loc").as_uri()
    storage, _ = two_backups(url)
    params = {"routing_key": "orders.eu.*", "headers": {"x-tenant": "acme"}}
    expected = search_backups(storage, ["b1", "b2"], MessageFilter.from_params(params), limit=7)
    result = job.run(LocalSpark(), args(url, ["b1", "b2"], params, tmp_path, limit=7))
    assert [h.to_json() for h in result.hits.values()] == [h.to_json() for h in expected.hits.values()]
    assert (result.matched_records, result.more_records, result.placement) == (
        expected.matched_records, expected.more_records, "spark")


def test_the_job_names_a_damaged_segment_and_a_runaway_regex(tmp_path):
    url = (tmp_path / "loc").as_uri()
    storage, b1 = two_backups(url)
    bad = b1.queue("/", "orders").segments[0]
    storage.put(bad.key, b"RBAK" + storage.get(bad.key)[4:-1] + b"?")
    result = job.run(LocalSpark(), args(url, ["b1", "b2", "gone"], {"message_id": "order-0"}, tmp_path))
    assert [d.segment for d in result.damaged] == [bad.key]
    assert [(hit.first.queue, [h["backup_id"] for h in hit.held_by]) for hit in result.hits.values()] == [
        ("dlq", ["b1", "b2"]), ("orders", ["b2"])]  # b1's copy in orders is in the damaged segment
    assert result.backups_skipped[0]["backup_id"] == "gone"

    write_backup(storage, "b3", [dataclasses.replace(ORDERS[0], body=b"a" * 5000 + b"!")], dlq=False)
    with pytest.raises(FilterError, match="body_regex: searching one 5001-byte body took longer than"):
        job.run(LocalSpark(), args(url, ["b3"], {"body_regex": "(a|aa)+$"}, tmp_path))


def test_the_job_refuses_to_write_its_result_inside_the_location(tmp_path):
    url = tmp_path.as_uri()
    with pytest.raises(ConfigurationError, match="inside the location"):
        job.check_output(url, (tmp_path / "results").as_uri())
    job.check_output((tmp_path / "loc").as_uri(), (tmp_path / "loc-results").as_uri())


def test_auto_searches_in_process_up_to_the_encodes_threshold(tmp_path):
    storage, b1 = two_backups(tmp_path.as_uri())
    payload = sum(s.uncompressed_bytes for q in b1.queues for s in q.segments)
    assert choose_placement(storage, ["b1"], Placement("auto", payload)) == "process"
    assert choose_placement(storage, ["b1", "b2"], Placement("auto", payload)) in ("spark", "process")
    assert choose_placement(storage, ["b1"], Placement("spark")) == "spark"


@pytest.mark.spark
def test_rbak_search_on_spark_local_2_gives_the_in_process_result_and_writes_nothing(
        tmp_path, spark_submit_available, monkeypatch, capsys):
    url = (tmp_path / "loc").as_uri()
    two_backups(url)
    before = sorted((i.key, i.size) for i in open_storage(url).list(""))
    monkeypatch.setenv("PATH", spark_env()["PATH"])
    common = ["search", "--path", url, "--body-contains", "47", "--routing-key", "*.paid", "--format", "json"]

    assert main([*common, "--placement", "spark", "--spark-master", "local[2]"]) == 0
    on_spark = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert main([*common, "--placement", "process"]) == 0
    in_process = [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    assert on_spark[-1]["placement"] == "spark" and in_process[-1]["placement"] == "process"
    assert on_spark[:-1] == in_process[:-1] and len(in_process) > 5
    assert {k: v for k, v in on_spark[-1].items() if k not in ("placement", "seconds")} == {
        k: v for k, v in in_process[-1].items() if k != "placement"}
    assert sorted((i.key, i.size) for i in open_storage(url).list("")) == before


def test_a_search_on_spark_goes_through_the_submit_it_is_given_and_says_why_it_left_no_result(tmp_path):
    # Given a location, and a submit that records what it was asked to run and fails as spark-submit would
    url = (tmp_path / "loc").as_uri()
    two_backups(url)
    asked: list[tuple[str, list[str], str]] = []

    def failing_submit(application: str, application_args, master: str) -> None:
        asked.append((application, list(application_args), master))
        raise RuntimeError("Cannot execute: spark-submit ... Error code is: 1.")

    # When the search runs on Spark through it
    with pytest.raises(SearchJobError, match="left no result: Cannot execute: spark-submit"):
        run_search(url, ["b1"], MessageFilter.from_params({"message_id": "order-0"}), limit=5, placement="spark",
                   master="local[3]", submit=failing_submit)

    # Then the job's file ran on the master asked for, with the location and the filter as its arguments
    (application, application_args, master), = asked
    assert application == str(JOB_FILE) and master == "local[3]"
    assert application_args[:2] == ["--storage-url", url] and application_args[-2:] == ["--backup-id", "b1"]
    assert json.loads(application_args[application_args.index("--filter") + 1])["message_id"] == "order-0"


def test_a_search_on_spark_without_a_submit_is_refused_before_anything_runs(tmp_path):
    url = (tmp_path / "loc").as_uri()
    two_backups(url)

    with pytest.raises(ConfigurationError, match="placement process"):
        run_search(url, ["b1"], MessageFilter.from_params({}), limit=5, placement="spark")
