"""The backups view's catalog without Airflow: a location configured with credentials is refused, never shown."""

from __future__ import annotations

import json

import pytest

from airflow_rbak.exceptions import ConfigurationError
from airflow_rbak.settings import RbakSettings, environment_lookup
from airflow_rbak.ui.backup_catalog import BackupCatalog
from airflow_rbak.ui.runs import RunIndex

SECRET_URLS = ["s3://AKIAEXAMPLE:wJalr/XUtnFEMI?K7MDENG#bPxRfiCY@bucket/backups",
               "s3://bucket/backups?endpoint=http://minio:wJalrXUtnFEMI@127.0.0.1:9000"]


def test_a_location_with_credentials_is_listed_as_refused_with_where_credentials_go_and_never_its_url(tmp_path):
    catalog = BackupCatalog([tmp_path.as_uri(), *SECRET_URLS])

    listed = [loc.to_json() for loc in catalog.locations]
    pages = [catalog.page(loc, RunIndex([])) for loc in catalog.locations]

    assert listed[0] == {"id": listed[0]["id"], "url": tmp_path.as_uri(), "refused": None}
    assert [loc["url"] for loc in listed[1:]] == ["(location 2: refused)", "(location 3: refused)"]
    assert all("must not hold credentials" in loc["refused"] and "aws" in loc["refused"] for loc in listed[1:])
    assert pages[0]["error"] is None
    assert all("must not hold credentials" in page["error"] and page["backups"] == [] for page in pages[1:])
    shown = json.dumps([listed, pages])
    assert "wJalr" not in shown and "AKIAEXAMPLE" not in shown and "K7MDENG" not in shown


def test_the_ui_lists_a_default_location_with_credentials_as_refused_while_the_dags_refuse_it_outright():
    settings = RbakSettings(environment_lookup({"AIRFLOW__RBAK__STORAGE_URL": SECRET_URLS[0],
                                                "AIRFLOW__RBAK__UI_LOCATIONS": "memory://elsewhere"}))

    with pytest.raises(ConfigurationError) as raised:
        settings.storage_url()
    catalog = BackupCatalog(settings.ui_storage_urls())

    assert str(raised.value).startswith("[rbak] storage_url: a s3:// storage URL must not hold credentials")
    assert "wJalr" not in str(raised.value)
    assert [(loc.url, bool(loc.refused)) for loc in catalog.locations] == [
        ("(location 1: refused)", True), ("memory://elsewhere", False)]
