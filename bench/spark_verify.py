"""Verify throughput: the Spark verify job at local[1] and local[2] beside in-process verify of the same files.

    .venv/bin/python bench/spark_verify.py [--size-gib 1.0] [--segment-mib 32] [--repeat 3]

Writes a backup of about ``--size-gib`` of segment bytes (records with
random bodies, so the size is real: zstd cannot shrink them much) in a temp
folder, then times, on the same files in the same run:

* in-process, one thread: ``verification.check_group`` over every segment
  (exactly what each Spark task runs);
* ``spark-submit --master local[N] verify_segments.py`` for N = 1 and 2:
  wall time, and the job's own time for the check stage (its report's
  ``summary.seconds``, which excludes JVM, session and Python-worker start-up);
* the fixed cost: wall time of the same job on a one-segment backup.

Prints medians over ``--repeat`` runs and the local[2]/local[1] ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_rbak.codec import BackupManifest, BackupRecord, QueueBackup, encode_segment  # noqa: E402
from airflow_rbak.codec.constants import Compression  # noqa: E402
from airflow_rbak.codec.layout import segment_key  # noqa: E402
from airflow_rbak.repository.manifest_store import ManifestStore  # noqa: E402
from airflow_rbak.segments import verify as vf  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402

BODY = 1024 * 1024
VARIANTS = 4


def build_backup(url: str, backup_id: str, segments: int, segment_mib: int) -> int:
    """A queue of ``segments`` segments of about ``segment_mib`` MiB; returns the total segment bytes."""
    storage = open_storage(url)
    rng = random.Random(7)
    variants = []
    for v in range(VARIANTS):  # a few distinct segments, stored round-robin under every sequence number
        count = max(1, segment_mib * 1024 * 1024 // int(BODY * 1.15))
        records = [BackupRecord(body=rng.randbytes(BODY), routing_key="bench", delivery_tag=i + 1,
                                backed_up_at=1_712_756_400_000 + v * 1000 + i, source_queue="bench", source_vhost="/")
                   for i in range(count)]
        variants.append(encode_segment(records, Compression.ZSTD, 1))
    queue = QueueBackup(vhost="/", name="bench", queue_type="classic")
    for sequence in range(1, segments + 1):
        segment = variants[(sequence - 1) % VARIANTS]
        key = segment_key(backup_id, "/", "bench", sequence, Compression.ZSTD)
        storage.put(key, segment.data)
        queue.segments.append(segment.metadata(key, sequence))
    manifest = BackupManifest(backup_id=backup_id, created_at=0, completed_at=1, backup_tool_version="bench", queues=[queue])
    manifest.refresh_totals()
    ManifestStore(storage).save(manifest)
    return manifest.total_bytes


def in_process(url: str, backup_id: str) -> float:
    """Seconds for one thread to check every segment, as one Spark task would."""
    items = vf.manifest_items(ManifestStore(open_storage(url)).load(backup_id))
    started = time.perf_counter()
    results = vf.check_group(url, items)
    elapsed = time.perf_counter() - started
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]][:1]
    return elapsed


def spark(url: str, backup_id: str, master: str) -> tuple[float, float]:
    """(wall seconds, the job's own check-stage seconds) of one spark-submit.

    The job starts its Python workers in a warm-up action first, so its
    check-stage time holds no start-up; wall minus stage is the fixed cost.
    """
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "PYTHONWARNINGS": "ignore::FutureWarning"}
    command = ["spark-submit", "--master", master, "--driver-memory", "2g", str(ROOT / "spark_jobs" / "verify_segments.py"),
               "--storage-url", url, "--backup-id", backup_id]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{master} verify failed ({done.returncode}):\n{done.stderr[-3000:]}")
    report = orjson.loads(open_storage(url).get(done.stdout.strip().splitlines()[-1]))
    assert report["ok"] and report["summary"]["segments_checked"] == report["summary"]["segments_listed"]
    return wall, report["summary"]["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=float, default=1.0)
    parser.add_argument("--segment-mib", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rbak-bench-") as folder:
        url = Path(folder).as_uri()
        segments = max(2, round(args.size_gib * 1024 / args.segment_mib))  # segments come out a bit larger
        started = time.perf_counter()
        total = build_backup(url, "bench", segments, args.segment_mib)
        build_backup(url, "tiny", 1, 1)
        print(f"backup: {segments} segments, {total / 1e6:.0f} MB of segment bytes, written in {time.perf_counter() - started:.0f} s")
        mb = total / 1e6
        rows = {"in-process, 1 thread": [(t, t) for t in (in_process(url, "bench") for _ in range(args.repeat))]}
        for master in ("local[1]", "local[2]"):
            rows[f"spark {master}"] = [spark(url, "bench", master) for _ in range(args.repeat)]
        tiny = statistics.median(spark(url, "tiny", "local[2]")[0] for _ in range(args.repeat))
        print("\n| run | wall s | check stage s | MB/s (stage) | MB/s (wall) |\n|---|---|---|---|---|")
        medians = {}
        for name, samples in rows.items():
            wall, stage = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
            medians[name] = stage
            print(f"| {name} | {wall:.1f} | {stage:.1f} | {mb / stage:.0f} | {mb / wall:.0f} |")
        for name in ("spark local[1]", "spark local[2]"):
            fixed = statistics.median(w - st for w, st in rows[name])
            print(f"fixed cost of {name} (wall minus check stage): {fixed:.1f} s")
        print(f"wall of spark-submit local[2] on a 1-segment backup: {tiny:.1f} s")
        print(f"local[2] / local[1], start-up excluded: {medians['spark local[1]'] / medians['spark local[2]']:.2f}x")
        print(f"local[1] / in-process: {medians['in-process, 1 thread'] / medians['spark local[1]']:.2f}x")


if __name__ == "__main__":
    main()
