"""The backups view in headless Chromium, inside Airflow's UI: the list, a backup, Restore… and Verify, as a user meets
them: DAGs paused (Airflow's default for new DAGs), a link opened logged out, a refused trigger, a dry-run restore's
report, and a 1024 px wide window.

Skipped only when no browser can run here (tests/ui/browser.py says which package is missing).
``make screenshots`` (``RBAK_SCREENSHOTS=1``) writes the documented screenshots into docs/images/ (tests/ui/screenshots.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from tests.dags.airflow_env import VENV_BIN, run
from tests.ui.browser import chromium, missing_browser
from tests.ui.screenshots import keep

pytestmark = [pytest.mark.s3, pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]
DEADLINE_S = 90


def _signed_in(driver, api_server, user: str) -> None:
    driver.get(f"{api_server.base}/api/v2/monitor/health")
    driver.add_cookie({"name": "_token", "value": api_server.token(user), "path": "/"})


def _wait(driver, condition):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, DEADLINE_S, poll_frequency=0.5).until(condition)


def _in_view_frame(driver):
    """Airflow shows an external view in a frame: enter it once its list has rendered."""
    from selenium.webdriver.common.by import By

    frame = _wait(driver, lambda d: d.find_element(By.TAG_NAME, "iframe"))
    driver.switch_to.frame(frame)
    _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "table.backups"))


def _refused(driver) -> str:
    """The form's answer when Airflow refused the trigger ('' while there is none)."""
    from selenium.webdriver.common.by import By

    if "/plugin/" not in driver.current_url:
        return ""
    driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
    try:
        text = driver.find_element(By.ID, "trigger-result").text
    finally:
        driver.switch_to.default_content()
    return text if text.startswith("Not") else ""  # a refusal stays in the frame; success leaves it


def _keep(driver, tmp_path: Path, name: str) -> None:
    keep(driver, tmp_path, name)


def test_the_list_a_backup_and_restore_land_on_the_prefilled_trigger_form_that_triggers_rbak_restore(api_server, tmp_path):
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(f"{api_server.base}/plugin/rabbitmq-backups")
        _in_view_frame(driver)
        assert "This location cannot be read" in driver.page_source
        _keep(driver, tmp_path, "backups-list.png")

        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        driver.find_element(By.LINK_TEXT, "sample-2").click()
        _wait(driver, lambda d: d.find_element(By.ID, "restore"))
        driver.find_element(By.CSS_SELECTOR, "details summary").click()
        _keep(driver, tmp_path, "backup-page.png")

        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        driver.find_element(By.ID, "restore").click()
        form = _wait(driver, lambda d: d.find_element(By.ID, "trigger-form"))
        assert form.find_element(By.ID, "param-storage_url").get_attribute("value") == api_server.file_url
        assert form.find_element(By.ID, "param-backup_id").get_attribute("value") == "sample-2"
        _keep(driver, tmp_path, "restore-form.png")

        driver.switch_to.frame(driver.find_element(By.TAG_NAME, "iframe"))
        driver.find_element(By.ID, "trigger").click()
        driver.switch_to.default_content()
        _wait(driver, lambda d: "/dags/rbak_restore/runs/" in d.current_url or _refused(d))
        assert "/dags/rbak_restore/runs/" in driver.current_url, _refused(driver)
    runs = api_server.get("/api/v2/dags/rbak_restore/dagRuns").json()["dag_runs"]
    assert [(r["conf"]["storage_url"], r["conf"]["backup_id"]) for r in runs if not r["conf"].get("dry_run")] == [
        (api_server.file_url, "sample-2")]


def _location(api_server, url: str) -> str:
    return next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == url)


def test_verify_triggers_rbak_verify_once_however_often_it_is_clicked_and_says_the_dag_is_paused(api_server):
    from selenium.webdriver.common.by import By

    loc = _location(api_server, api_server.s3_url)
    page = f"{api_server.base}/rbak/backups/{loc}/s3-sample-1"
    with chromium() as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(page)
        # Given both DAGs paused (new DAGs are), which the page says beside the buttons
        assert "rbak_verify is paused" in _wait(driver, lambda d: d.find_element(By.ID, "paused-rbak_verify")).text
        assert driver.find_element(By.ID, "paused-rbak_restore").is_displayed()
        # When Verify is clicked twice, and again after the page is opened anew
        button = driver.find_element(By.ID, "verify")
        as_shown = button.get_attribute("data-body")
        driver.execute_script("arguments[0].click(); arguments[0].click();", button)
        _wait(driver, lambda d: "Triggered rbak_verify" in d.find_element(By.ID, "verify-result").text)
        assert not button.is_enabled()
        driver.get(page)
        held = _wait(driver, lambda d: d.find_element(By.ID, "verify"))
        assert not held.is_enabled() and "rbak_verify is queued for this backup" in driver.find_element(
            By.ID, "verify-result").text
        # and a second tab that still shows the page from before the run fires its request anyway
        second = requests.post(f"{api_server.base}/api/v2/dags/rbak_verify/dagRuns", data=as_shown,
                               headers={"Authorization": f"Bearer {api_server.token('admin')}",
                                        "Content-Type": "application/json"}, timeout=60)
    # Then Airflow holds one run for the backup: the pending one, which is not its last verify (it has not run)
    assert second.status_code == 409
    detail = api_server.get(f"/rbak/api/locations/{loc}/backups/s3-sample-1").json()
    (run,) = detail["runs"]["verified"]
    assert (run["dag_id"], run["backup_id"], run["state"]) == ("rbak_verify", "s3-sample-1", "queued")
    assert detail["verify"]["pending"]["run_id"] == run["run_id"] and detail["backup"]["last_verify"] is None
    assert detail["paused"] == {"rbak_restore": True, "rbak_verify": True}


