"""A hostile bucket: objects planted beside real backups never take over ``latest``, freshness or retention, and
never hide the real backups from ``rbak`` or the backups view.

Every case runs on a folder and on loopback S3. The location holds three real backups, made an hour apart;
each case plants one foreign, damaged or forged object, and every reader of the location must then:
- choose ``real-3`` for ``latest`` and for the freshness check;
- with ``keep_last: 2`` remove ``real-1`` only, keep ``real-2`` and ``real-3`` whole and leave the planted
  object where it was (retention deletes only what it counts);
- list every backup in ``rbak list`` and the view's list, the planted one marked with its reason, and answer
  its detail with a page or a one-line error, never a traceback, an "internal error" or a 500.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from airflow_rbak.cli.main import main
from airflow_rbak.codec import BackupManifest
from airflow_rbak.codec.manifest import MAX_MANIFEST_BYTES, MAX_MANIFEST_VALUES
from airflow_rbak.exceptions import RbakError
from airflow_rbak.freshness import check_freshness
from airflow_rbak.repository.catalog import MAX_CLOCK_SKEW_MS, latest_complete, list_backups
from airflow_rbak.repository.chain_link import latest_with_stream
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.repository.retention import RetentionPolicy, apply_retention
from airflow_rbak.repository.validate import validate_backup
from airflow_rbak.restore.errors import BackupNotRestorableError
from airflow_rbak.restore.plan import resolve_manifest
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import Storage
from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.pages import Links, detail_page, list_page
from airflow_rbak.ui.runs import RunIndex
from tests.cli.test_cli import rbak_measured
from tests.repository.backup_writer import BackupWriter
from tests.repository.sample import build_sample_backup, sample_records

HOUR = 3_600_000
DAY = 24 * HOUR
REAL = ("real-1", "real-2", "real-3")


def run_cli(*args: str) -> tuple[int, str, str]:
    """``rbak`` in this process (as the console script runs it): exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def now() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def bucket(location: str, now: int) -> Storage:
    """Three real backups, one, two and three hours old (oldest first)."""
    storage = open_storage(location)
    for age, backup_id in zip((3, 2, 1), REAL):
        manifest = build_sample_backup(storage, backup_id)
        manifest.created_at, manifest.completed_at = now - age * HOUR, now - age * HOUR + 60_000
        ManifestStore(storage).save(manifest)
    return storage


def _manifest(storage: Storage, backup_id: str) -> BackupManifest:
    return ManifestStore(storage).load(backup_id)


def _put_manifest(storage: Storage, backup_id: str, body: dict[str, Any] | bytes) -> None:
    storage.put(f"{backup_id}/manifest.json", body if isinstance(body, bytes) else json.dumps(body).encode())


def _copy_of_real_3(storage: Storage, backup_id: str, **changes: Any) -> None:
    """A forged backup that lists real-3's segments under its own id, with ``changes`` to its manifest's fields."""
    forged = copy.deepcopy(_manifest(storage, "real-3"))
    for queue in forged.queues:
        for segment in queue.segments:
            new_key = segment.key.replace("real-3/", f"{backup_id}/", 1)
            storage.put(new_key, storage.get(segment.key))
            segment.key = new_key
    forged.definitions = None
    forged.backup_id = backup_id
    body = forged.to_json()
    body.update(changes)
    _put_manifest(storage, backup_id, body)


def far_future(storage: Storage, now: int) -> str:
    _put_manifest(storage, "planted-2100", {"backup_id": "planted-2100", "created_at": 4_102_444_800_000,
                                            "completed_at": 4_102_444_800_001, "backup_tool_version": "x",
                                            "queues": [], "total_messages": 0, "total_bytes": 0, "total_segments": 0})
    return "planted-2100"


def clock_a_day_ahead(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "ahead", created_at=now + DAY, completed_at=now + DAY + 1000)
    return "ahead"


def time_out_of_range(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "huge-time", created_at=9_000_000_000_000_000_000, completed_at=9_000_000_000_000_000_000)
    return "huge-time"


