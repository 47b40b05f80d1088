"""Any ``lock.json`` at all: an unreadable lock blocks, says so, and is removed cleanly; nothing raises anything else.

Hypothesis generates lock files from any JSON (wrong types, out-of-range integers, huge strings, control
characters) and from raw bytes, and drives them through ``rbak unlock`` and through
:class:`~airflow_rbak.repository.lock.BackupLock`.
"""

from __future__ import annotations

import datetime as dt
import io
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from airflow_rbak.cli.main import main as rbak
from airflow_rbak.repository.lock import MAX_LOCK_BYTES, UNREADABLE_OWNER, BackupLock, BackupLockedError, LockInfo
from airflow_rbak.storage import MemoryStorage, open_storage

HOSTILE = settings(max_examples=150, derandomize=True, deadline=dt.timedelta(seconds=5),
                   suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
GOOD = {"backup_id": "b-1", "owner": "nightly", "token": "t" * 32, "host": "h", "pid": 7, "acquired_at": 1,
        "renewed_at": 2}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1) | st.floats(allow_nan=False)
    | st.text(st.characters(codec="utf-8")),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(st.characters(codec="utf-8"), max_size=12), inner,
                                                                max_size=5),
    max_leaves=12,
)
#: A well-formed lock with one field replaced by any JSON value (or removed), or any JSON at all.
field_swaps = st.builds(lambda name, value: {**GOOD, name: value}, st.sampled_from(sorted(GOOD)), json_values)
lock_documents = st.one_of(
    field_swaps.map(lambda doc: orjson.dumps(doc)),
    st.sampled_from(sorted(GOOD)).map(lambda name: orjson.dumps({k: v for k, v in GOOD.items() if k != name})),
    json_values.map(lambda value: orjson.dumps(value)),
    st.binary(max_size=200),
)
AWKWARD = [
    b'{"backup_id": "b-1", "owner": "x", "token": "t", "host": "h", "pid": 1, "acquired_at": "x"}',  # the lock
    orjson.dumps({**GOOD, "owner": "\x1b[31mred\x00\u2028" * 3}),
    orjson.dumps({**GOOD, "host": "h" * (MAX_LOCK_BYTES - 200)}),
    orjson.dumps({**GOOD, "owner": "o" * (2 * MAX_LOCK_BYTES)}),  # a megabyte-ish string: too large to read
    orjson.dumps({**GOOD, "pid": 2**63}),
    orjson.dumps({**GOOD, "acquired_at": -1}),
    orjson.dumps({**GOOD, "pid": True}),
    b'{"owner": 1e400}',
    b"[" * 100_000,
]


def unlock(location: str, backup_id: str = "b-1") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = rbak(["unlock", "--path", location, "--backup-id", backup_id])
    return code, out.getvalue(), err.getvalue()


@HOSTILE
@given(lock_documents)
@example(AWKWARD[0]).via("the issue")
@example(AWKWARD[1]).via("control characters")
@example(AWKWARD[3]).via("too large to read")
@example(AWKWARD[8]).via("deep nesting")
def test_rbak_unlock_removes_any_lock_file_cleanly(document):
    # Given a backup whose lock.json holds anything at all
    with tempfile.TemporaryDirectory() as root:
        location = Path(root).as_uri()
        open_storage(location).put("b-1/lock.json", document)

        # When `rbak unlock` runs
        code, out, err = unlock(location)

        # Then it removed the lock, saying whose it was or that it was unreadable, in bounded, escaped text
        assert code == 0, err
        assert err == "" and "Traceback" not in out
        line = out.removesuffix("\n")
        assert line.startswith("removed the lock of backup b-1")
        assert "\n" not in line and line.isprintable() and len(line) < 1000
        assert not open_storage(location).exists("b-1/lock.json")


@pytest.mark.parametrize("document", [d for i, d in enumerate(AWKWARD) if i not in (1, 2)], ids=str)
def test_rbak_unlock_says_a_lock_was_unreadable_and_why(tmp_path, document):
    location = tmp_path.as_uri()
    open_storage(location).put("b-1/lock.json", document)

    code, out, _ = unlock(location)

    assert code == 0
    assert out.startswith("removed the lock of backup b-1: it was unreadable (") and len(out) < 200


def test_rbak_unlock_shows_a_readable_holder_with_its_control_characters_escaped(tmp_path):
    location = tmp_path.as_uri()
    open_storage(location).put("b-1/lock.json", AWKWARD[1])

    code, out, _ = unlock(location)

    assert code == 0 and "held by '\\x1b[31mred\\x00\\u2028" in out and "\x1b" not in out


@HOSTILE
@given(lock_documents)
@example(AWKWARD[0]).via("the issue")
@example(AWKWARD[3]).via("too large to read")
def test_a_run_meets_any_lock_file_with_a_clear_refusal_and_break_lock_takes_it_over(document):
    # Given a backup whose lock.json holds anything at all
    storage = MemoryStorage()
    storage.put("b-1/lock.json", document)
    assume(BackupLock(storage, "b-1").read().owner != "next run")

    # When a run reads it and tries to take the lock, then takes it over
    found = BackupLock(storage, "b-1").read()
    with pytest.raises(BackupLockedError) as refused:
        BackupLock(storage, "b-1", "next run", confirm_after=0).acquire()
    taken = BackupLock(storage, "b-1", "next run", confirm_after=0).acquire(break_lock=True)

    # Then the refusal names the holder, or says the lock is unreadable, and how to remove it
    message = str(refused.value)
    assert "break_lock" in message and "rbak unlock --path URL --backup-id b-1" in message
    assert message.isprintable() and len(message) < 1500
    if found.unreadable:
        assert found.owner == UNREADABLE_OWNER and "held by an unreadable lock" in message
    else:
        assert found.owner == orjson.loads(document)["owner"] and "is being written by another run" in message
    assert taken.owner == "next run" and BackupLock(storage, "b-1").read().owner == "next run"


def test_a_lock_file_is_read_only_up_to_its_cap(tmp_path, monkeypatch):
    # Given a lock object far larger than any lock, in a folder (whose ranged reads read only the range)
    storage = open_storage(tmp_path.as_uri())
    storage.put("b-1/lock.json", b" " * (8 * MAX_LOCK_BYTES))
    asked: list[int] = []
    real_range = storage.get_range
    monkeypatch.setattr(storage, "get_range", lambda key, offset, length: asked.append(length) or real_range(key, offset, length))
    for whole_read in ("get", "read_tagged"):
        real = getattr(storage, whole_read)
        monkeypatch.setattr(storage, whole_read, lambda key, real=real: pytest.fail("an oversized lock was read whole")
                            if storage.stat(key).size > MAX_LOCK_BYTES else real(key))

    # When a run reads it and breaks it
    found = BackupLock(storage, "b-1").read()
    taken = BackupLock(storage, "b-1", "next run", confirm_after=0).acquire(break_lock=True)

    # Then no read asked for more than the cap and one byte, and the lock was unreadable and taken over
    assert found.problem == f"larger than {MAX_LOCK_BYTES} bytes"
    assert max(asked) == MAX_LOCK_BYTES + 1 and taken.owner == "next run"


def test_a_well_formed_lock_reads_back_as_it_was_written():
    info = LockInfo("b-1", "nightly", "t" * 32, "host-1", 42, 1_000, 2_000)

    assert LockInfo.from_bytes(info.to_bytes(), "b-1") == info
    assert "problem" not in orjson.loads(info.to_bytes())
