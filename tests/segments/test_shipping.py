"""What is shipped to a cluster's Spark executors, the environment archive, holds what the jobs import and
nothing of the broker: no pika, no ``airflow_rbak.broker``, and the jobs run from it with pika unimportable."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from pika import spec

from airflow_rbak.broker.amqp_types import DeliveredProperties
from airflow_rbak.capture.staged_delivery import stage_delivery
from airflow_rbak.codec.staged_records import read_staged
from airflow_rbak.segments.shipping import build_executor_env

#: What executors never import: the broker clients, the Airflow face, the command line, the UI, the restore.
NOT_SHIPPED = ("broker/", "operators/", "hooks/", "ui/", "cli/", "restore/", "provider.py", "links.py")
JOBS = ("airflow_rbak.segments.jobs.common", "airflow_rbak.segments.jobs.backup_segments",
        "airflow_rbak.segments.jobs.verify_segments", "airflow_rbak.segments.jobs.compact_segments",
        "airflow_rbak.segments.encode", "airflow_rbak.segments.verify", "airflow_rbak.segments.compact")
#: Run with ``python -I -S``: no site-packages but those named, pika and the broker modules refused on import.
PROBE = """
import sys

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("pika", "rstream", "requests", "airflow") or name.startswith("airflow_rbak.broker"):
            raise ImportError(f"{name} is not importable on an executor")

sys.meta_path.insert(0, Refuse())
sys.path[:0] = sys.argv[1].split("|")
import importlib
for job in sys.argv[2].split("|"):
    importlib.import_module(job)
from airflow_rbak.codec.staged_records import read_staged
import airflow_rbak
print(airflow_rbak.__file__)
sys.stdout.flush()
sys.stdout.buffer.write(read_staged(bytes.fromhex(sys.argv[3]), "orders", "/")[0])
"""


def staged() -> bytes:
    """A delivery as the capture stages it: every kind of property, typed headers, a quorum queue's own dropped."""
    props = spec.BasicProperties(content_type="application/json", delivery_mode=2, priority=3, message_id="m-1",
                                 timestamp=1_712_756_400, headers={"n": 5, "x-delivery-count": 1, "tags": ["a", {"b": True}]})
    method = spec.Basic.Deliver(delivery_tag=7, redelivered=True, exchange="shop", routing_key="orders.created")
    return stage_delivery(method, DeliveredProperties(b"".join(props.encode())), b'{"order": 1}', 1_712_756_400_123, 1)


def run_probe(paths: list[Path], record: bytes) -> tuple[str, bytes]:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", PROBE, "|".join(map(str, paths)), "|".join(JOBS), record.hex()],
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    where, _, out = done.stdout.partition(b"\n")
    return where.decode(), out


@pytest.fixture(scope="module")
def shipped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the environment archive, the archive unpacked)."""
    cache = tmp_path_factory.mktemp("cache")
    archive = Path(build_executor_env(cache))
    unpacked = tmp_path_factory.mktemp("env")
    with tarfile.open(archive) as tar:
        tar.extractall(unpacked, filter="tar" if hasattr(tarfile, "tar_filter") else None)
    return archive, unpacked


def test_the_executor_environment_holds_no_pika_and_no_broker_module(shipped):
    names = tarfile.open(shipped[0]).getnames()
    site = next(n for n in names if n.endswith("/site-packages/airflow_rbak/__init__.py")).removesuffix("airflow_rbak/__init__.py")
    ours = [n.removeprefix(site + "airflow_rbak/") for n in names if n.startswith(site + "airflow_rbak/")]

    assert [n for n in names if "pika" in n.lower()] == []
    assert [n for n in ours if n.startswith(NOT_SHIPPED)] == []
    assert "segments/jobs/verify_segments.py" in ours and any(n.startswith("codec/_speedups") for n in ours)
    assert any(n.startswith(site + "orjson") for n in names) and any(n.startswith(site + "zstandard") for n in names)


def test_the_jobs_import_and_a_staged_delivery_reads_from_the_environment_alone(shipped):
    # Given only the environment archive's site-packages on an isolated interpreter's path, pika refused
    site = next(shipped[1].glob("lib/python*/site-packages"))

    # When the jobs are imported and a delivery the capture staged is read there
    where, record = run_probe([site], staged())

    # Then they ran from the archive, and the record is the one read here with everything installed
    assert where.startswith(str(site)), where
    assert record == read_staged(staged(), "orders", "/")[0]