def beyond_64_bits(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "beyond", created_at=2**64, completed_at=now)
    return "beyond"


def not_json(storage: Storage, now: int) -> str:
    _put_manifest(storage, "garbage", b"\x00\xff{not json at all" * 100)
    return "garbage"


def impostor(storage: Storage, now: int) -> str:
    """real-3's manifest, unchanged, copied into another folder: it names real-3, not its folder."""
    storage.put("impostor/manifest.json", storage.get("real-3/manifest.json"))
    return "impostor"


def segments_missing(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "hollow", created_at=now - 60_000, completed_at=now - 30_000)
    victim = _manifest(storage, "hollow").queues[0].segments[0].key
    storage.delete(victim)
    return "hollow"


def completed_before_created(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "backwards", created_at=now - 60_000, completed_at=now - 10 * DAY)
    return "backwards"


def rebuilt_manifest(storage: Storage, now: int) -> str:
    _copy_of_real_3(storage, "rebuilt", created_at=now - 60_000, completed_at=now - 30_000,
                    rebuilt={"rebuilt_at": now, "note": "times estimated"})
    return "rebuilt"


def oversized(storage: Storage, now: int) -> str:
    storage.put("huge/manifest.json", b" " * (MAX_MANIFEST_BYTES + 1))
    return "huge"


CASES: dict[str, Callable[[Storage, int], str]] = {
    "a manifest created in the year 2100": far_future,
    "a copy written by a host whose clock is a day ahead": clock_a_day_ahead,
    "created_at 9000000000000000000": time_out_of_range,
    "created_at beyond 64 bits": beyond_64_bits,
    "a manifest that is not JSON": not_json,
    "real-3's manifest copied into another folder": impostor,
    "a recent manifest whose segment is gone": segments_missing,
    "completed before it was created": completed_before_created,
    "a rebuilt manifest with recent times": rebuilt_manifest,
    "a manifest over the size cap": oversized,
}
#: What each planted object is listed as (never ``complete``).
STATUS = {"planted-2100": "future", "ahead": "future", "huge-time": "future", "beyond": "damaged", "garbage": "damaged",
          "impostor": "damaged", "hollow": "damaged", "backwards": "damaged", "rebuilt": "rebuilt", "huge": "damaged"}


@pytest.fixture(params=list(CASES), ids=list(CASES))
def planted(request: pytest.FixtureRequest, bucket: Storage, now: int) -> str:
    return CASES[request.param](bucket, now)


def _objects(storage: Storage, backup_id: str) -> dict[str, int]:
    return {info.key: info.size for info in storage.list(f"{backup_id}/")}


def test_latest_freshness_and_the_next_stream_chain_choose_the_newest_real_backup(bucket, planted, now):
    assert latest_complete(bucket, now_ms=now).backup_id == "real-3"
    assert check_freshness(bucket, max_age_hours=24, now_ms=now).backup_id == "real-3"
    assert latest_with_stream(bucket, "next", "prod", "events/eu").backup_id == "real-3"


def test_retention_keeps_the_two_newest_real_backups_and_leaves_the_planted_object_alone(bucket, planted, now):
    before = _objects(bucket, planted)
    done = apply_retention(bucket, RetentionPolicy(keep_last=2), now_ms=now, protect="real-3")
    assert done.deleted == ["real-1"]
    left = _objects(bucket, "real-1")
    if STATUS[planted] == "damaged":  # what a damaged manifest lists is unknown: stream segments a chain may need stay
        assert left and all("/queues/prod/events%2Feu/segment-" in key for key in left)
    else:
        assert left == {}
    for kept in ("real-2", "real-3"):
        assert validate_backup(bucket, kept, deep=True).valid
    assert _objects(bucket, planted) == before


