"""The cost of encryption at rest: encode and ``validate --deep`` with and without it, measured in the same run.

Each of ``--repeat`` rounds writes one backup of ``--queues`` queues of ``--messages`` messages (1 KiB random bodies,
typical properties, three headers: ``bench/validate.py``'s records) into a plain folder and into an encrypted one
(file storage, ``storage/encrypted.py``'s AES-256-GCM decorator), as the encode step writes segments, then deep-validates
each as ``rbak validate --deep`` does; the two locations alternate within a round, so both see the same machine state.
Prints, per step and location, the median wall seconds and core-seconds (user + system CPU of this process, its
threads included) and MB/s of message bodies, then the encrypted / plain ratio.

    .venv/bin/python bench/encryption.py [--queues 4] [--messages 20000] [--repeat 5] [--codec zstd]
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from validate import BODY, build_backup, deep_validate  # noqa: E402 - bench/validate.py, beside this script

from airflow_rbak.codec.constants import Compression  # noqa: E402
from airflow_rbak.storage.keyring import new_key_text, parse_keyring, storage_keyring  # noqa: E402

MODES = ("plain", "encrypted")


def core_seconds() -> float:
    """User plus system CPU seconds of this process so far (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measured(call) -> tuple[float, float]:
    """Wall and core seconds of ``call()``."""
    wall, cpu = time.perf_counter(), core_seconds()
    call()
    return time.perf_counter() - wall, core_seconds() - cpu


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queues", type=int, default=4)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per queue")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--codec", default="zstd", help="zstd (level 3), lz4 or none")
    args = parser.parse_args(argv)
    compression = Compression.parse(args.codec)
    keyring = parse_keyring(new_key_text("bench"))
    body_mb = args.queues * args.messages * BODY / 1e6
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="rbak-bench-encryption-") as folder:
        for round_ in range(args.repeat):
            for mode in MODES:
                url = (Path(folder) / mode).as_uri()
                backup_id = f"round-{round_}"
                with storage_keyring(keyring if mode == "encrypted" else None):
                    results.setdefault(("encode", mode), []).append(measured(
                        lambda: build_backup(url, backup_id, compression, args.queues, args.messages)))
                    results.setdefault(("validate --deep", mode), []).append(measured(
                        lambda: deep_validate(url, backup_id)))
                shutil.rmtree(Path(folder) / mode / backup_id)
    print(f"medians of {args.repeat} rounds, {body_mb:.0f} MB of message bodies per backup, codec {args.codec}, "
          f"file storage; python {sys.version.split()[0]}")
    print(f"{'step':16} {'location':10} {'wall s':>7} {'core s':>7} {'MB/s':>6}")
    for (step, mode), samples in results.items():
        wall, cpu = statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)
        print(f"{step:16} {mode:10} {wall:7.2f} {cpu:7.2f} {body_mb / wall:6.0f}")
    for step in ("encode", "validate --deep"):
        plain, sealed = results[(step, "plain")], results[(step, "encrypted")]
        wall = statistics.median(e[0] / p[0] for p, e in zip(plain, sealed, strict=True))
        cpu = statistics.median(e[1] / p[1] for p, e in zip(plain, sealed, strict=True))
        print(f"{step}: encrypted / plain, median of the per-round ratios: wall {wall:.2f}x, core-seconds {cpu:.2f}x")


if __name__ == "__main__":
    main()
