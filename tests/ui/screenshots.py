"""The documented screenshots: which the browser tests take, what each shows, at which size, and where they go.

Every screenshot is taken at one fixed viewport (``SIZE``, set exactly through the DevTools protocol in
``tests/ui/browser.py``), so a regenerated image has the size the docs check expects. The browser tests always take
them (into their own temporary folder); with ``RBAK_SCREENSHOTS=1`` (``make screenshots``) they also copy the
documented ones into ``docs/images/``. ``tests/test_docs_images.py`` checks the committed files against this table.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "docs" / "images"
#: The viewport of every browser test (width, height in CSS pixels, device scale factor 1).
SIZE = (1400, 900)

#: Each documented screenshot -> what it shows, and the test that takes it.
DOCUMENTED: dict[str, tuple[str, str]] = {
    "backups-list.png": ("the backups view inside Airflow: sample backups in a folder, on S3 and an unreachable S3",
                         "tests/ui/test_browser.py"),
    "backup-page.png": ("one sample backup's page in the backups view, a stream chain's segments open",
                        "tests/ui/test_browser.py"),
    "restore-form.png": ("Restore…: rbak_restore's trigger form with the backup's location and id filled in",
                         "tests/ui/test_browser.py"),
    "messages-page.png": ("a queue's messages in the backups view: the filter form, each message's properties, headers "
                          "and body preview", "tests/ui/test_view_browser.py"),
    "run-backup-grid.png": ("the Airflow grid of a real rbak_backup run (classic, quorum and stream queue)",
                            "tests/ui/test_screenshots.py"),
    "run-approval.png": ("the approve task of a real rbak_restore run waiting for a person, the plan in its request",
                         "tests/ui/test_screenshots.py"),
    "run-restore-plan.png": ("the plan task's log of that run: the restore plan, queue by queue",
                             "tests/ui/test_screenshots.py"),
    "run-restore-grid.png": ("the Airflow grid of that rbak_restore run after its approval",
                             "tests/ui/test_screenshots.py"),
    "run-backup-view.png": ("the backups view's page of the real backup, the approved restore listed",
                            "tests/ui/test_screenshots.py"),
}


def regenerating() -> bool:
    """Whether this run writes the documented screenshots into docs/images/ (``RBAK_SCREENSHOTS=1``)."""
    return os.environ.get("RBAK_SCREENSHOTS") == "1"


def keep(driver, folder: Path, name: str) -> Path:
    """Screenshot the whole window (outside any frame) into ``folder``; copied into docs/images/ when regenerating
    and documented."""
    driver.switch_to.default_content()
    shot = folder / name
    driver.save_screenshot(str(shot))
    if regenerating() and name in DOCUMENTED:
        shutil.copy(shot, IMAGES / name)
    return shot
