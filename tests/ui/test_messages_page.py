"""A queue's messages page as an operator reads it: headers as the filter takes them, why "redelivered", the
previous page, and a filter error beside its field with the form kept (ui/messages_page.py, no Airflow)."""

from __future__ import annotations

import pytest

from airflow_rbak.codec import HeaderValue
from airflow_rbak.storage import open_storage
from airflow_rbak.ui.message_browser import header_shown, message_page
from airflow_rbak.ui.messages_page import form_field, messages_page
from airflow_rbak.ui.pages import Links
from tests.ui.message_samples import build_message_backups

EXTRA = {"backup_id": "messages-1", "location": {"id": "loc", "url": "memory://x"}, "bodies_refused": None}


@pytest.fixture(scope="module")
def page():
    url = "memory://ui-messages-page"
    build_message_backups(url)
    storage = open_storage(url)
    from airflow_rbak.repository.manifest_store import ManifestStore

    return message_page(storage, ManifestStore(storage).load("messages-1"), 0, limit=5, show_bodies=True)


def test_headers_read_as_the_filter_takes_them_with_the_type_only_where_it_matters():
    assert header_shown("x-tenant", HeaderValue.short_string("eu")) == {"shown": "x-tenant=eu", "type": None}
    assert header_shown("x-n", HeaderValue.long(5)) == {"shown": "x-n=5", "type": None}
    table = header_shown("x-t", HeaderValue("Table", (("a", HeaderValue.long(1)),)))
    assert table["shown"].startswith("x-t: ") and "no header filter matches it" in table["type"]


def test_a_page_shows_headers_as_name_value_and_says_why_a_message_is_redelivered(page):
    html = messages_page({**page, **EXTRA, "filters": [], "back": []}, Links("", "/rbak"))

    assert '<code class="header">x-tenant=eu</code>' in html and "ShortString" not in html
    assert "handing them back" in html and 'placeholder="YYYY-MM-DDThh:mm:ssZ"' in html
    assert 'id="previous"' not in html


def test_a_later_page_links_to_the_one_before_it(page):
    html = messages_page({**page, **EXTRA, "filters": [], "back": ["1.0", "1.5"], "start": "1.10"}, Links("", "/rbak"))

    assert 'id="previous" href="/rbak/backups/loc/messages-1/messages?queue=0&amp;limit=5&amp;at=1.5&amp;back=1.0"' in html
    assert "back=1.0%2C1.5%2C1.10" in html  # the next page can come back here


def test_a_filter_error_stands_beside_its_field_and_the_form_keeps_every_value(page):
    refused = {**page, **EXTRA, "messages": [], "filters": [("since", "yesterday"), ("routing_key", "orders.*")],
               "error": {"field": form_field("since"), "text": "'yesterday' is not a time"}}
    html = messages_page(refused, Links("", "/rbak"))

    assert 'id="filter-error-since" role="alert">&#x27;yesterday&#x27; is not a time' in html
    assert 'value="yesterday" placeholder="YYYY-MM-DDThh:mm:ssZ" aria-invalid=true' in html
    assert 'value="orders.*"' in html and 'id="next"' not in html and "cannot be used as given" in html
    assert form_field("headers.x-tenant") == "header" and form_field("at") is None
