"""What the browser tests share: Debian's Chromium driven by Playwright, and their screenshots."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import coursekit as ck

# Debian's chromium, another distribution's chromium-browser, or the one GPUCOURSE_CHROMIUM names
CHROMIUM = (
    os.environ.get("GPUCOURSE_CHROMIUM")
    or shutil.which("chromium")
    or shutil.which("chromium-browser")
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]  # the last: containers' small /dev/shm
ARTIFACTS = ck.ROOT / "test-artifacts"
VIEWPORT = {"width": 1280, "height": 800}


def why_no_browser() -> str | None:
    if not CHROMIUM or not os.access(CHROMIUM, os.X_OK):
        how = "`apt-get install chromium` (Debian; .ci/run does), or GPUCOURSE_CHROMIUM=its path"
        return f"no Chromium{f' at {CHROMIUM}' if CHROMIUM else ' on PATH'}: {how}"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed: `pip install -e '.[course]'`"
    return None


@contextlib.contextmanager
def chromium_page():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(60_000)
        try:
            with failure_screenshot(page):
                yield page
        finally:
            browser.close()


@contextlib.contextmanager
def failure_screenshot(page):
    """On an error inside, test-artifacts/browser-failure.png: what the page showed then (a page a
    module's tests share is closed after the test that failed)."""
    try:
        yield page
    except BaseException:
        with contextlib.suppress(Exception):
            screenshot(page, "browser-failure.png")
        raise


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path))
    return path
