"""Verify work: which segments to check, how to spread them, and checking one group in a task."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from airflow_rbak.codec import BackupManifest, SegmentMetadata
from airflow_rbak.codec.constants import DEFAULT_MAX_DECOMPRESSED_BYTES
from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.repository.segment_check import SegmentCheck, check_segment
from airflow_rbak.storage import open_storage
from airflow_rbak.storage.base import ObjectNotFoundError


@dataclass(frozen=True)
class VerifyItem:
    """One segment to check, with the queue it belongs to (picklable, small)."""

    vhost: str
    queue: str
    segment: dict[str, Any]

    @property
    def size(self) -> int:
        return int(self.segment.get("size_bytes", 0))


def manifest_items(manifest: BackupManifest) -> list[VerifyItem]:
    """Every segment the manifest lists, in manifest order."""
    return [VerifyItem(q.vhost, q.name, s.to_json()) for q in manifest.queues for s in q.segments]


def sample(items: list[VerifyItem], percent: float, seed: str) -> list[VerifyItem]:
    """Keep about ``percent`` % of the segments, chosen by a keyed hash (like kopia's files percent).

    The same seed picks the same subset; a fresh seed per run covers every
    segment over time. At least one segment is kept when there are any.
    """
    if not 0 < percent <= 100:
        raise ConfigurationError(f"sample percent must be in (0, 100], got {percent}")
    if percent == 100 or not items:
        return list(items)
    scored = [(_score(seed, item.segment["key"]), item) for item in items]
    kept = [item for score, item in scored if score < percent / 100]
    return kept or [min(scored, key=lambda pair: pair[0])[1]]


def _score(seed: str, key: str) -> float:
    return int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:8], "big") / 2**64


def balanced_groups(items: list[VerifyItem], groups: int) -> list[list[VerifyItem]]:
    """Split segments into ``groups`` groups of similar total size (largest first, each to the lightest group)."""
    buckets: list[list[VerifyItem]] = [[] for _ in range(max(1, groups))]
    totals = [0] * len(buckets)
    for item in sorted(items, key=lambda item: -item.size):
        lightest = totals.index(min(totals))
        buckets[lightest].append(item)
        totals[lightest] += item.size
    return [bucket for bucket in buckets if bucket]


def check_group(storage_url: str, items: list[VerifyItem], cap: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> list[dict[str, Any]]:
    """Check each segment of a group (one task): one JSON result per segment."""
    storage = open_storage(storage_url)
    return [
        check_segment(storage, item.vhost, item.queue, SegmentMetadata.from_json(item.segment), cap).to_json() for item in items
    ]


def stat_group(storage_url: str, items: list[VerifyItem]) -> list[dict[str, Any]]:
    """The quick check of each segment of a group: stored, at the size its entry lists."""
    storage = open_storage(storage_url)
    results = []
    for item in items:
        result = SegmentCheck(item.segment["key"], item.vhost, item.queue, int(item.segment["sequence"]))
        try:
            stored = storage.stat(result.key).size
            if stored != item.size:
                result.defects.append(f"size {stored}, manifest says {item.size}")
        except ObjectNotFoundError:
            result.defects.append("missing")
        results.append(result.to_json())
    return results
