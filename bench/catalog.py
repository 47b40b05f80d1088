"""The backups view's listing: one page of a location holding 500 backups, reading their manifests only.

Writes ``--backups`` manifests (``--queues`` queues of ``--segments`` segments each, as a daily backup
of a mid-sized broker lists them; no segment bodies: the listing never reads one) into a temporary
folder, then times ``BackupCatalog.page`` cold (a new catalog each round: every manifest read and
parsed, as on the first page load) and warm (within the cache's ttl, as when paging). Prints medians.

    .venv/bin/python bench/catalog.py [--backups 500] [--queues 10] [--segments 5] [--repeat 7]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from airflow_rbak.codec import BackupManifest, QueueBackup, SegmentMetadata
from airflow_rbak.codec.constants import Compression
from airflow_rbak.codec.layout import segment_key
from airflow_rbak.repository.manifest_store import ManifestStore
from airflow_rbak.storage import open_storage
from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.runs import RunIndex


def write_manifests(url: str, backups: int, queues: int, segments: int) -> int:
    """``backups`` complete manifests; returns the bytes of one."""
    store = ManifestStore(open_storage(url))
    for n in range(backups):
        backup_id = f"rbak-2026{n:05d}"
        entries = []
        for q in range(queues):
            segs = [SegmentMetadata(segment_key(backup_id, "/", f"queue-{q}", s, Compression.ZSTD), s, 1000, 1 << 20,
                                    2 << 20, 1_700_000_000_000, 1_700_000_001_000, "ab" * 32) for s in range(1, segments + 1)]
            entry = QueueBackup("/", f"queue-{q}", "classic", segs)
            entries.append(entry)
        manifest = BackupManifest(backup_id, 1_700_000_000_000 + n * 86_400_000, "0.1.0",
                                  completed_at=1_700_000_000_000 + n * 86_400_000 + 60_000, queues=entries)
        manifest.refresh_totals()
        store.save(manifest)
    return len(manifest.to_bytes())


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backups", type=int, default=500)
    parser.add_argument("--queues", type=int, default=10)
    parser.add_argument("--segments", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        url = Path(folder).as_uri()
        size = write_manifests(url, args.backups, args.queues, args.segments)
        runs = RunIndex()
        cold, warm = [], []
        for _ in range(args.repeat):
            catalog = BackupCatalog([url])
            location = catalog.locations[0]
            cold.append(timed(lambda: catalog.page(location, runs, 0, 50)))
            warm.append(timed(lambda: catalog.page(location, runs, 450, 50)))
        page = catalog.page(location, runs, 0, 50)
        assert page["total"] == args.backups and page["error"] is None, page["error"]
    print(f"{args.backups} backups, {args.queues} queues x {args.segments} segments each, manifest {size:,} bytes")
    print(f"first page, cold (every manifest read): median {statistics.median(cold) * 1000:.0f} ms "
          f"(min {min(cold) * 1000:.0f}, max {max(cold) * 1000:.0f}) over {args.repeat} rounds")
    print(f"a later page, warm (cached listing):    median {statistics.median(warm) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
