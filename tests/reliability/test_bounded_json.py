"""A JSON document planted in the location cannot exhaust memory: its size is stat'ed before it is read and its
values are counted before it is parsed.

16 MiB of ``{},`` parses to about 470 MiB; planted as a backup's definitions export, it is refused with the process's
resident set (``VmHWM``, measured in a process of its own) growing by little more than its text. An object larger
than the byte cap is refused from its stated size, unread. See docs/reliability.md, "Memory bounds, stated".
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from airflow_rbak.codec.bounded_json import (
    DEFINITIONS_LIMITS,
    JsonContentError,
    JsonLimitError,
    JsonLimits,
    check_json_bytes,
    loads_bounded,
    value_bound,
)
from airflow_rbak.codec.compression import compress
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.errors import ManifestError
from airflow_rbak.codec.manifest import MAX_MANIFEST_BYTES
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore.definitions import load_definitions
from airflow_rbak.restore.errors import DefinitionsImportError
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectTooLargeError, read_bounded

REPO = Path(__file__).resolve().parents[2]
MiB = 1024**2
DENSE = b"[" + b"{}," * (16 * MiB // 3) + b"{}]"  # 16 MiB, 5.6 million objects

# Runs in a fresh interpreter: the high-water mark before and after one load_definitions, and what it raised.
_WORKER = """
import sys
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.restore.definitions import load_definitions
from airflow_rbak.storage import open_storage

def hwm():
    return next(int(line.split()[1]) * 1024 for line in open("/proc/self/status") if line.startswith("VmHWM:"))

storage = open_storage(sys.argv[1])
before = hwm()
try:
    load_definitions(storage, sys.argv[2])
    outcome = "read"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {exc}"
