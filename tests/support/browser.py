"""Debian's headless Chromium driven by Selenium, for the session page tests and the bench.

scripts/ensure_chromium.sh (run by `make test`) installs `chromium` and `chromium-driver`.
The flags keep Chromium off the network (this machine has none but the registries) and out
of any profile: a fresh temporary user-data-dir per browser.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1300,2000",
)


@contextmanager
def chromium() -> Iterator[webdriver.Chrome]:
    """A headless Chromium session; quit (and its profile removed) on exit."""
    profile = tempfile.mkdtemp(prefix="sessionlog-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
