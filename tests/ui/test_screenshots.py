"""The pictures in the docs, from real runs: one Airflow (api-server, scheduler with the LocalExecutor, dag-processor;
``tests/airflow_stack.py``) backs up a classic, a quorum and a stream queue with ``rbak_backup``, restores them into
another vhost with ``rbak_restore`` after a person's approval, and headless Chromium shows each step as a user meets
it: the backup's grid, the approval waiting with the plan, the plan task's log, the restore's grid and the backups
view's page of the backup.

Each page is checked for what it must show (the DAG's task ids in its grid, the backup id in the view, the queues in
the plan), never compared by pixels. ``make screenshots`` (``RBAK_SCREENSHOTS=1``) writes them into docs/images/
(tests/ui/screenshots.py); ``tests/test_docs_images.py`` checks the committed ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from tests.airflow_stack import USER, AirflowStack, airflow_stack
from tests.restore.helpers import declare, publish
from tests.ui.browser import chromium, missing_browser
from tests.ui.screenshots import SIZE, keep

pytestmark = pytest.mark.broker
QUEUES = {"orders": "classic", "payments": "quorum", "events": "stream"}
COUNT = 25
BACKUP_ID = "nightly-1"
#: The vhost backed up and the one restored into: names a reader understands (removed before and after the test).
SOURCE, TARGET = "shop", "shop-restored"
#: Who triggers the restore (the SimpleAuthManager role "user"): the approver (the stack's admin) is someone else.
REQUESTER = "requester"
DEADLINE_S = 120


@pytest.fixture(autouse=True)
def browser_present() -> None:
    """Skipped where no browser can run, but failed under RBAK_CI (CI installs one): the pictures must be taken."""
    reason = missing_browser()
    if reason is not None:
        if os.environ.get("RBAK_CI") or os.environ.get("CI"):
            pytest.fail(f"{reason} (RBAK_CI: the screenshots must be taken)", pytrace=False)
        pytest.skip(reason)


def _wait(driver, condition):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, DEADLINE_S, poll_frequency=0.5).until(condition)


def _shows(driver, *texts: str) -> str | None:
    """The page's text once it holds every one of ``texts`` (None while it does not)."""
    from selenium.webdriver.common.by import By

    body = driver.find_element(By.TAG_NAME, "body").text
    return body if all(text in body for text in texts) else None


def _task_ids(stack: AirflowStack, dag_id: str) -> list[str]:
    """The DAG's task ids, as the DAG itself declares them (the REST API's task list)."""
    return [t["task_id"] for t in stack.api("GET", f"dags/{dag_id}/tasks").json()["tasks"]]


def _run_page(stack: AirflowStack, dag_id: str, run_id: str, *rest: str) -> str:
    return "/".join([stack.url, "dags", dag_id, "runs", quote(run_id, safe=""), *rest])


def _no_vhost(broker, name: str) -> None:
    try:
        broker.api("DELETE", f"vhosts/{quote(name, safe='')}")
    except requests.HTTPError as exc:
        if exc.response is None or exc.response.status_code != 404:
            raise


@pytest.fixture
def shop(broker) -> Iterator[str]:
    """The vhost ``shop`` with a classic, a quorum and a stream queue of COUNT messages each; ``shop`` and
    ``shop-restored`` are removed before and after."""
    for name in (SOURCE, TARGET):
        _no_vhost(broker, name)
    broker.api("PUT", f"vhosts/{SOURCE}")
    broker.api("PUT", f"permissions/{SOURCE}/{quote(broker.connection.username, safe='')}",
               json={"configure": ".*", "write": ".*", "read": ".*"})
    declare(broker.connection, SOURCE, QUEUES)
    for queue, queue_type in QUEUES.items():
        publish(broker.connection, SOURCE, queue, 0, COUNT, decimal=queue_type != "stream")
    yield SOURCE
    for name in (SOURCE, TARGET):
        _no_vhost(broker, name)


