"""A backup's messages through the view's API on a running api-server: pages, filters, bodies only for who may see
them, and the clear answers to requests that cannot be served (tests/ui/message_samples.py holds the messages)."""

from __future__ import annotations

import pytest

from tests.ui.conftest import ApiServer
from tests.ui.message_samples import BINARY_AT, LONG_AT, ORDERS, SCRIPT, SCRIPT_AT, TOTAL

pytestmark = pytest.mark.s3


def _messages(api_server: ApiServer, user: str = "admin", backup: str = "messages-1", **query):
    loc = next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.messages_url)
    return api_server.get(f"/rbak/api/locations/{loc}/backups/{backup}/messages", user=user, params=query)


def test_pages_follow_one_another_through_the_whole_queue_in_stored_order(api_server):
    numbers, at, pages = [], None, 0
    while True:
        page = _messages(api_server, limit=20, **({"at": at} if at else {})).json()
        numbers += [m["number"] for m in page["messages"]]
        pages, at = pages + 1, page["next"]
        if at is None:
            break
    assert numbers == list(range(1, TOTAL + 1)) and pages == 3


def test_each_filter_field_narrows_the_page_and_is_said(api_server):
    def ids(**query) -> list[str]:
        page = _messages(api_server, limit=100, **query).json()
        return [m["properties"]["message_id"] for m in page["messages"]]

    assert ids(message_id="order-7") == ["order-7"]
    assert ids(routing_key="orders.us") == [f"order-{i}" for i in range(3, ORDERS + 1, 3)]
    assert ids(header="x-tenant=us", correlation_id="c-3") == ["order-3", "order-15", "order-27", "order-39"]
    assert ids(content_type="text/html") == [f"other-{SCRIPT_AT}"]
    assert ids(body_contains='"order":12,') == ["order-12"]
    assert ids(body_regex="sku-4[01]") == ["order-40", "order-41"]
    assert ids(since="2025-11-26T23:34:00Z", until="2025-11-26T23:34:02Z") == ["order-40", "order-41", "order-42"]
    assert ids(header=["x-tenant=us", "x-n=3"]) == ["order-3"]
    assert "routing key like 'orders.*'" in _messages(api_server, routing_key="orders.*").json()["filter"]


def test_a_filter_that_cannot_be_used_is_refused_naming_its_field(api_server):
    bad_time = _messages(api_server, since="yesterday")
    bad_regex = _messages(api_server, body_regex="(unclosed")
    unknown = _messages(api_server, after="2025-11-26")

    assert bad_time.status_code == 400 and bad_time.json()["detail"].startswith("since:")
    assert bad_regex.status_code == 400 and bad_regex.json()["detail"].startswith("body_regex:")
    assert unknown.status_code == 400 and unknown.json()["detail"].startswith("after: not a filter")


def test_bodies_are_previewed_by_kind_and_bounded(api_server):
    page = _messages(api_server, at="1.0", limit=100).json()
    by_number = {m["number"]: m for m in page["messages"]}

    assert by_number[1]["body"]["kind"] == "json" and '\n  "order": 1,' in by_number[1]["body"]["preview"]
    binary = by_number[BINARY_AT]["body"]
    assert binary["kind"] == "binary" and binary["preview"].startswith("00000000  00 01 02 03")
    assert binary["more_bytes"] == by_number[BINARY_AT]["body_bytes"] - 512
    assert by_number[SCRIPT_AT]["body"] == {"kind": "text", "preview": SCRIPT.decode(), "more_bytes": 0}
    long = by_number[LONG_AT]["body"]
    assert long["kind"] == "text" and len(long["preview"]) == 2048 and long["more_bytes"] == 5200 - 2048


def test_a_viewer_gets_properties_and_headers_but_no_body_and_may_not_filter_on_bodies(api_server):
    page = _messages(api_server, user="viewer", limit=5).json()
    refused = _messages(api_server, user="viewer", body_contains="order")

    assert [m["body"] for m in page["messages"]] == [None] * 5
    assert page["messages"][0]["properties"]["message_id"] == "order-1" and page["messages"][0]["headers"]
    assert "rbak_restore" in page["bodies_refused"] and page["bodies"] is False
    assert refused.status_code == 403 and "body_contains" in refused.json()["detail"]
    assert '"order"' not in str(page) and "sku-" not in str(page)


def test_a_bad_query_parameter_answers_one_sentence_as_json_and_as_a_page(api_server):
    as_json = _messages(api_server, limit=0)
    listing = api_server.get("/rbak/api/locations/x/backups", params={"offset": -1})
    page = api_server.get("/rbak/", params={"offset": "-1"}, headers={"Accept": "text/html"})

    assert as_json.status_code == 400 and as_json.json() == {"detail": "limit: must be 1 or more (got '0')"}
    assert listing.json() == {"detail": "offset: must be 0 or more (got '-1')"}
    assert page.status_code == 400 and "offset: must be 0 or more" in page.text and '{"detail"' not in page.text


def test_an_unknown_queue_or_position_is_refused_saying_what_exists(api_server):
    queue = _messages(api_server, queue=3)
    position = _messages(api_server, at="first")

    assert queue.status_code == 400 and "numbered 0 to 0" in queue.json()["detail"]
    assert position.status_code == 400 and "is not a position" in position.json()["detail"]


def test_restore_form_of_a_backup_that_does_not_exist_is_404_and_of_a_damaged_one_409(api_server):
    loc = next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.messages_url)
    missing = api_server.get(f"/rbak/restore/{loc}/no-such-backup", headers={"Accept": "text/html"})
    damaged = api_server.get(f"/rbak/restore/{loc}/damaged-1", headers={"Accept": "text/html"})

    assert missing.status_code == 404 and "There is no backup &#x27;no-such-backup&#x27;" in missing.text
    assert 'id="trigger-form"' not in missing.text + damaged.text
    assert damaged.status_code == 409 and "is damaged" in damaged.text
