"""Machine-readable job reports, stored beside the backup under ``{backup_id}/reports/``.

Every Spark job ends by writing one report and printing its key as the only
line on stdout, so a shell (``key=$(spark-submit ...)``), the Airflow hook
and the finalize step all find it the same way.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from airflow_rbak import __version__
from airflow_rbak.codec.bounded_json import JsonContentError, JsonLimitError, JsonLimits, loads_bounded
from airflow_rbak.codec.layout import reports_prefix
from airflow_rbak.exceptions import RbakError
from airflow_rbak.storage.base import ObjectNotFoundError, ObjectTooLargeError, Storage, read_bounded

REPORT_FORMAT = 1
#: A report is read from the location, so its size is bounded before it is parsed: each segment takes a few
#: hundred bytes of details, so this holds a backup of some 200,000 segments.
MAX_REPORT_BYTES = 64 * 1024**2
#: And its values are counted before it is parsed: a segment's details are about a dozen values (3,000,000 hold
#: those 200,000 segments with room to spare), while 64 MiB of ``{},`` would parse to nearly 2 GiB.
REPORT_LIMITS = JsonLimits(MAX_REPORT_BYTES, 3_000_000, "a report")


class ReportError(RbakError):
    """A job report is missing or is not a report of the expected job."""


def new_report_key(backup_id: str, job: str) -> str:
    """``{backup_id}/reports/{job}-YYYYMMDDTHHMMSSZ-xxxxxx.json``: sortable by time, unique per run."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return f"{reports_prefix(backup_id)}{job}-{stamp}-{secrets.token_hex(3)}.json"


@dataclass
class JobReport:
    """The report of one job run: ``summary`` is small (it becomes the operator's XCom), ``details`` is not."""

    job: str
    backup_id: str
    storage_url: str
    ok: bool = True
    started_at: int = field(default_factory=lambda: int(time.time() * 1000))
    finished_at: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "job": self.job,
            "backup_id": self.backup_id,
            "storage_url": self.storage_url,
            "tool_version": __version__,
            "ok": self.ok,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "settings": self.settings,
            "summary": self.summary,
            "details": self.details,
        }

    def save(self, storage: Storage, key: str | None = None) -> str:
        """Stamp ``finished_at``, store the report (atomically) and return its key."""
        self.finished_at = int(time.time() * 1000)
        self.summary.setdefault("ok", self.ok)
        key = key or new_report_key(self.backup_id, self.job)
        storage.put(key, orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
        return key


def load_report(storage: Storage, key: str, job: str | None = None) -> dict[str, Any]:
    """Read a stored report, checking it is one (and, when given, of ``job``); an object larger than
    :data:`MAX_REPORT_BYTES` is refused unread."""
    try:
        body = loads_bounded(read_bounded(storage, key, MAX_REPORT_BYTES, "a report"), key, REPORT_LIMITS)
    except ObjectNotFoundError:
        raise ReportError(f"{storage.url}: no report at {key!r}") from None
    except ObjectTooLargeError as exc:
        raise ReportError(f"{exc}; not a report this project writes") from None
    except JsonLimitError as exc:
        raise ReportError(f"{exc}; not a report this project writes") from None
    except JsonContentError as exc:
        raise ReportError(f"{key}: not a JSON report ({exc.reason})") from None
    if not isinstance(body, dict) or body.get("format") != REPORT_FORMAT:
        raise ReportError(f"{key}: not an RBAK job report (format {REPORT_FORMAT})")
    if job is not None and body.get("job") != job:
        raise ReportError(f"{key}: is a report of job {body.get('job')!r}, expected {job!r}")
    return body
