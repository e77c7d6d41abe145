"""Headless Chromium for the console's browser tests: Debian's ``chromium`` package driven by
Playwright (the ``playwright`` Python package, pinned in the ``test`` extra) through
``executable_path``; Playwright's own browser downloads are never used.

A machine without Chromium or Playwright FAILS these tests, never skips them, as for PostgreSQL
(tests/conftest.py): ``make test`` installs them (``scripts/system-deps.sh test``).
``ONCELOG_CHROMIUM`` names another binary. Screenshots go to ``ONCELOG_TEST_ARTIFACTS`` (CI keeps
that directory), by default ``test-artifacts/`` at the top of the repository (ignored by git).
With ``ONCELOG_DOCS_SCREENSHOTS=1`` the console tests also write the screenshots docs/CONSOLE.md
shows (``docs/images/console/``, committed): ``ONCELOG_DOCS_SCREENSHOTS=1 pytest
tests/integration/test_console_browser.py`` refreshes them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest

CANDIDATES = ("chromium", "chromium-browser", "/usr/lib/chromium/chromium")


def chromium_path() -> str:
    """The Chromium binary to drive. Fails the test (never skips) when there is none."""
    named = os.environ.get("ONCELOG_CHROMIUM")
    for c in ((named,) if named else CANDIDATES):
        found = shutil.which(c) or (c if os.path.isabs(c) and os.access(c, os.X_OK) else None)
        if found:
            return found
    pytest.fail(f"no Chromium found ({named or ', '.join(CANDIDATES)}): install Debian's package "
                "(scripts/system-deps.sh test, which make test runs) or set ONCELOG_CHROMIUM", pytrace=False)


def artifacts_dir(name: str) -> Path:
    """Where a test keeps its screenshots: ``$ONCELOG_TEST_ARTIFACTS/<name>``, by default
    ``<repo>/test-artifacts/<name>``; created empty."""
    root = Path(os.environ.get("ONCELOG_TEST_ARTIFACTS") or Path(__file__).resolve().parent.parent / "test-artifacts")
    d = root / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


DOCS_SHOTS = Path(__file__).resolve().parent.parent / "docs" / "images" / "console"


def shoot(page, shots: Path, name: str, *, docs: bool = False) -> None:  # type: ignore[no-untyped-def]
    """A full-page screenshot ``<shots>/<name>.png``; with ``docs`` and ONCELOG_DOCS_SCREENSHOTS set,
    also the visible part of the page as ``docs/images/console/<name>.png`` (the manual's picture)."""
    page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
    if docs and os.environ.get("ONCELOG_DOCS_SCREENSHOTS"):
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(DOCS_SHOTS / f"{name}.png"), full_page=False)


@pytest.fixture
def chromium() -> Iterator:
    """A headless Chromium browser (Playwright ``Browser``), closed after the test."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright package is missing: pip install -e '.[test]'", pytrace=False)
    exe = chromium_path()
    with sync_playwright() as pw:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start
        browser = pw.chromium.launch(executable_path=exe, headless=True, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()
