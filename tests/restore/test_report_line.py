"""How a restore report reads in the task log and the backups view: a dry run never says it published."""

from __future__ import annotations

from airflow_rbak.restore.run import report_line

REPORT = {"planned": 172, "published": 172, "unroutable": 0, "skipped_segments": [{"key": "b/x.seg"}]}


def test_a_dry_run_says_what_would_be_published_and_that_nothing_was():
    line = report_line({**REPORT, "dry_run": True})

    assert line == ("dry run: 172 planned, 172 would be published, nothing was published; "
                    "1 damaged segment would be skipped")
    assert "published this run" not in line


def test_a_real_run_says_what_it_published():
    assert report_line({**REPORT, "dry_run": False, "published": 1_500, "unroutable": 2}) == (
        "172 planned, 1,500 published this run, 2 unroutable, 1 damaged segment skipped")