def test_the_catalog_lists_every_backup_and_marks_the_planted_one_with_its_reason(bucket, planted, now):
    found = {s.backup_id: s for s in list_backups(bucket, now_ms=now)}
    assert set(found) == {*REAL, planted}
    assert all(found[r].status == "complete" for r in REAL)
    assert found[planted].status == STATUS[planted]
    assert found[planted].problem


def test_rbak_list_and_describe_show_the_rest_and_mark_the_planted_one(bucket, planted):
    code, out, err = run_cli("list", "--path", bucket.url)
    assert code == 0 and err == ""
    for backup_id in REAL:
        assert f"{backup_id} " in out
    assert planted in out and STATUS[planted] in out
    code, out, err = run_cli("list", "--path", bucket.url, "--format", "json")
    assert code == 0
    assert {b["backup_id"]: b["status"] for b in json.loads(out)}[planted] == STATUS[planted]
    code, out, _ = run_cli("describe", "--path", bucket.url, "--backup-id", "real-3")
    assert code == 0 and "backup real-3 (complete)" in out
    code, out, err = run_cli("describe", "--path", bucket.url, "--backup-id", planted)
    assert "internal error" not in err and "Traceback" not in err
    assert (code == 0 and STATUS[planted].upper() in out) or (code == 1 and len(err.splitlines()) == 1)


def test_the_view_lists_every_backup_and_answers_each_page(bucket, planted):
    catalog = BackupCatalog([bucket.url])
    where = catalog.locations[0]
    runs, links = RunIndex([]), Links(airflow_root="", view_root="/rbak")
    page = catalog.page(where, runs)
    assert page["error"] is None
    assert {b["backup_id"]: b["status"] for b in page["backups"]} == {**dict.fromkeys(REAL, "complete"),
                                                                       planted: STATUS[planted]}
    html = list_page([page], links)
    assert all(backup_id in html for backup_id in (*REAL, planted))
    for backup_id in (*REAL, planted):
        try:
            detail = catalog.detail(where, backup_id, runs)
        except RbakError:  # the view answers these with a 404 or 502 page that names the problem
            assert backup_id == planted
            continue
        assert backup_id in detail_page(detail, links, {"restore": True, "verify": True}, {})


