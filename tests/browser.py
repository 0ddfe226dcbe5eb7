"""Debian's Chromium, driven by Playwright, for the tests of the viewer's page."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM = DEBIAN_CHROMIUM if Path(DEBIAN_CHROMIUM).exists() else (shutil.which("chromium") or DEBIAN_CHROMIUM)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A Chromium browser; the test is skipped where none is installed (it fails instead
    with GGML_VIZ_REQUIRE_BROWSER=1, as CI sets)."""
    if not Path(CHROMIUM).exists():
        message = f"Chromium is not installed ({CHROMIUM}); `.ci/run` installs Debian's chromium"
        if os.environ.get("GGML_VIZ_REQUIRE_BROWSER"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def collect_errors(page: Any) -> list[str]:
    """The page's uncaught errors and console errors, as they happen."""
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors


@contextlib.contextmanager
def checked_page(browser: Any, width: int = 1440, height: int = 900) -> Iterator[Any]:
    """A page of its own context; the test fails if the page raised or logged an error."""
    context = browser.new_context(viewport={"width": width, "height": height})
    page = context.new_page()
    errors = collect_errors(page)
    yield page
    context.close()
    assert not errors, errors


def open_offline(browser: Any, file: Path, width: int = 1440, height: int = 900) -> tuple[Any, list[str], list[str]]:
    """A saved page (the HTML report) opened from its file, ready: the page, the URLs it
    requested and its uncaught errors, as they happen."""
    page = browser.new_page(viewport={"width": width, "height": height})
    requests: list[str] = []
    errors: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(file.as_uri())
    page.wait_for_selector("body[data-ready='1']")
    return page, requests, errors


@contextlib.contextmanager
def serving(page: Any, path: Path, **options: Any) -> Iterator[Any]:
    """A viewer for `path` while the block runs; the page lets go of it before it stops."""
    from ggml_viz.ui.server import make_viewer

    viewer = make_viewer(path, port=0, **options)
    viewer.serve_in_background()
    try:
        yield viewer
    finally:
        page.goto("about:blank")
        viewer.stop()