def test_a_link_opened_logged_out_lands_on_airflows_login_page(api_server):
    from selenium.webdriver.common.by import By

    link = f"{api_server.base}/rbak/backups/{_location(api_server, api_server.file_url)}/sample-1"
    with chromium() as driver:
        driver.get(link)
        _wait(driver, lambda d: "/auth/login" in d.current_url)
        assert parse_qs(urlsplit(driver.current_url).query)["next"] == [link]
        assert "Not authenticated" not in driver.find_element(By.TAG_NAME, "body").text


def test_a_refused_trigger_says_in_plain_words_beside_its_field_what_airflow_refused(api_server, tmp_path):
    from selenium.webdriver.common.by import By

    loc = _location(api_server, api_server.file_url)
    with chromium() as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(f"{api_server.base}/rbak/restore/{loc}/sample-1")
        assert "rbak_restore is paused" in _wait(driver, lambda d: d.find_element(By.ID, "paused-rbak_restore")).text
        field = driver.find_element(By.ID, "param-backup_id")
        field.clear()
        field.send_keys("not a backup id!")
        driver.find_element(By.ID, "trigger").click()
        answer = _wait(driver, lambda d: d.find_element(By.ID, "trigger-result").text.startswith("Not triggered")
                       and d.find_element(By.ID, "trigger-result").text)
        beside = driver.find_element(By.ID, "error-backup_id").text
        _keep(driver, tmp_path, "refused-trigger.png")
    assert answer.startswith("Not triggered: backup_id does not have the form this field takes (it must match")
    assert beside.endswith("(you gave 'not a backup id!').")
    assert "Failed validating" not in answer and "schema" not in answer and '{"' not in answer


def test_a_viewer_refused_the_restore_form_sees_the_views_frame_and_a_way_back(api_server):
    from selenium.webdriver.common.by import By

    loc = _location(api_server, api_server.file_url)
    with chromium() as driver:
        _signed_in(driver, api_server, "viewer")
        driver.get(f"{api_server.base}/rbak/restore/{loc}/sample-1")
        back = _wait(driver, lambda d: d.find_element(By.ID, "back"))
        assert "You may not trigger rbak_restore" in driver.page_source
        assert driver.find_element(By.CSS_SELECTOR, "nav.top a.home").text == "RabbitMQ backups"
        back.click()
        _wait(driver, lambda d: d.find_element(By.TAG_NAME, "h1").text == "Backup sample-1")


@pytest.mark.broker
def test_a_dry_run_restore_is_listed_on_the_backups_page_saying_nothing_was_published(api_server, broker, vhost):
    from selenium.webdriver.common.by import By

    # Given a dry-run restore of sample-1 into an empty vhost, run by Airflow into the api-server's database
    conf = {"storage_url": api_server.file_url, "backup_id": "sample-1", "dry_run": True,
            "vhost_map": {"/": vhost, "prod": vhost}}
    done = run([str(VENV_BIN / "airflow"), "dags", "test", "rbak_restore", "-c", json.dumps(conf)], api_server.env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    # When the backup's page is opened
    loc = _location(api_server, api_server.file_url)
    with chromium() as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(f"{api_server.base}/rbak/backups/{loc}/sample-1")
        _wait(driver, lambda d: d.find_element(By.TAG_NAME, "h1"))
        page = driver.find_element(By.TAG_NAME, "body").text

    # Then the restore is listed with its report, which says nothing was published
    assert "Restored by" in page and "rbak_restore" in page
    assert "dry run: 282 planned, 282 would be published, nothing was published" in page
    assert "published this run" not in page


def _scrolls_sideways(driver) -> bool:
    return driver.execute_script("const e=document.documentElement; return e.scrollWidth > e.clientWidth;")


def test_at_1024_px_neither_the_list_nor_a_backup_scrolls_sideways(api_server, tmp_path):
    from selenium.webdriver.common.by import By

    with chromium(width=1024, height=768) as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(f"{api_server.base}/plugin/rabbitmq-backups")
        _in_view_frame(driver)
        list_inside_airflow = _scrolls_sideways(driver)
        _keep(driver, tmp_path, "backups-list-1024.png")
        driver.get(f"{api_server.base}/rbak/")
        _wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "table.backups"))
        list_alone = _scrolls_sideways(driver)
        driver.get(f"{api_server.base}/rbak/backups/{_location(api_server, api_server.file_url)}/sample-2")
        for summary in _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "details summary")):
            summary.click()
        backup = _scrolls_sideways(driver)
    assert (list_inside_airflow, list_alone, backup) == (False, False, False)


def test_a_user_who_may_not_trigger_sees_no_buttons(api_server):
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        _signed_in(driver, api_server, "viewer")
        loc = next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.file_url)
        driver.get(f"{api_server.base}/rbak/backups/{loc}/sample-1")
        _wait(driver, lambda d: d.find_element(By.TAG_NAME, "h1"))
        assert "Backup sample-1" in driver.page_source
        assert not driver.find_elements(By.ID, "restore") and not driver.find_elements(By.ID, "verify")
