"""The backups view as an operator meets it (issue 52), walked in headless Chromium at 1024 and 1400 px.

A backup with a flipped byte lists complete until a reader finds it: then its page names the damage and offers
Verify but no Restore…; a verify that failed does the same. A double click on Trigger makes one run, and a second
POST of the same form is refused by Airflow. A filter the page cannot use keeps the form, the error beside its
field. Inside Airflow's frame at 1024 px no table's content runs over its cell.

Reuses the session's api-server (tests/ui/conftest.py: no scheduler, so a triggered run stays queued, which is all
these tests count) and one browser for the module. Every wait polls a state against a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from tests.airflow_stack import poll
from tests.ui.browser import chromium, missing_browser, viewport
from tests.ui.message_samples import FLIPPED, VERIFY_FAILED
from tests.ui.screenshots import SIZE

pytestmark = [pytest.mark.s3, pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]
WIDTHS = (1024, 1400)
DEADLINE_S = 60

#: Every table cell whose content runs past its right edge (a column drawn over its neighbour), with by how much.
_OVERRUNS = """
const out=[];
for(const c of document.querySelectorAll('td,th')){
  const edge=c.getBoundingClientRect().right;
  for(const e of c.querySelectorAll('*')){
    const over=Math.round(e.getBoundingClientRect().right-edge);
    if(over>1&&e.getClientRects().length){out.push([c.textContent.slice(0,40),e.tagName,over]);break;}
  }
  if(c.scrollWidth>c.clientWidth+1)out.push([c.textContent.slice(0,40),'text',c.scrollWidth-c.clientWidth]);
}
return out;
"""


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with chromium() as driver:
        yield driver


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def width(request, browser) -> int:
    browser.set_window_size(request.param, 900)
    viewport(browser, request.param, SIZE[1])
    return request.param


def _open(driver, api_server, path: str, user: str = "admin"):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    if not driver.current_url.startswith(api_server.base):
        driver.get(f"{api_server.base}/api/v2/monitor/health")
    driver.delete_all_cookies()
    driver.add_cookie({"name": "_token", "value": api_server.token(user), "path": "/"})
    driver.get(f"{api_server.base}/rbak{path}")
    WebDriverWait(driver, DEADLINE_S, poll_frequency=0.2).until(lambda d: d.find_element(By.TAG_NAME, "h1"))
    return driver


def _loc(api_server) -> str:
    return next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.messages_url)


def _api(api_server, method: str, path: str, **kwargs) -> requests.Response:
    return requests.request(method, f"{api_server.base}/api/v2/{path}", timeout=60,
                            headers={"Authorization": f"Bearer {api_server.token('admin')}"}, **kwargs)


def _runs(api_server, dag_id: str) -> list[str]:
    found = _api(api_server, "GET", f"dags/{dag_id}/dagRuns", params={"limit": 1000}).json()
    return [r["dag_run_id"] for r in found["dag_runs"]]


# -- damage any reader found --------------------------------------------------------------------------------------


def test_a_flipped_byte_found_by_the_message_browser_withdraws_restore_and_names_the_damage(api_server, browser, width):
    from selenium.webdriver.common.by import By

    loc = _loc(api_server)
    listed = api_server.get(f"/rbak/api/locations/{loc}/backups/{FLIPPED}").json()["backup"]["status"]
    messages = _open(browser, api_server, f"/backups/{loc}/{FLIPPED}/messages?queue=0&limit=100")
    found = messages.find_element(By.CSS_SELECTOR, ".damaged-segment").text
    driver = _open(browser, api_server, f"/backups/{loc}/{FLIPPED}")
    facts = driver.find_element(By.CSS_SELECTOR, "table.facts").text
    form = requests.get(f"{api_server.base}/rbak/restore/{loc}/{FLIPPED}", timeout=60,
                        headers={"Authorization": f"Bearer {api_server.token('admin')}", "Accept": "text/html"})

    assert listed in ("complete", "damaged") and "could not be read" in found
    assert not driver.find_elements(By.ID, "restore") and driver.find_element(By.ID, "verify").is_displayed()
    assert "Restore… is not offered" in driver.find_element(By.ID, "no-restore").text
    assert "Status damaged" in facts and "the message browser found segment" in facts and "SHA-256" in facts
    assert form.status_code == 409 and "is damaged" in form.text


def test_a_failed_verify_marks_the_backup_damaged_and_restore_is_withdrawn(api_server, browser, width):
    from selenium.webdriver.common.by import By

    loc = _loc(api_server)
    run_id = f"verify-failed-{width}"
    if run_id not in _runs(api_server, "rbak_verify"):
        _api(api_server, "POST", "dags/rbak_verify/dagRuns", json={
            "dag_run_id": run_id, "logical_date": None,
            "conf": {"storage_url": api_server.messages_url, "backup_id": VERIFY_FAILED}}).raise_for_status()
        _api(api_server, "PATCH", f"dags/rbak_verify/dagRuns/{run_id}/taskInstances/verify",
             json={"new_state": "failed"}).raise_for_status()
    driver = _open(browser, api_server, f"/backups/{loc}/{VERIFY_FAILED}")
    facts = driver.find_element(By.CSS_SELECTOR, "table.facts").text

    assert not driver.find_elements(By.ID, "restore") and driver.find_element(By.ID, "verify").is_displayed()
    assert "Status damaged" in facts and f"the verify of run {run_id} failed" in facts


# -- one click, one run -------------------------------------------------------------------------------------------


def test_a_double_click_on_trigger_makes_one_run_and_a_second_post_of_the_form_is_refused(api_server, browser, width):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, f"/restore/{_loc(api_server)}/messages-1")
    run_id = driver.find_element(By.ID, "trigger-form").get_attribute("data-run-id")
    before = set(_runs(api_server, "rbak_restore"))
    ActionChains(driver).double_click(driver.find_element(By.ID, "trigger")).perform()
    poll("the triggered run", lambda: True if run_id in _runs(api_server, "rbak_restore") else None,
         DEADLINE_S, every_s=0.5)
    again = _api(api_server, "POST", "dags/rbak_restore/dagRuns",
                 json={"dag_run_id": run_id, "logical_date": None, "conf": {"backup_id": "messages-1"}})

    assert again.status_code == 409
    assert set(_runs(api_server, "rbak_restore")) - before == {run_id}


# -- a bad filter keeps the form ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "said"), [
    ("since", "yesterday", "ISO 8601"), ("body_regex", "order-(", "not a valid regular expression"),
    ("header", "x-tenant", "is not name=value")])
def test_a_bad_filter_keeps_the_form_with_the_error_beside_its_field(api_server, browser, width, field, value, said):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, f"/backups/{_loc(api_server)}/messages-1/messages?queue=0&limit=5")
    driver.find_element(By.ID, "filter-routing_key").send_keys("orders.*")
    driver.find_element(By.ID, f"filter-{field}").send_keys(value)
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, "apply").click()
    poll("the filtered page", lambda: True if not _attached(old) else None, DEADLINE_S, every_s=0.2)
    error = driver.find_element(By.ID, f"filter-error-{field}")
    box = driver.find_element(By.ID, f"filter-{field}")

    assert said in error.text and error.is_displayed()
    assert box.get_attribute("value") == value and box.get_attribute("aria-invalid") == "true"
    assert driver.find_element(By.ID, "filter-routing_key").get_attribute("value") == "orders.*"
    assert driver.find_elements(By.ID, "filters") and not driver.find_elements(By.CSS_SELECTOR, ".msg")


def _attached(element) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException

    try:
        element.is_enabled()
        return True
    except StaleElementReferenceException:
        return False


# -- tables that fit inside Airflow's frame -------------------------------------------------------------------------


def test_no_column_runs_over_its_neighbour_inside_airflows_frame(api_server, browser, width):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    loc = _loc(api_server)
    driver = _open(browser, api_server, "/")
    driver.get(f"{api_server.base}/plugin/rabbitmq-backups")
    frame = WebDriverWait(driver, DEADLINE_S, poll_frequency=0.2).until(lambda d: d.find_element(By.TAG_NAME, "iframe"))
    driver.switch_to.frame(frame)
    overruns = {}
    try:
        for path in ("/", f"/backups/{loc}/messages-1", f"/backups/{loc}/messages-1/messages?queue=0&limit=50",
                     f"/restore/{loc}/messages-1"):
            driver.execute_script("window.location.href=arguments[0]", f"{api_server.base}/rbak{path}")
            WebDriverWait(driver, DEADLINE_S, poll_frequency=0.2).until(
                lambda d, p=path: d.execute_script("return document.readyState") == "complete"
                and d.current_url.endswith(p) and d.find_elements(By.TAG_NAME, "h1"))
            overruns[path] = driver.execute_script(_OVERRUNS)
        inner = driver.execute_script("return document.documentElement.clientWidth")
    finally:
        driver.switch_to.default_content()

    assert inner < width and all(not found for found in overruns.values()), (inner, overruns)


# -- what a message shows -----------------------------------------------------------------------------------------


def test_headers_read_as_the_filter_takes_them_and_redelivered_says_why(api_server, browser, width):
    from selenium.webdriver.common.by import By

    driver = _open(browser, api_server, f"/backups/{_loc(api_server)}/messages-1/messages?queue=0&limit=5")
    headers = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#m-1\\.0 code.header")]
    why = driver.find_element(By.CSS_SELECTOR, "#m-1\\.0 abbr.redelivered").get_attribute("title")
    since = driver.find_element(By.ID, "filter-since").get_attribute("placeholder")

    assert headers == ["x-tenant=eu", "x-n=1"] and "LongString" not in driver.page_source
    assert "hand" in why and "backup" in why
    assert since == "YYYY-MM-DDThh:mm:ssZ"
    _follow(driver, "next")
    _follow(driver, "previous")
    assert driver.find_element(By.CSS_SELECTOR, ".msg h3").text.startswith("#1 ")


def _follow(driver, element_id: str) -> None:
    """Click a link that loads another page, and wait until that page has replaced this one."""
    from selenium.webdriver.common.by import By

    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.ID, element_id).click()
    poll(f"the page {element_id} leads to", lambda: True if not _attached(old) and driver.find_elements(By.TAG_NAME, "h1")
         else None, DEADLINE_S, every_s=0.2)
