"""The backups view in headless Chromium, inside Airflow's UI: the list, a backup, Restore… and Verify.

Skipped only when no browser can run here (tests/ui/browser.py says which package is missing).
Set ``RBAK_SCREENSHOTS_DIR`` to keep the screenshots (docs/images/ holds the committed ones).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.ui.browser import chromium, missing_browser

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
    driver.switch_to.default_content()
    shot = tmp_path / name
    driver.save_screenshot(str(shot))
    if os.environ.get("RBAK_SCREENSHOTS_DIR"):
        shutil.copy(shot, Path(os.environ["RBAK_SCREENSHOTS_DIR"]) / name)


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
    assert [(r["conf"]["storage_url"], r["conf"]["backup_id"]) for r in runs] == [(api_server.file_url, "sample-2")]


def test_verify_triggers_rbak_verify_and_the_backup_shows_that_run(api_server):
    from selenium.webdriver.common.by import By

    loc = next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.s3_url)
    with chromium() as driver:
        _signed_in(driver, api_server, "admin")
        driver.get(f"{api_server.base}/rbak/backups/{loc}/s3-sample-1")
        _wait(driver, lambda d: d.find_element(By.ID, "verify")).click()
        _wait(driver, lambda d: "Triggered rbak_verify" in d.find_element(By.ID, "verify-result").text)
    detail = api_server.get(f"/rbak/api/locations/{loc}/backups/s3-sample-1").json()
    (run,) = detail["runs"]["verified"]
    assert run["dag_id"] == "rbak_verify" and run["backup_id"] == "s3-sample-1"
    assert detail["backup"]["last_verify"]["run_id"] == run["run_id"]


def test_a_user_who_may_not_trigger_sees_no_buttons(api_server):
    from selenium.webdriver.common.by import By

    with chromium() as driver:
        _signed_in(driver, api_server, "viewer")
        loc = next(x["id"] for x in api_server.get("/rbak/api/locations").json() if x["url"] == api_server.file_url)
        driver.get(f"{api_server.base}/rbak/backups/{loc}/sample-1")
        _wait(driver, lambda d: d.find_element(By.TAG_NAME, "h1"))
        assert "Backup sample-1" in driver.page_source
        assert not driver.find_elements(By.ID, "restore") and not driver.find_elements(By.ID, "verify")
