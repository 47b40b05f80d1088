"""The backups view in headless Chromium at 1024 and 1400 px: a queue's messages (pages, filters, each kind of body,
a viewer without bodies) and the view as a user met it before issue 43, each item now as it should be.

One browser serves the whole module (a window resized per test, the login cookie swapped per user), so the many
cases cost one browser start. Skipped only when no browser can run here (tests/ui/browser.py says which package).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ui.browser import chromium, missing_browser, viewport
from tests.ui.message_samples import BINARY, LONG_AT, SCRIPT, TOTAL
from tests.ui.screenshots import SIZE, keep

pytestmark = [pytest.mark.s3, pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]
WIDTHS = (1024, 1400)
DEADLINE_S = 60


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as driver:
        yield driver


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def width(request, browser) -> int:
    browser.set_window_size(request.param, 900)
    viewport(browser, request.param, SIZE[1])
    return request.param


def _as(driver, api_server, user: str) -> None:
    if not driver.current_url.startswith(api_server.base):
        driver.get(f"{api_server.base}/api/v2/monitor/health")
    driver.delete_all_cookies()
    driver.add_cookie({"name": "_token", "value": api_server.token(user), "path": "/"})


def _open(driver, api_server, path: str, user: str = "admin"):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    _as(driver, api_server, user)
    driver.get(f"{api_server.base}/rbak{path}")
    WebDriverWait(driver, DEADLINE_S, poll_frequency=0.2).until(lambda d: d.find_element(By.TAG_NAME, "h1"))
    return driver


def _loc(api_server, url: str) -> str:
    return next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == url)


def _text(driver) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.TAG_NAME, "body").text


def _sideways(driver) -> bool:
    return driver.execute_script("const e=document.documentElement; return e.scrollWidth > e.clientWidth;")


def _follow(driver, element_id: str) -> None:
    """Click a link or button that loads another page, and wait until that page has replaced this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, element_id).click()
    WebDriverWait(driver, DEADLINE_S, poll_frequency=0.1).until(expected_conditions.staleness_of(old))
    WebDriverWait(driver, DEADLINE_S, poll_frequency=0.1).until(lambda d: d.find_element(By.TAG_NAME, "h1"))


def _numbers(driver) -> list[int]:
    from selenium.webdriver.common.by import By

    return [int(h.text.split()[0].lstrip("#").replace(",", "")) for h in driver.find_elements(By.CSS_SELECTOR, ".msg h3")]


def _messages(api_server, query: str = "") -> str:
    return f"/backups/{_loc(api_server, api_server.messages_url)}/messages-1/messages?queue=0{query}"


# -- a queue's messages -------------------------------------------------------------------------------------------


def test_a_queues_messages_come_page_by_page_in_stored_order(api_server, browser, width, tmp_path):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, _messages(api_server))
    if width == SIZE[0]:
        keep(driver, tmp_path, "messages-page.png")
    first = _numbers(driver)
    _follow(driver, "next")
    second = _numbers(driver)
    _follow(driver, "next")

    assert first == list(range(1, 21)) and second == list(range(21, 41))
    assert _numbers(driver) == list(range(41, TOTAL + 1)) and driver.find_element(By.ID, "end").is_displayed()
    assert not _sideways(driver)


def test_the_filter_form_narrows_the_messages_and_keeps_its_fields_across_pages(api_server, browser, width):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, _messages(api_server, "&limit=5"))
    driver.find_element(By.ID, "filter-routing_key").send_keys("orders.u*")
    driver.find_element(By.ID, "filter-header").send_keys("x-tenant=us")
    _follow(driver, "apply")
    shown = _numbers(driver)
    _follow(driver, "next")

    assert shown == [3, 6, 9, 12, 15] and _numbers(driver) == [18, 21, 24, 27, 30]
    assert driver.find_element(By.ID, "filter-routing_key").get_attribute("value") == "orders.u*"
    assert "routing key like 'orders.u*'" in driver.find_element(By.ID, "page-said").text


