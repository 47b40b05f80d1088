"""Any JSON at all in a manifest's place: ``rbak list``, ``rbak describe`` and the backups view answer cleanly.

Manifests are generated in two shapes: any JSON document, and the manifest schema with any field replaced by
any JSON value (wrong types, integers past 64 bits, huge or control-character strings). Beside them lies a
real backup, which must stay listed as complete whatever the other manifest holds. A clean answer is exit 0
or one line on stderr with exit 1, never "internal error" or a traceback, output bounded by the input's size,
and no raw control character on a terminal.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from airflow_rbak.cli.main import main
from airflow_rbak.exceptions import RbakError
from airflow_rbak.repository.catalog import list_backups
from airflow_rbak.storage.memory import MemoryStorage
from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.pages import Links, detail_page, list_page
from airflow_rbak.ui.runs import RunIndex
from tests.repository.sample import build_sample_backup

_RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
text = st.text(st.characters(codec="utf-8"), max_size=60) | st.text(st.sampled_from("\x1b]0;\x07\r\n|`[](){}<>x"), max_size=30)
scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | text | st.just("y" * 100_000))
anything = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                        max_leaves=20)


def field(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A valid value, one time in twelve anything at all (so that most documents get past the parser)."""
    return st.integers(0, 11).flatmap(lambda n: anything if n == 0 else valid)


times = st.sampled_from([0, 1_712_756_400_000, 9_000_000_000_000_000_000, -(2**63)]) | st.integers(-(2**64), 2**64)
counts = st.integers(min_value=0, max_value=2**63 - 1)
segment = st.fixed_dictionaries({
    "key": field(text | st.just("fuzzed/queues/_default/q/segment-0001.zst")), "sequence": field(counts),
    "record_count": field(counts), "size_bytes": field(counts), "uncompressed_bytes": field(counts),
    "first_timestamp": field(times), "last_timestamp": field(times), "checksum": field(st.just("ab" * 32))})
queue = st.fixed_dictionaries({
    "vhost": field(text), "name": field(text), "queue_type": field(st.sampled_from(["classic", "quorum", "stream"])),
    "segments": field(st.lists(segment, max_size=3)), "message_count": field(counts),
    "first_message_timestamp": field(times), "last_message_timestamp": field(times)})
manifest_shaped = st.fixed_dictionaries({
    "backup_id": field(st.just("fuzzed")), "created_at": field(times), "completed_at": field(times | st.none()),
    "source_cluster": field(text | st.none()), "rabbitmq_version": field(text | st.none()),
    "backup_tool_version": field(text), "definitions": field(st.none()), "queues": field(st.lists(queue, max_size=3)),
    "total_messages": field(counts), "total_bytes": field(counts), "total_segments": field(counts),
    "left_out": field(st.lists(st.fixed_dictionaries({"vhost": field(text), "queue": field(text), "reason": field(text)}),
                               max_size=2))})


def _valid(**changes: Any) -> bytes:
    """A complete, empty manifest of ``fuzzed`` with ``changes`` to its fields."""
    body = {"backup_id": "fuzzed", "created_at": 1_712_756_400_000, "completed_at": 1_712_756_400_001,
            "source_cluster": None, "rabbitmq_version": None, "backup_tool_version": "x", "definitions": None,
            "queues": [], "total_messages": 0, "total_bytes": 0, "total_segments": 0}
    return json.dumps({**body, **changes}).encode()


documents = st.one_of(manifest_shaped, manifest_shaped, anything).map(lambda doc: json.dumps(doc).encode())


@pytest.fixture(scope="module")
def real_backup() -> dict[str, bytes]:
    """The objects of one real, complete backup, copied into each example's location."""
    storage = MemoryStorage()
    build_sample_backup(storage, "real-1")
    return {info.key: storage.get(info.key) for info in storage.list("")}


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, out: str, err: str, limit: int) -> None:
    assert code in (0, 1), err
    assert "internal error" not in err and "Traceback" not in err
    assert code == 0 or len(err.splitlines()) == 1
    assert len(out) + len(err) < limit
    assert not _RAW_CONTROL.search(out + err)


@settings(max_examples=int(os.environ.get("RBAK_FUZZ_EXAMPLES", "60")), derandomize="RBAK_FUZZ_EXAMPLES" not in os.environ,
          deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow, HealthCheck.data_too_large])
@given(document=documents)
@example(document=_valid(left_out=True))
@example(document=_valid(left_out=[1, {"vhost": 5, "queue": None}], created_at=9_000_000_000_000_000_000))
@example(document=_valid(backup_tool_version="\x1b]0;title\x07\x9b2J"))
def test_any_manifest_gets_a_clean_bounded_answer_and_hides_nothing(real_backup, document):
    storage = MemoryStorage(f"hostile-{uuid.uuid4().hex}")
    for key, data in real_backup.items():
        storage.put(key, data)
    storage.put("fuzzed/manifest.json", document)
    limit = 4 * len(document) + 200_000  # a name may be printed a few times, escaped; nothing grows without bound
    try:
        statuses = {s.backup_id: s.status for s in list_backups(storage)}
        assert statuses["real-1"] == "complete" and set(statuses) == {"real-1", "fuzzed"}

        for fmt in ("text", "json"):
            code, out, err = run_cli("list", "--path", storage.url, "--format", fmt)
            assert code == 0 and "real-1" in out
            assert_clean(code, out, err, limit)
            assert_clean(*run_cli("describe", "--path", storage.url, "--backup-id", "fuzzed", "--format", fmt), limit)

        catalog = BackupCatalog([storage.url])
        where, runs, links = catalog.locations[0], RunIndex([]), Links(airflow_root="", view_root="/rbak")
        page = catalog.page(where, runs)
        assert page["error"] is None and {b["backup_id"] for b in page["backups"]} == {"real-1", "fuzzed"}
        list_page([page], links)
        try:
            detail_page(catalog.detail(where, "fuzzed", runs), links, {"restore": True, "verify": True}, {})
        except RbakError:  # answered as a 404 or 502 page naming the problem
            pass
    finally:
        MemoryStorage.discard(storage.name)