def test_a_manifest_a_few_minutes_ahead_still_counts(bucket, now):
    """Hosts' clocks differ by seconds; a backup from a host slightly ahead is real and counts."""
    _copy_of_real_3(bucket, "slightly-ahead", created_at=now + MAX_CLOCK_SKEW_MS // 2,
                    completed_at=now + MAX_CLOCK_SKEW_MS // 2 + 1)
    assert latest_complete(bucket, now_ms=now).backup_id == "slightly-ahead"


def test_rebuilding_a_mistyped_backup_id_fails_and_writes_nothing(bucket):
    before = {info.key for info in bucket.list("")}
    code, out, err = run_cli("manifest", "rebuild", "--path", bucket.url, "--backup-id", "real-4")
    assert code == 2 and out == ""  # a usage error: no backup of that id
    assert len(err.splitlines()) == 1 and "nothing was written" in err
    assert {info.key for info in bucket.list("")} == before
    assert latest_complete(bucket).backup_id == "real-3"


def _sparse(path, size: int) -> bytes:
    with path.open("wb") as handle:
        handle.truncate(size)
    return b""


def _dense(path, values: int) -> bytes:
    """A manifest just within the value cap: its memory once parsed, not its size, is the threat."""
    path.write_bytes(b'{"queues":[' + b",".join([b'"abcdefgh"'] * values) + b"]}")
    return b""


@pytest.mark.parametrize(("plant", "reason"), [
    (lambda path: _sparse(path, 300 * 1024**2), "over the 64 MiB a manifest may hold"),
    (lambda path: _dense(path, MAX_MANIFEST_VALUES - 10), "manifest.backup_id must be a string"),
    (lambda path: _dense(path, MAX_MANIFEST_VALUES + 10), f"over the {MAX_MANIFEST_VALUES} a manifest may hold"),
], ids=["300 MB of manifest", "a million values", "over a million values"])
def test_rbak_list_beside_an_oversized_or_dense_manifest_stays_under_200_mib_and_marks_it(tmp_path, plant, reason):
    """The byte cap is checked against the listed size (the 300 MB one is never read); the value cap before parsing."""
    storage = open_storage((tmp_path / "backups").as_uri())
    build_sample_backup(storage, "real-1")
    planted = tmp_path / "backups" / "huge" / "manifest.json"
    planted.parent.mkdir()
    plant(planted)
    done, peak_kib = rbak_measured(tmp_path, "list", "--path", storage.url, "--format", "json")
    assert done.returncode == 0, done.stderr
    listed = {b["backup_id"]: b for b in json.loads(done.stdout)}
    assert listed["real-1"]["status"] == "complete" and listed["huge"]["status"] == "damaged"
    assert reason in listed["huge"]["problem"]
    assert peak_kib < 200 * 1024


HOSTILE_NAMES = ("q`|x| publishes 0 |\n| `evil` | classic", "\x1b]0;owned\x07\x1b[2Jtitle", "[a](http://evil) ![i](x.png)")


def test_a_lock_file_that_is_not_a_lock_wedges_nothing(bucket, now):
    bucket.put("real-3/lock.json", b'{"acquired_at": "x", "owner": "\x1b[2J"}')
    assert latest_complete(bucket, now_ms=now).backup_id == "real-3"
    code, out, err = run_cli("unlock", "--path", bucket.url, "--backup-id", "real-3")
    assert code == 0 and err == "" and "unreadable" in out and "\x1b" not in out
    assert not bucket.exists("real-3/lock.json")


def test_names_that_would_drive_a_terminal_are_shown_escaped_and_each_queue_stays_one_row(bucket, now):
    writer = BackupWriter(bucket, "names")
    for name in HOSTILE_NAMES:
        sink = writer.queue("/", name)
        sink.add_all(sample_records("/", name, 3))
        sink.close()
    writer.finish()
    code, out, err = run_cli("describe", "--path", bucket.url, "--backup-id", "names")
    assert code == 0 and err == ""
    assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;owned\\x07" in out
    rows = [line for line in out.splitlines() if " classic " in line and "LEFT OUT" not in line]
    assert len(rows) == len(HOSTILE_NAMES)
    code, out, _ = run_cli("list", "--path", bucket.url)
    assert code == 0 and "names " in out
    catalog = BackupCatalog([bucket.url])
    detail = catalog.detail(catalog.locations[0], "names", RunIndex([]))
    html = detail_page(detail, Links(airflow_root="", view_root="/rbak"), {"restore": True, "verify": True},
                       {})
    assert 'href="http://evil"' not in html and "<img" not in html
    assert "\x1b" not in html and "\\x1b]0;owned\\x07" in html


def test_a_location_that_does_not_exist_is_an_error_and_an_empty_one_has_no_backups(location):
    code, out, err = run_cli("list", "--path", location)  # nothing written yet: an empty folder or bucket prefix
    if location.startswith("file:"):
        assert code == 3 and "does not exist" in err and len(err.splitlines()) == 1  # an unreachable location
        open_storage(location).put("x/y", b"")
        open_storage(location).delete("x/y")
    code, out, err = run_cli("list", "--path", location)
    assert (code, err) == (0, "") and out.startswith("no backups under")
    typo = location.replace("/backups", "/backups-typo") if location.startswith("file:") else \
        location.replace("s3://rbak-test-", "s3://rbak-typo-")
    code, out, err = run_cli("list", "--path", typo)
    assert code == 3 and out == "" and "does not exist" in err and len(err.splitlines()) == 1


def test_a_restore_of_a_manifest_copied_into_another_folder_is_refused_before_anything_is_read(bucket, now):
    impostor(bucket, now)
    with pytest.raises(BackupNotRestorableError, match="names backup 'real-3', not its folder's 'impostor'"):
        resolve_manifest(bucket, "impostor")