def test_json_is_pretty_printed_binary_is_hex_and_html_with_script_shows_literally(api_server, browser, width):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, _messages(api_server, "&limit=100"))
    json_body = driver.find_element(By.CSS_SELECTOR, "#m-1\\.0 pre.body.json").text
    binary = driver.find_element(By.CSS_SELECTOR, "pre.body.binary").text
    bodies = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "pre.body.text")]
    more = driver.find_elements(By.CSS_SELECTOR, ".msg .more")

    assert json_body.startswith('{\n  "order": 1,\n  "region": "eu",')
    assert binary.startswith("00000000  00 01 02 03 04 05 06 07 08 09 0a 0b 0c 0d 0e 0f  ................")
    assert SCRIPT.decode() in bodies
    assert driver.execute_script("return window.rbakInjected === undefined")
    assert not driver.find_elements(By.CSS_SELECTOR, ".msg img, .msg b, .msg script")
    assert [m.text for m in more] == [f"… {len(BINARY) - 512} more bytes not shown", f"… {5200 - 2048:,} more bytes not shown"]
    assert len(_numbers(driver)) == TOTAL and LONG_AT == TOTAL


def test_a_viewer_sees_properties_and_headers_but_no_body_and_is_told_why(api_server, browser, width):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, _messages(api_server, "&limit=100"), user="viewer")
    said = driver.find_element(By.ID, "bodies-refused").text
    page = _text(driver)
    loc = _loc(api_server, api_server.messages_url)
    api = api_server.get(f"/rbak/api/locations/{loc}/backups/messages-1/messages", user="viewer",
                         params={"body_regex": "order"})

    assert "only to users who may trigger rbak_restore" in said
    assert not driver.find_elements(By.CSS_SELECTOR, "pre.body") and "sku-1" not in page and "window.rbak" not in page
    assert "order-1" in page and "header x-tenant" in page and len(_numbers(driver)) == TOTAL
    assert not driver.find_element(By.ID, "filter-body_contains").is_enabled()
    assert api.status_code == 403 and "body_regex" in api.json()["detail"]


# -- the view as a user met it, item by item ----------------------------------------------------------------------


def test_restore_and_verify_are_offered_only_on_backups_that_can_be_restored(api_server, browser, width):
    from selenium.webdriver.common.by import By

    refused = {}
    for url, backup_id in ((api_server.messages_url, "damaged-1"), (api_server.file_url, "sample-3-running"),
                           (api_server.hostile_url, "planted-2100")):
        driver = _open(browser, api_server, f"/backups/{_loc(api_server, url)}/{backup_id}")
        assert not driver.find_elements(By.ID, "restore") and not driver.find_elements(By.ID, "verify"), backup_id
        refused[backup_id] = driver.find_element(By.ID, "not-offered").text
    driver = _open(browser, api_server, f"/backups/{_loc(api_server, api_server.messages_url)}/messages-1")

    assert driver.find_element(By.ID, "restore").is_displayed() and driver.find_element(By.ID, "verify").is_displayed()
    assert "this backup is damaged" in refused["damaged-1"] and "is not stored" in refused["damaged-1"]
    assert "this backup is incomplete (not finished" in refused["sample-3-running"]
    assert "this backup is future" in refused["planted-2100"] and "years ahead" in refused["planted-2100"]


def test_the_restore_form_of_a_backup_that_does_not_exist_is_a_404_page(api_server, browser, width):
    from selenium.webdriver.common.by import By

    loc = _loc(api_server, api_server.messages_url)
    driver = _open(browser, api_server, f"/restore/{loc}/no-such-backup")
    status = api_server.get(f"/rbak/restore/{loc}/no-such-backup", headers={"Accept": "text/html"}).status_code

    assert status == 404 and "There is no backup 'no-such-backup'" in _text(driver)
    assert not driver.find_elements(By.ID, "trigger-form")


def test_a_damaged_backups_page_says_what_is_hidden_and_why_and_shows_what_its_manifest_lists(api_server, browser, width):
    from selenium.webdriver.common.by import By

    readable = _text(_open(browser, api_server, f"/backups/{_loc(api_server, api_server.messages_url)}/damaged-1"))
    assert "This backup is damaged (1 listed object(s) missing" in readable
    assert "inbox in vhost /" in readable and "rabbit@ui (RabbitMQ 4.3.6)" in readable
    assert "No queues." not in readable and "No definitions" not in readable
    driver = _open(browser, api_server, f"/backups/{_loc(api_server, api_server.hostile_url)}/garbage")
    unreadable = _text(driver)

    assert unreadable.count("Not shown: its manifest cannot be read") == 2 and "Totals not shown:" in unreadable
    assert "No queues." not in unreadable and "RabbitMQ ?" not in unreadable and "0 messages" not in unreadable
    assert driver.find_element(By.ID, "not-offered").is_displayed()


