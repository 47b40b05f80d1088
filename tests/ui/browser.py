"""Headless Chromium through Selenium (Debian's ``chromium`` and ``chromium-driver``), or a reason to skip."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager


def missing_browser() -> str | None:
    """Why no browser test can run here, or None (scripts/system-deps.sh test installs both packages)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    for program, package in (("chromium", "chromium"), ("chromedriver", "chromium-driver")):
        if shutil.which(program) is None:
            return f"{program} is not installed (apt-get install {package}, as scripts/system-deps.sh test does)"
    return None


def viewport(driver, width: int, height: int = 900) -> None:
    """Set the page's viewport exactly: a window's size leaves the viewport to the browser's frame, and the viewport
    is what a screenshot holds."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                           {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})


@contextmanager
def chromium(width: int = 1400, height: int = 900) -> Iterator[object]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                f"--window-size={width},{height}", "--force-device-scale-factor=1"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    viewport(driver, width, height)
    try:
        yield driver
    finally:
        driver.quit()
