"""A built book as its readers see it: every page opened in headless Chromium (Debian's ``chromium``
and ``chromium-driver``, driven by Selenium), over a local HTTP server with no network beyond it.

:func:`browse` opens each page, keeps what its console logged, and moves every slider of every
static demo (``div.itlin-static-demo``) with the keyboard, as a reader does, noting whether the
frame shown changed. :func:`frame_verdicts` reads the verdict column of the frame a demo shows.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import shutil
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest


def chromium() -> tuple:
    """``(browser, driver)`` paths, or fail (under CI, where ``.ci/run`` installs them) or skip."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        browser = None
    if browser is None or driver is None:
        why = "needs Debian's chromium and chromium-driver, and selenium (.ci/run installs them)"
        if os.environ.get("CI"):
            pytest.fail(f"no browser under CI: {why}")
        pytest.skip(why)
    return browser, driver


@contextlib.contextmanager
def serve(folder: Path):
    """The folder over HTTP on 127.0.0.1 (a free port); yields the base URL."""
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def browser(width: int = 1366, height: int = 900):
    """A headless Chromium with its console log kept, at a laptop's window size."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    path, driver_path = chromium()
    opts = webdriver.ChromeOptions()
    opts.binary_location = path
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-quic", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(driver_path))
    try:
        yield driver
    finally:
        driver.quit()


@dataclass
class Page:
    """What one page did: its uncaught script errors, and for each slider of each demo whether
    moving it changed the frame shown (``(demo index, slider index, changed)``)."""

    name: str
    errors: list = field(default_factory=list)
    moves: list = field(default_factory=list)

    @property
    def moved_a_figure(self) -> bool:
        return any(changed for _, _, changed in self.moves)


def _shown(driver, demo) -> tuple:
    """The frame a demo shows: its key and a digest of its images, table and text."""
    return driver.execute_script("""
        const frames = [...arguments[0].querySelectorAll('div.itlin-demo-frame')]
          .filter(f => f.style.display !== 'none');
        return frames.map(f => [f.getAttribute('data-key'), f.innerHTML]);""", demo)


def _digest(shown) -> list:
    return [(key, hashlib.sha1(inner.encode()).hexdigest()) for key, inner in shown]


def move(driver, demo, slider) -> bool:
    """Move one slider one step with the keyboard (right, or left from its last position) and
    say whether the demo's visible frame changed."""
    from selenium.webdriver.common.keys import Keys

    before = _digest(_shown(driver, demo))
    at_end = slider.get_attribute("value") == slider.get_attribute("max")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", slider)
    slider.send_keys(Keys.ARROW_LEFT if at_end else Keys.ARROW_RIGHT)
    after = _digest(_shown(driver, demo))
    return len(after) == 1 and after != before


def set_slider(driver, slider, index: int) -> None:
    """Put a slider at ``index`` with the keyboard (Home, then right arrows)."""
    from selenium.webdriver.common.keys import Keys

    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", slider)
    slider.send_keys(Keys.HOME)
    for _ in range(index):
        slider.send_keys(Keys.ARROW_RIGHT)
    assert int(slider.get_attribute("value")) == index


def uncaught(driver) -> list:
    """The uncaught script errors the page logged since the last call."""
    return [e["message"] for e in driver.get_log("browser")
            if e.get("level") == "SEVERE" and "Uncaught" in e.get("message", "")]


def open_page(driver, url: str) -> None:
    driver.get(url)
    driver.execute_script("return document.readyState")  # the driver waits for the load event


def browse(driver, base: str, pages) -> list:
    """Every page in ``pages`` (``book/damping`` ...) opened, its demos' sliders moved; a :class:`Page` each."""
    from selenium.webdriver.common.by import By

    out = []
    for name in pages:
        open_page(driver, f"{base}/{name}.html")
        page = Page(name, errors=uncaught(driver))
        for d, demo in enumerate(driver.find_elements(By.CSS_SELECTOR, "div.itlin-static-demo")):
            for s, slider in enumerate(demo.find_elements(By.CSS_SELECTOR, "input[type=range]")):
                page.moves.append((d, s, move(driver, demo, slider)))
        page.errors += uncaught(driver)
        out.append(page)
    return out


def frame_table(driver, demo) -> list:
    """The rows of the table in the frame a demo shows, as ``{column: text}``."""
    return driver.execute_script("""
        const f = [...arguments[0].querySelectorAll('div.itlin-demo-frame')].find(f => f.style.display !== 'none');
        const t = f.querySelector('table');
        const cols = [...t.querySelectorAll('thead th')].map(th => th.textContent);
        return [...t.querySelectorAll('tbody tr')].map(tr => Object.fromEntries(
            [...tr.querySelectorAll('td')].map((td, i) => [cols[i], td.textContent])));""", demo)


def frame_text(driver, demo) -> str:
    return driver.execute_script("""
        const f = [...arguments[0].querySelectorAll('div.itlin-demo-frame')].find(f => f.style.display !== 'none');
        const p = f.querySelector('.itlin-demo-text'); return p ? p.textContent : '';""", demo)
