"""The import record names the cluster its import changed and the restore run that made it (no broker)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from airflow_rbak.restore.import_record import airflow_run_ref, cluster_refusal, local_run_ref, record_body

KEY = "b1/definitions/import-record-20261122T041500123Z.json"


def test_run_references_say_where_the_restore_ran():
    assert airflow_run_ref("rbak_restore", "manual__2026-11-22T04:15:00+00:00") == (
        "airflow:rbak_restore/manual__2026-11-22T04:15:00+00:00")
    first, second = (local_run_ref(datetime(2026, 11, 22, 4, 15, 0, 123000, timezone.utc)) for _ in range(2))
    assert re.fullmatch(r"cli:20261122T041500123Z-[0-9a-f]{8}", first) and first != second


def test_a_record_is_refused_on_another_cluster_or_naming_none_and_accepted_on_its_own():
    record = record_body("b1/definitions/rollback-before-import-20261122T041500123Z.zst", {"sha256": "ab", "size": 2},
                         "missing", [("vhosts", {"name": "dr"})], [], "id-staging", "rabbit@staging", "airflow:d/r1")

    assert cluster_refusal(record, KEY, "id-staging", "rabbit@staging") is None
    other = cluster_refusal(record, KEY, "id-prod", "rabbit@prod")
    assert other is not None and other.startswith(
        f"{KEY} is the import record of restore run airflow:d/r1 into cluster 'rabbit@staging' (id id-staging), but "
        "the connection reaches cluster 'rabbit@prod' (id id-prod)") and "nothing was changed" in other
    older = cluster_refusal({k: v for k, v in record.items() if k != "cluster"}, KEY, "id-prod", "rabbit@prod")
    assert older is not None and "names no cluster (written by an older version)" in older


def test_names_from_a_record_are_shown_escaped():
    record = {"cluster": "id-x", "cluster_name": "evil\x1b[2J\nname", "run": "run\u202eforged"}

    refusal = cluster_refusal(record, KEY, "id-y", None)

    assert refusal is not None and "\x1b" not in refusal and "\n" not in refusal and "\u202e" not in refusal
    assert "evil\\x1b[2J\\nname" in refusal and "run\\u202eforged" in refusal
