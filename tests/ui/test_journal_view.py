"""The backups view shows, per journaled vhost, the journal's coverage, its recovery point and its gaps."""

from __future__ import annotations

import time

from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.pages import Links, list_page
from airflow_rbak.ui.runs import RunIndex
from tests.restore.journal_archives import ArchiveSpec, write_archive, write_chain

T0 = 1_795_953_600_000  # 2026-11-29T12:00:00Z


def test_the_list_shows_each_journals_coverage_recovery_point_and_gaps(tmp_path):
    location = (tmp_path / "b").as_uri()
    gap = {"from": T0 + 60_000, "to": T0 + 90_000, "reason": "tracing was off on rabbit@n2"}
    write_chain(location, "prod", [ArchiveSpec(T0, T0 + 120_000, [], gaps=[gap]),
                                   ArchiveSpec(T0 + 120_000, T0 + 240_000, [])])
    write_archive(location, "other", ArchiveSpec(T0, T0 + 30_000, []), None)
    catalog = BackupCatalog([location])
    (where,) = catalog.locations

    before = int(time.time() * 1000)
    page = catalog.page(where, RunIndex([]))
    after = int(time.time() * 1000)

    journals = {j["vhost"]: j for j in page["journals"]}
    assert sorted(journals) == ["other", "prod"] and page["journals_error"] is None
    prod = journals["prod"]
    assert (prod["from"], prod["to"], prod["archives"]) == (T0, T0 + 240_000, 2)
    assert before - (T0 + 240_000) <= prod["recovery_point_ms"] <= after - (T0 + 240_000)
    assert [(g["from"], g["to"]) for g in prod["gaps"]] == [(T0 + 60_000, T0 + 90_000)]
    assert "tracing was off on rabbit@n2" in prod["gaps"][0]["reason"]
    html = list_page([page], Links("", "/rbak"))
    assert "Continuous capture (journal)" in html and "tracing was off on rabbit@n2" in html
    assert "2026-11-29 12:04" in html  # the coverage's end, to the minute


def test_a_location_without_journals_shows_no_journal_table(tmp_path):
    location = (tmp_path / "b").as_uri()
    write_archive(location, "prod", ArchiveSpec(T0, T0 + 1, []), None, backup_id="plain-1")
    page = BackupCatalog([location]).page(BackupCatalog([location]).locations[0], RunIndex([]))
    assert page["journals"] == [] and "Continuous capture" not in list_page([page], Links("", "/rbak"))