def _in_view(driver, element) -> bool:
    return driver.execute_script("const r=arguments[0].getBoundingClientRect();"
                                 "return r.top>=0 && r.bottom<=window.innerHeight;", element)


def test_restore_form_errors_stand_beside_their_field_in_view_in_plain_words(api_server, browser, width):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = _open(browser, api_server, f"/restore/{_loc(api_server, api_server.messages_url)}/messages-1")
    vhost_map = driver.find_element(By.ID, "param-vhost_map")
    vhost_map.clear()
    vhost_map.send_keys("{oops")
    driver.find_element(By.ID, "trigger").click()
    json_error = driver.find_element(By.ID, "error-vhost_map")
    assert json_error.text.startswith("Not valid JSON") and _in_view(driver, json_error)
    assert "vhost_map: not valid JSON" in driver.find_element(By.ID, "trigger-result").text
    assert json_error.value_of_css_property("color") == "rgba(197, 48, 48, 1)"

    vhost_map.clear()
    vhost_map.send_keys("{}")
    tasks = driver.find_element(By.ID, "param-max_publish_tasks")
    tasks.clear()
    tasks.send_keys("0")
    driver.find_element(By.ID, "trigger").click()
    refused = WebDriverWait(driver, DEADLINE_S).until(
        lambda d: d.find_element(By.ID, "error-max_publish_tasks").text or None)

    assert refused == "must be 1 or more (you gave 0)."
    assert _in_view(driver, driver.find_element(By.ID, "error-max_publish_tasks"))
    assert not driver.find_element(By.ID, "error-vhost_map").text
    assert "Failed validating" not in _text(driver) and "schema" not in _text(driver)


def test_a_bad_query_parameter_answers_a_page_that_says_which_and_why(api_server, browser, width):
    page = _text(_open(browser, api_server, "/?offset=-1"))

    assert "offset: must be 0 or more (got '-1')" in page and '{"detail"' not in page


def _one_line(driver, selector: str) -> bool:
    return driver.execute_script(
        "const es=[...document.querySelectorAll(arguments[0])];"
        "return es.length>0 && es.every(e=>new Set([...e.getClientRects()].map(r=>Math.round(r.top))).size===1);",
        selector)  # a date is a day and a time (two spans): on one line when every box shares a top


def test_the_list_keeps_dates_on_one_line_and_the_same_columns_in_every_locations_table(api_server, browser, width):
    driver = _open(browser, api_server, "/")
    widths = driver.execute_script(
        "return [...document.querySelectorAll('table.backups')].map(t=>"
        "[...t.querySelectorAll('th')].map(th=>Math.round(th.getBoundingClientRect().width)))")
    page = _text(driver)

    assert _one_line(driver, "table.backups td:is(:nth-child(3),:nth-child(4)) .date:has(> span)") and len(widths) >= 3
    assert all(w == widths[0] for w in widths), widths
    assert "not finished: no completed_at (still running" in page and "years ahead of this clock" in page
    assert "minutes ahead" not in page
    assert not _sideways(driver)


def test_definitions_headers_sit_over_their_numbers(api_server, browser, width):
    driver = _open(browser, api_server, f"/backups/{_loc(api_server, api_server.messages_url)}/messages-1")
    edges = driver.execute_script(
        "const t=document.querySelector('table.definitions');"
        "const right=e=>Math.round(e.getBoundingClientRect().right);"
        "return [[...t.querySelectorAll('th')].map(right), [...t.querySelectorAll('td')].map(right)]")

    assert edges[0] == edges[1] and len(edges[0]) == 5
    assert _one_line(driver, ".facts .date")


def test_the_page_says_how_users_and_roles_are_set_up_and_that_the_form_needs_the_dag_serialised(
        api_server, browser, width):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, "/", user="viewer")
    driver.find_element(By.CSS_SELECTOR, "#access summary").click()
    said = driver.find_element(By.ID, "access").text

    assert "read access to the runs of rbak_backup" in said and "right to trigger rbak_restore" in said
    assert "simple_auth_manager_users" in said and "serialised" in said
