"""A page opened from file:// in Debian's Chromium, headless, through Playwright.

Nothing is downloaded: Playwright drives /usr/bin/chromium (`apt-get install chromium`;
tools/dev.py installs it as root), and the test skips, saying why, where it is absent. Every
request that is not for a file:// URL is aborted and counted, and every console error and
page error is kept, so a test can check the page needs no network and runs cleanly.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class OpenedPage:
    """A page and what it did: console errors, page errors, requests not for file://."""

    page: Any
    errors: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)


def _require_browser() -> Any:
    if shutil.which(str(CHROMIUM)) is None:
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (the root pyproject's dev dependencies)")
    return sync_playwright


@contextlib.contextmanager
def open_page(path: Path, width: int = 1400, height: int = 900) -> Iterator[OpenedPage]:
    """Opens the HTML file at `path` in headless Chromium; skips where there is none."""
    sync_playwright = _require_browser()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            opened = OpenedPage(page)

            def route(route: Any) -> None:
                url = route.request.url
                if url.startswith("file://"):
                    route.continue_()
                else:
                    opened.network.append(url)
                    route.abort()

            page.route("**/*", route)
            page.on(
                "console",
                lambda msg: opened.errors.append(msg.text) if msg.type == "error" else None,
            )
            page.on("pageerror", lambda exc: opened.errors.append(str(exc)))
            page.goto(path.resolve().as_uri())
            yield opened
        finally:
            browser.close()


DOCS_SCREENSHOTS = "PERFETTO_PY_DOCS_SCREENSHOTS"
"""A directory (set by `nox -s screenshots`) where each screenshot is also copied, for docs/."""


def screenshot(opened: OpenedPage, png: Path) -> int:
    """Saves a screenshot of the whole page to `png` (and a copy in $DOCS_SCREENSHOTS, when
    set); returns how many distinct colours it has (a blank page has one or two), counted by
    the browser itself from the PNG."""
    data = opened.page.screenshot(path=str(png), full_page=True)
    docs = os.environ.get(DOCS_SCREENSHOTS)
    if docs:
        shutil.copy(png, Path(docs) / png.name)
    count: int = opened.page.evaluate(
        """async (b64) => {
            const img = new Image();
            img.src = 'data:image/png;base64,' + b64;
            await img.decode();
            const canvas = document.createElement('canvas');
            canvas.width = img.naturalWidth;
            canvas.height = img.naturalHeight;
            const ctx = canvas.getContext('2d');
            ctx.drawImage(img, 0, 0);
            const px = ctx.getImageData(0, 0, canvas.width, canvas.height).data;
            const seen = new Set();
            for (let i = 0; i < px.length && seen.size <= 1000; i += 4) {
                seen.add((px[i] << 16) | (px[i + 1] << 8) | px[i + 2]);
            }
            return seen.size;
        }""",
        base64.b64encode(data).decode("ascii"),
    )
    return count
