"""Searching stored messages: ``rbak search`` in process and on Spark local[2], and ``rbak messages``, each beside
the deep check of the same location where it runs (``rbak validate --deep`` in process, the ``verify_segments``
job on Spark), measured in the same run.

    .venv/bin/python bench/search.py [--messages 1000000] [--body 1024] [--repeat 1] [--folder DIR]

Writes one backup of ``--messages`` records of ``--body`` bytes (two queues; bodies of random base64, so zstd
cannot shrink them much and the bytes read are real) in a temp folder, then runs each command as a user would,
as a separate process, and reports for each: wall seconds, core-seconds (user + system CPU of the process and
everything it started and waited for: the JVM and Python workers of spark-submit too), their ratio to the deep
check's, and peak RSS (the largest resident set of the command's process tree at once, sampled every 0.2 s).
Each search matches nothing (or one message), so it reads every segment and prints almost nothing: the cost is
the reading. Prints medians over ``--repeat`` runs as a Markdown table (docs/performance.md).
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from airflow_rbak.codec import BackupProperties, BackupRecord, HeaderValue  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.repository.backup_writer import BackupWriter  # noqa: E402

RBAK = [sys.executable, "-m", "airflow_rbak.cli.main"]
SPARK_SUBMIT = str(Path(sys.executable).parent / "spark-submit")
T0 = 1_764_000_000_000


def build(url: str, messages: int, body: int) -> tuple[int, int]:
    """One backup ``bench`` of two queues; returns (segment bytes, payload bytes)."""
    writer = BackupWriter(open_storage(url), "bench", segment_max_bytes=32 * 1024**2, level=1)
    raw = body * 3 // 4
    for q in range(2):
        sink = writer.queue("/", f"orders-{q}")
        for i in range(q, messages, 2):
            pad = base64.b64encode(os.urandom(raw))[:body]
            sink.add(BackupRecord(body=pad, properties=BackupProperties(message_id=f"m-{i}", content_type="text/plain"),
                                  headers=(("x-tenant", HeaderValue.long_string(f"tenant-{i % 50}")),),
                                  routing_key=f"orders.{i % 7}", exchange="orders", delivery_tag=i + 1,
                                  backed_up_at=T0 + i, source_queue=f"orders-{q}", source_vhost="/"))
        sink.close()
    manifest = writer.finish()
    return manifest.total_bytes, sum(s.uncompressed_bytes for q in manifest.queues for s in q.segments)


def measure(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, subprocess.CompletedProcess[str]]:
    """(wall s, core-seconds, peak tree RSS bytes, the finished process) of one command."""
    started = time.perf_counter()
    before = os.times()
    proc = psutil.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    peak = 0
    while proc.poll() is None:
        rss = 0
        for p in [proc, *proc.children(recursive=True)]:
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                continue
        peak = max(peak, rss)
        time.sleep(0.2)
    out, err = proc.communicate()
    wall = time.perf_counter() - started
    after = os.times()
    # the CPU of the command and of every process under it that was waited for (spark-submit's JVM, its Python
    # daemon and workers): each parent reaps its children, so their times add up into ours when we reap it
    core = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    done = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    return wall, core, peak, done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--folder", help="keep the backup here (default: a temp folder, removed)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(ROOT), os.environ.get("PYTHONPATH")))),
           "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="rbak-bench-search-", dir=args.folder) as folder:
        url = Path(folder).as_uri()
        started = time.perf_counter()
        stored, payload = build(url, args.messages, args.body)
        print(f"backup: {args.messages:,} messages of {args.body} B, {stored / 1e6:.0f} MB of segments "
              f"({payload / 1e6:.0f} MB of records), written in {time.perf_counter() - started:.0f} s", flush=True)
        target = f"m-{args.messages * 3 // 4 + 1}"
        search = ["search", "--path", url, "--placement", "process"]
        runs = {
            "rbak validate --deep": ["validate", "--path", url, "--backup-id", "bench", "--deep"],
            "rbak search --message-id (in process)": [*search, "--message-id", target],
            "rbak search --body-regex with a literal (in process)": [*search, "--body-regex", "ZZZZ[0-9]{2}QQ"],
            "rbak search --body-regex without one (in process)": [*search, "--body-regex", "[0-9]{9}[.]"],
            "rbak search --body-contains (in process)": [*search, "--body-contains", "ZZZZ"],
            "rbak search --routing-key (in process)": [*search, "--routing-key", "refunds.*"],
            "rbak search --header (in process)": [*search, "--header", "x-tenant=acme"],
            "rbak search --since/--until (in process)": [*search, "--since", str(T0 - 10), "--until", str(T0 - 1)],
            "verify_segments.py (Spark local[2])": [SPARK_SUBMIT, "--master", "local[2]",
                                                    str(ROOT / "spark_jobs" / "verify_segments.py"), "--storage-url",
                                                    url, "--backup-id", "bench", "--report-key", "bench-verify.json"],
            "rbak search --message-id (Spark local[2])": ["search", "--path", url, "--message-id", target,
                                                          "--placement", "spark", "--spark-master", "local[2]"],
            "rbak search --body-regex with a literal (Spark local[2])": [
                "search", "--path", url, "--body-regex", "ZZZZ[0-9]{2}QQ", "--placement", "spark",
                "--spark-master", "local[2]"],
            "rbak messages --message-id (one backup)": ["messages", "--path", url, "--backup-id", "bench",
                                                        "--message-id", target],
        }
        rows: dict[str, list[tuple[float, float, int]]] = {name: [] for name in runs}
        for _ in range(args.repeat):
            for name, argv in runs.items():
                wall, core, peak, done = measure(argv if argv[0] == SPARK_SUBMIT else [*RBAK, *argv], env)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
                if "search" in name and "message-id" in name:
                    assert f"message_id {target}" in done.stdout, done.stdout
                rows[name].append((wall, core, peak))
                print(f"  {name}: {wall:.1f} s wall, {core:.1f} core-s, {peak / 2**20:.0f} MiB", flush=True)
        print(f"\n{args.messages:,} messages of {args.body} B; {payload / 1e6:.0f} MB of records in "
              f"{stored / 1e6:.0f} MB of segments; medians of {args.repeat} run(s)\n")
        print("| command | wall s | core-s | core-s / validate | peak RSS MiB |\n|---|---:|---:|---:|---:|")
        baselines = {where: statistics.median(s[1] for s in rows[name]) for where, name in
                     (("process", "rbak validate --deep"), ("spark", "verify_segments.py (Spark local[2])"))}
        for name, samples in rows.items():
            baseline = baselines["spark" if "Spark" in name else "process"]
            wall = statistics.median(s[0] for s in samples)
            core = statistics.median(s[1] for s in samples)
            peak = statistics.median(s[2] for s in samples)
            print(f"| {name} | {wall:.1f} | {core:.1f} | {core / baseline:.2f}x | {peak / 2**20:.0f} |")

if __name__ == "__main__":
    main()
