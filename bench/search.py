"""Searching stored messages: ``rbak search`` in process and on Spark local[2], ``rbak messages``, each beside
``rbak validate --deep`` of the same location, measured in the same run.

    .venv/bin/python bench/search.py [--messages 1000000] [--body 1024] [--repeat 1] [--folder DIR]

Writes one backup of ``--messages`` records of ``--body`` bytes (two queues; bodies of random base64, so zstd
cannot shrink them much and the bytes read are real) in a temp folder, then runs each command as a user would,
as a separate process, and reports for each: wall seconds, core-seconds (user + system CPU of the process and
everything it started and waited for: the JVM and Python workers of spark-submit too) and peak RSS (the largest
resident set of the command's process tree at once, sampled every 0.2 s). The searches look for one message by message_id
and for a body regular expression, so each reads every segment and prints almost nothing: the cost is the
reading. Prints medians over ``--repeat`` runs as a Markdown table (docs/performance.md).
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

from airflow_rbak.codec import BackupProperties, BackupRecord  # noqa: E402
from airflow_rbak.storage import open_storage  # noqa: E402
from tests.repository.backup_writer import BackupWriter  # noqa: E402

RBAK = [sys.executable, "-m", "airflow_rbak.cli.main"]
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
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with tempfile.TemporaryDirectory(prefix="rbak-bench-search-", dir=args.folder) as folder:
        url = Path(folder).as_uri()
        started = time.perf_counter()
        stored, payload = build(url, args.messages, args.body)
        print(f"backup: {args.messages:,} messages of {args.body} B, {stored / 1e6:.0f} MB of segments "
              f"({payload / 1e6:.0f} MB of records), written in {time.perf_counter() - started:.0f} s", flush=True)
        target = f"m-{args.messages * 3 // 4 + 1}"
        runs = {
            "rbak validate --deep": ["validate", "--path", url, "--backup-id", "bench", "--deep"],
            "rbak search --message-id (in process)": ["search", "--path", url, "--message-id", target,
                                                      "--placement", "process"],
            "rbak search --body-regex (in process)": ["search", "--path", url, "--body-regex", "ZZZZ[0-9]{2}QQ",
                                                      "--placement", "process"],
            "rbak search --message-id (Spark local[2])": ["search", "--path", url, "--message-id", target,
                                                          "--placement", "spark", "--spark-master", "local[2]"],
            "rbak messages --message-id (one backup)": ["messages", "--path", url, "--backup-id", "bench",
                                                        "--message-id", target],
        }
        rows: dict[str, list[tuple[float, float, int]]] = {name: [] for name in runs}
        for _ in range(args.repeat):
            for name, argv in runs.items():
                wall, core, peak, done = measure([*RBAK, *argv], env)
                if done.returncode != 0:
                    raise SystemExit(f"{name} failed ({done.returncode}): {done.stderr[-2000:]}")
                if "search" in name and "message-id" in name:
                    assert f"message_id {target}" in done.stdout, done.stdout
                rows[name].append((wall, core, peak))
                print(f"  {name}: {wall:.1f} s wall, {core:.1f} core-s, {peak / 2**20:.0f} MiB", flush=True)
        print(f"\n{args.messages:,} messages of {args.body} B; {payload / 1e6:.0f} MB of records in "
              f"{stored / 1e6:.0f} MB of segments; medians of {args.repeat} run(s)\n")
        print("| command | wall s | core-s | peak RSS MiB | MB of records / wall s |\n|---|---|---|---|---|")
        for name, samples in rows.items():
            wall = statistics.median(s[0] for s in samples)
            core = statistics.median(s[1] for s in samples)
            peak = statistics.median(s[2] for s in samples)
            print(f"| {name} | {wall:.1f} | {core:.1f} | {peak / 2**20:.0f} | {payload / 1e6 / wall:.0f} |")


if __name__ == "__main__":
    main()
