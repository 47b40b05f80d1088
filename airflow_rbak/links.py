"""Extra links from RBAK tasks: the backup's manifest, and the captured queue in the management UI.

Airflow 3 computes a link on the worker when the task ends (with the very
operator that ran, so attributes ``execute`` set are there) and stores it
as an XCom the UI reads; the URLs are therefore built here from what the
task learned, and hold no credentials.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from airflow_rbak.codec.layout import manifest_key
from airflow_rbak.storage.registry import backend_of
from airflow_rbak.storage.url import parse_storage_url


def manifest_url(storage_url: str, backup_id: str) -> str:
    """A browsable URL of ``{backup_id}/manifest.json``, as the location's backend links an object (file://, the S3
    endpoint's URL or the S3 console, ...)."""
    config = parse_storage_url(storage_url)
    return backend_of(config).link(config, manifest_key(backup_id))


def queue_url(management_base_url: str, vhost: str, queue: str) -> str:
    """The queue's page in the RabbitMQ management UI (vhost and name percent-encoded, ``/`` included)."""
    return f"{management_base_url.rstrip('/')}/#/queues/{quote(vhost, safe='')}/{quote(queue, safe='')}"


class RbakManifestLink(BaseOperatorLink):
    """Link to the backup's ``manifest.json``."""

    name = "RBAK manifest"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return getattr(operator, "rbak_manifest_url", None) or ""


class RabbitMQQueueLink(BaseOperatorLink):
    """Link to the captured queue in the RabbitMQ management UI."""

    name = "RabbitMQ queue"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return getattr(operator, "rbak_queue_url", None) or ""
