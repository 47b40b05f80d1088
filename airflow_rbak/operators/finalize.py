"""The last task of a backup: the completed manifest, retention, and the backup location's Asset event."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_rbak.airflow_settings import rbak_settings
from airflow_rbak.display import package_logger
from airflow_rbak.links import RbakManifestLink, manifest_url
from airflow_rbak.operators import metrics
from airflow_rbak.operators.steps import backup_run, flat_results, run_step
from airflow_rbak.operators.storage_connection import StorageConnectionMixin

log = package_logger(__name__)  # not self.log: Airflow's structlog task logger takes no filter

#: Every backup location's Asset is attached through this alias (locations are only known at run time).
BACKUP_ASSET_ALIAS = "rbak-backups"


def backup_asset(safe_storage_url: str) -> Asset:
    """The Asset of one backup location: its storage URL without credentials."""
    return Asset(uri=safe_storage_url, name=f"rbak:{safe_storage_url}", group="rbak")


class RbakFinalizeManifestOperator(StorageConnectionMixin, BaseOperator):
    """Write ``manifest.json`` last (segments from the encode report, totals, ``completed_at``), drop staging,
    give back the backup's lock, apply retention, and record an Asset event with the backup's metadata."""

    template_fields: Sequence[str] = ("storage_url", "backup_id", "encode_report_key", "captures", "retention")
    operator_extra_links = (RbakManifestLink(),)

    def __init__(self, *, storage_url: str, backup_id: str, encode_report_key: str,
                 captures: list[dict[str, Any]] | None = None, retention: dict[str, Any] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("outlets", [AssetAlias(BACKUP_ASSET_ALIAS)])
        super().__init__(**kwargs)
        self.storage_url, self.backup_id, self.encode_report_key = storage_url, backup_id, encode_report_key
        self.captures, self.retention = captures, retention
        self.rbak_manifest_url: str | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        backup_id = str(self.backup_id)
        # verified here, where it acts, whatever an earlier task said: a param is a request, [rbak] retention the rule
        settings = rbak_settings()
        policy = run_step("retention settings", lambda: settings.run_retention("retention", self.retention))
        after_ms = run_step("[rbak] abandoned_grace_hours", settings.abandoned_after_ms)
        captures = flat_results(self.captures)
        run = backup_run(context, None, backup_id, str(self.storage_url))
        summary = run_step("finalize", lambda: run.finalize(str(self.encode_report_key), captures, policy, after_ms))
        self.rbak_manifest_url = manifest_url(str(self.storage_url), backup_id)
        context["outlet_events"][AssetAlias(BACKUP_ASSET_ALIAS)].add(backup_asset(summary["storage_url"]), extra=summary)
        metrics.backup_completed(summary)
        log.info("backup %s complete: %d messages, %.1f MB, %d segments, %s s", backup_id, summary["total_messages"],
                 summary["total_bytes"] / 1e6, summary["total_segments"], summary["duration_s"])
        return summary
