"""The backups view's API on a running api-server: every location's backups with the list's fields."""

from __future__ import annotations

import pytest

from tests.ui.conftest import SECRET_PARTS, UNREACHABLE, ApiServer

pytestmark = pytest.mark.s3

FIELDS = {"backup_id", "status", "complete", "created_at", "completed_at", "queues", "total_messages", "total_bytes",
          "total_segments", "compression", "last_verify", "depends_on", "needed_by", "problem"}


def _locations(api_server: ApiServer) -> dict[str, str]:
    reply = api_server.get("/rbak/api/locations")
    assert reply.status_code == 200, reply.text
    return {loc["url"]: loc["id"] for loc in reply.json()}


def test_every_location_is_listed_default_first(api_server):
    assert list(_locations(api_server)) == [api_server.file_url, api_server.s3_url, UNREACHABLE, "(location 4: refused)",
                                            api_server.hostile_url, api_server.messages_url]


def test_a_location_with_credentials_is_shown_refused_and_no_part_of_its_secret_is_anywhere(api_server):
    refused = api_server.get("/rbak/api/locations").json()[3]
    page = api_server.get(f"/rbak/api/locations/{refused['id']}/backups").json()
    html = api_server.get("/rbak/")

    assert refused["url"] == "(location 4: refused)" and "must not hold credentials" in refused["refused"]
    assert page["backups"] == [] and "must not hold credentials" in page["error"]
    assert html.status_code == 200 and "must not hold credentials" in html.text
    shown = api_server.get("/rbak/api/locations").text + str(page) + html.text
    assert not [part for part in SECRET_PARTS if part in shown]


def test_the_folder_lists_its_backups_newest_first_with_every_field_and_the_chain_both_ways(api_server):
    loc = _locations(api_server)[api_server.file_url]
    page = api_server.get(f"/rbak/api/locations/{loc}/backups").json()
    assert page["error"] is None and page["total"] == 3
    rows = {b["backup_id"]: b for b in page["backups"]}
    assert all(FIELDS <= set(b) for b in page["backups"])
    assert rows["sample-1"]["complete"] and rows["sample-1"]["needed_by"] == ["sample-2"]
    assert rows["sample-2"]["depends_on"] == ["sample-1"] and rows["sample-2"]["queues"] == 1
    assert rows["sample-3-running"]["status"] == "incomplete" and not rows["sample-3-running"]["complete"]
    assert rows["sample-1"]["queues"] == 3 and rows["sample-1"]["total_messages"] == 282
    assert rows["sample-1"]["compression"] == ["zstd"] and rows["sample-1"]["total_bytes"] > 0


def test_planted_manifests_are_marked_beside_the_real_backup_and_no_page_answers_500(api_server):
    loc = _locations(api_server)[api_server.hostile_url]
    page = api_server.get(f"/rbak/api/locations/{loc}/backups").json()
    html = api_server.get("/rbak/")

    assert page["error"] is None
    assert {b["backup_id"]: b["status"] for b in page["backups"]} == {
        "real-1": "complete", "planted-2100": "future", "huge-time": "future", "garbage": "damaged"}
    assert html.status_code == 200 and "invalid time (9000000000000000000)" in html.text
    for backup_id in ("real-1", "planted-2100", "huge-time", "garbage"):
        detail = api_server.get(f"/rbak/backups/{loc}/{backup_id}")
        assert detail.status_code in (200, 502) and backup_id in detail.text, (backup_id, detail.status_code)
        assert "Traceback" not in detail.text and "Internal Server Error" not in detail.text


def test_the_bucket_on_loopback_s3_lists_its_backup(api_server):
    loc = _locations(api_server)[api_server.s3_url]
    page = api_server.get(f"/rbak/api/locations/{loc}/backups").json()
    assert page["error"] is None
    assert [(b["backup_id"], b["status"], b["total_messages"]) for b in page["backups"]] == [("s3-sample-1", "complete", 282)]


def test_an_unreachable_location_is_reported_and_the_page_still_renders(api_server):
    loc = _locations(api_server)[UNREACHABLE]
    page = api_server.get(f"/rbak/api/locations/{loc}/backups").json()
    assert page["total"] == 0 and page["error"]
    html = api_server.get("/rbak/")
    assert html.status_code == 200 and "This location cannot be read" in html.text and "sample-2" in html.text


def test_pages_are_limited_and_offset(api_server):
    loc = _locations(api_server)[api_server.file_url]
    first = api_server.get(f"/rbak/api/locations/{loc}/backups", params={"limit": 2}).json()
    rest = api_server.get(f"/rbak/api/locations/{loc}/backups", params={"limit": 2, "offset": 2}).json()
    assert len(first["backups"]) == 2 and len(rest["backups"]) == 1 and first["total"] == rest["total"] == 3


def test_a_backup_lists_its_queues_segments_definitions_and_who_may_trigger(api_server):
    loc = _locations(api_server)[api_server.file_url]
    detail = api_server.get(f"/rbak/api/locations/{loc}/backups/sample-1").json()
    assert {(q["vhost"], q["name"], q["messages"]) for q in detail["queues"]} == {
        ("/", "orders", 240), ("prod", "payments", 30), ("prod", "events/eu", 12)}
    assert all(q["segments"] and q["segments"][0]["key"].startswith("sample-1/") for q in detail["queues"])
    assert detail["definitions"]["vhosts"] == 2 and detail["definitions"]["queues"] == 3
    assert detail["can"] == {"restore": True, "verify": True}
    assert api_server.get(f"/rbak/api/locations/{loc}/backups/sample-1", user="viewer").json()["can"] == {
        "restore": False, "verify": False}
    chained = api_server.get(f"/rbak/api/locations/{loc}/backups/sample-2").json()
    assert chained["queues"][0]["chain"] == ["sample-1", "sample-2"]


def test_without_a_token_nothing_is_shown(api_server):
    import requests

    assert requests.get(f"{api_server.base}/rbak/api/locations", timeout=30).status_code == 401


def test_the_openapi_document_needs_a_login_like_every_other_route(api_server):
    import requests

    anonymous = requests.get(f"{api_server.base}/rbak/openapi.json", timeout=30)
    viewer = api_server.get("/rbak/openapi.json", user="viewer")

    assert anonymous.status_code == 401
    assert viewer.status_code == 200 and "/api/locations" in viewer.json()["paths"]
    assert "/openapi.json" not in viewer.json()["paths"]


def test_airflow_lists_the_plugin_with_its_app_and_navigation_entry(api_server):
    plugins = {p["name"]: p for p in api_server.get("/api/v2/plugins").json()["plugins"]}
    rbak = plugins["rbak"]
    assert [(a["url_prefix"], a["name"]) for a in rbak["fastapi_apps"]] == [("/rbak", "RabbitMQ backups")]
    assert [(v["name"], v["href"], v["url_route"]) for v in rbak["external_views"]] == [
        ("RabbitMQ backups", "/rbak/", "rabbitmq-backups")]


def test_the_plugin_is_registered_once_with_the_checkout_on_pythonpath(api_server):
    # The stack puts the checkout on PYTHONPATH; importlib.metadata must still find one airflow-rbak there (setup.py)
    from tests.dags.airflow_env import REPO

    assert api_server.env["PYTHONPATH"].split(":")[0] == str(REPO)
    errors = api_server.get("/api/v2/plugins/importErrors").json()
    assert errors["import_errors"] == [], errors