print(hwm() - before)
print(outcome)
"""


def _load_in_a_process(location: str, key: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", _WORKER, location, key], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=True)
    growth, outcome = done.stdout.splitlines()[-2:]
    return int(growth), outcome


@pytest.mark.parametrize("compression", [Compression.ZSTD, Compression.NONE])
def test_a_dense_definitions_export_is_refused_unparsed_and_memory_stays_bounded(tmp_path, compression):
    location = (tmp_path / "b").as_uri()
    key = "b-1/definitions/definitions.json" + {Compression.ZSTD: ".zst", Compression.NONE: ""}[compression]
    open_storage(location).put(key, compress(DENSE, compression, 3))

    growth, outcome = _load_in_a_process(location, key)

    assert outcome.startswith("DefinitionsImportError") and "nothing was imported" in outcome
    assert growth < 48 * MiB, f"resident set grew by {growth // MiB} MiB"  # its text, once; parsed: about 470 MiB


def test_an_export_over_the_byte_cap_is_refused_from_its_size_without_being_read(tmp_path):
    location = (tmp_path / "b").as_uri()
    key = "b-1/definitions/definitions.json"
    path = tmp_path / "b" / key
    path.parent.mkdir(parents=True)
    with open(path, "wb") as sparse:
        sparse.truncate(DEFINITIONS_LIMITS.max_bytes + 1)

    growth, outcome = _load_in_a_process(location, key)

    assert outcome.startswith("DefinitionsImportError") and "ObjectTooLargeError" in outcome
    assert growth < 16 * MiB, f"resident set grew by {growth // MiB} MiB"


def test_read_bounded_refuses_by_the_stated_size_and_reads_what_fits(tmp_path):
    storage = open_storage((tmp_path / "b").as_uri())
    storage.put("small.json", b"{}")
    storage.put("large.json", b"x" * 101)

    assert read_bounded(storage, "small.json", 100) == b"{}"
    with pytest.raises(ObjectTooLargeError, match="large.json: 101 bytes, over the 100 bytes"):
        read_bounded(storage, "large.json", 100)


def test_the_value_bound_is_an_upper_bound_counted_without_parsing():
    doc = {"a": [1, 2, {"b": None, "c": "x,y[z{"}], "d": {}}
    parsed_values = 9  # the outer object, a, 1, 2, the inner object, b, c, d, d's object

    assert value_bound(orjson.dumps(doc)) >= parsed_values
    assert value_bound(DENSE) > DEFINITIONS_LIMITS.max_values


def test_loads_bounded_names_the_object_and_the_cap_it_is_over():
    limits = JsonLimits(max_bytes=1000, max_values=50, what="a test document")

    with pytest.raises(JsonLimitError, match=r"doc.json: holds up to \d+ JSON values, over the 50 a test document"):
        loads_bounded(b"[" + b"{}," * 60 + b"{}]", "doc.json", limits)
    with pytest.raises(JsonLimitError, match="doc.json: 1001 bytes, over the 1000 bytes a test document may hold"):
        check_json_bytes(b" " * 1001, "doc.json", limits)
    with pytest.raises(JsonContentError, match="doc.json: an object names the key 'a' more than once"):
        loads_bounded(b'{"a":1,"b":{},"a":2}', "doc.json", limits, unique_keys=True)
    with pytest.raises(JsonContentError, match="doc.json: not valid JSON"):
        loads_bounded(b'{"a":', "doc.json", limits)
    assert loads_bounded(b'{"a":[1,{"b":2}]}', "doc.json", limits, unique_keys=True) == {"a": [1, {"b": 2}]}


def test_an_export_with_a_repeated_key_is_refused(tmp_path):
    storage = open_storage((tmp_path / "b").as_uri())
    storage.put("b-1/definitions/definitions.json", b'{"queues":[],"policies":[],"queues":[{"name":"q","vhost":"/"}]}')

    with pytest.raises(DefinitionsImportError, match="nothing was imported"):
        load_definitions(storage, "b-1/definitions/definitions.json")


def _definitions_of(queues: int) -> bytes:
    """A large legitimate export: per queue four arguments, an exchange and two bindings."""
    q = [{"name": f"queue-name-{i:06d}", "vhost": "production", "durable": True, "auto_delete": False,
          "arguments": {"x-queue-type": "quorum", "x-max-length": 100000, "x-dead-letter-exchange": "dlx",
                        "x-overflow": "reject-publish"}} for i in range(queues)]
    e = [{"name": f"exchange-{i:06d}", "vhost": "production", "type": "topic", "durable": True, "auto_delete": False,
          "internal": False, "arguments": {"alternate-exchange": "ae"}} for i in range(queues)]
    b = [{"source": f"exchange-{i % queues:06d}", "vhost": "production", "destination": f"queue-name-{i % queues:06d}",
          "destination_type": "queue", "routing_key": f"orders.{i}.#", "arguments": {"x-match": "all"}}
         for i in range(2 * queues)]
    return orjson.dumps({"rabbit_version": "3.10.8", "users": [], "vhosts": [{"name": "production"}], "permissions": [],
                         "policies": [], "queues": q, "exchanges": e, "bindings": b})


def test_the_caps_hold_the_definitions_of_100000_queues_with_room_to_spare():
    data = _definitions_of(100_000)

    check_json_bytes(data, "definitions.json", DEFINITIONS_LIMITS)  # raises if over
    assert len(data) < 0.6 * DEFINITIONS_LIMITS.max_bytes and value_bound(data) < 0.9 * DEFINITIONS_LIMITS.max_values


def test_a_manifest_stated_larger_than_its_cap_is_refused_without_being_read(tmp_path, monkeypatch):
    storage = open_storage((tmp_path / "b").as_uri())
    path = tmp_path / "b" / "b-1" / "manifest.json"
    path.parent.mkdir(parents=True)
    with open(path, "wb") as sparse:
        sparse.truncate(MAX_MANIFEST_BYTES + 1)
    monkeypatch.setattr(storage, "get_range", lambda *args: pytest.fail("the manifest was read"))
    monkeypatch.setattr(storage, "get", lambda *args: pytest.fail("the manifest was read"))

    with pytest.raises(ManifestError, match="over the 64 MiB a manifest may hold"):
        ManifestStore(storage).load("b-1")