def test_real_backup_and_approved_restore_as_a_user_sees_them(shop, tmp_path):
    from selenium.webdriver.common.by import By

    # Given a classic, a quorum and a stream queue, and an Airflow whose default location is a folder
    location = (tmp_path / "backups").as_uri()
    (tmp_path / "airflow").mkdir()
    stack = airflow_stack(tmp_path / "airflow", {REQUESTER: "user"}, AIRFLOW__RBAK__STORAGE_URL=location)
    shots = tmp_path / "shots"
    shots.mkdir()
    stack.start()
    try:
        stack.wait_for_dag("rbak_backup")
        stack.wait_for_dag("rbak_restore")
        with chromium(*SIZE) as driver:
            driver.get(f"{stack.url}/api/v2/monitor/health")
            driver.add_cookie({"name": "_token", "value": stack.token, "path": "/"})

            # When rbak_backup runs
            backup_run = stack.trigger("rbak_backup", {"backup_id": BACKUP_ID, "vhosts": [shop],
                                                       "segment_work": "process"})
            assert stack.wait_for_run("rbak_backup", backup_run) == "success", stack.task_states("rbak_backup", backup_run)
            # Then its grid shows every task of the DAG
            driver.get(_run_page(stack, "rbak_backup", backup_run))
            _wait(driver, lambda d: _shows(d, *_task_ids(stack, "rbak_backup"), "Success"))
            keep(driver, shots, "run-backup-grid.png")

            # When a requester triggers rbak_restore into another vhost, with the approval it asks by default
            restore_run = stack.trigger("rbak_restore", {"backup_id": BACKUP_ID, "vhosts": [shop],
                                                         "vhost_map": {shop: TARGET}, "restore_definitions": True},
                                        as_user=REQUESTER)
            stack.wait_for_task("rbak_restore", restore_run, "approve", ("awaiting_input",))
            stack.wait_until_parked("rbak_restore", restore_run, "approve")
            # Then the approval shows the plan: each queue, into the target vhost
            driver.get(_run_page(stack, "rbak_restore", restore_run, "tasks", "approve", "required_actions"))
            _wait(driver, lambda d: _shows(d, f"Restore backup {BACKUP_ID}", "Approve", "Reject", TARGET,
                                           *(f"{shop}/{q}" for q in QUEUES)))
            keep(driver, shots, "run-approval.png")
            # and, further down, the full plan: queue by queue, and the definitions it imports
            heading = driver.find_element(By.XPATH, "//*[normalize-space(text())='Full plan']")
            driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", heading)
            assert _shows(driver, "Queues (3)", "no such queue", *(f"{shop}/{q}" for q in QUEUES))
            keep(driver, shots, "run-restore-plan.png")

            # When another person (not the requester) approves it
            path = f"{stack.run_path('rbak_restore', restore_run)}/taskInstances/approve/-1/hitlDetails"
            assert stack.api("PATCH", path, json={"chosen_options": ["Approve"]}).json()["responded_by"]["name"] == USER
            assert stack.wait_for_run("rbak_restore", restore_run) == "success", stack.task_states("rbak_restore",
                                                                                                 restore_run)
            # Then its grid shows every task of the DAG
            driver.get(_run_page(stack, "rbak_restore", restore_run))
            _wait(driver, lambda d: _shows(d, *_task_ids(stack, "rbak_restore"), "Success"))
            keep(driver, shots, "run-restore-grid.png")

            # and the backups view, inside Airflow, shows the backup with the restore that used it
            driver.get(f"{stack.url}/plugin/rabbitmq-backups")
            frame = _wait(driver, lambda d: d.find_element(By.TAG_NAME, "iframe"))
            driver.switch_to.frame(frame)
            _wait(driver, lambda d: d.find_element(By.LINK_TEXT, BACKUP_ID)).click()
            _wait(driver, lambda d: _shows(d, f"Backup {BACKUP_ID}", "Restored by", restore_run, *QUEUES))
            driver.execute_script("window.scrollTo(0, document.body.scrollHeight);")  # down to the runs
            keep(driver, shots, "run-backup-view.png")
    finally:
        stack.stop()
    assert {p.name for p in shots.iterdir()} == {"run-backup-grid.png", "run-approval.png", "run-restore-plan.png",
                                                 "run-restore-grid.png", "run-backup-view.png"}
    assert all(_png_size(p) == SIZE for p in shots.iterdir())


def _png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    return int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
