"""Fixtures for the page's tests: a real store from the spotter transcripts, a real
``openmemory ui`` process on it, and one Debian Chromium driven by Playwright.

The store is made as a person's would be: the transcripts placed where Claude Code keeps
them, one ``openmemory run`` at the end of each of the three days they span (so lessons are
learned, strengthened and confirmed over time, and rendered into the worktrees' memory
folders). Screenshots go to ``$OPENMEMORY_SCREENSHOTS``, else ``tests/ui/screenshots/``
(ignored by git); the run prints where.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from openmemory_local.core.config import Config
from openmemory_local.sleep.lessons import lesson_rows
from openmemory_local.storage.store import Store
from tests.local.test_sleep_real import DAYS, place

from .browser import CHROMIUM_ARGS, ensure_chromium

CLI = [sys.executable, "-m", "openmemory_local.cli.main"]
NOW = "2026-02-13T08:00:00Z"  # the morning after the last day
URL = re.compile(r"http://127\.0\.0\.1:(\d+)/\?token=[A-Za-z0-9_\-]+")
_shots: list[Path] = []


def screenshot_dir() -> Path:
    raw = os.environ.get("OPENMEMORY_SCREENSHOTS")
    folder = Path(raw) if raw else Path(__file__).parent / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def shoot(page, name: str) -> Path:
    """Save a full-page screenshot of ``page`` as ``<screenshots>/<name>.png``."""
    path = screenshot_dir() / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    _shots.append(path)
    return path


def pytest_terminal_summary(terminalreporter):
    if _shots:
        terminalreporter.write_line(f"tests/ui: {len(_shots)} screenshots in {_shots[0].parent}")


class World:
    """The data folder, the Claude Code folder, and how to run the CLI on them."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.claude = root / "claude"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("OPENMEMORY_NOW", "XDG_DATA_HOME", "DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
        self.env.update(OPENMEMORY_HOME=str(self.home), CLAUDE_CONFIG_DIR=str(self.claude), HOME=str(root),
                        OPENMEMORY_LESSON_MODEL_URL="")

    def cli(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run([*CLI, *argv], env=self.env, capture_output=True, text=True, timeout=300)
        if check:
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
        return done

    def lessons(self, **filters) -> list[dict]:
        """The lessons as the store holds them now (read in this process, beside the server)."""
        with Store.open(Config(home=self.home, claude_dir=self.claude), create=False) as store:
            return lesson_rows(store, states=("active", "archived", "forming"), **filters)

    def episode(self, episode_id: int) -> dict:
        with Store.open(Config(home=self.home, claude_dir=self.claude), create=False) as store:
            return store.episode(episode_id)

    def report_of(self, kind: str, lesson_id: int) -> int:
        """The id of the morning report that covers the ``kind`` event of ``lesson_id``."""
        with Store.open(Config(home=self.home, claude_dir=self.claude), create=False) as store:
            (event,) = store.conn.execute("SELECT MIN(id) FROM events WHERE kind = ? AND lesson_id = ?",
                                          (kind, lesson_id)).fetchone()
            row = store.conn.execute("SELECT id FROM reports WHERE first_event <= ? AND last_event >= ?",
                                     (event, event)).fetchone()
        assert row, f"no report covers the {kind} event of lesson {lesson_id}"
        return row[0]

    def memory_files(self, name: str) -> list[Path]:
        return sorted((self.claude / "projects").glob(f"*/memory/{name}"))


@pytest.fixture(scope="module")
def world(spotter, tmp_path_factory) -> World:
    world = World(tmp_path_factory.mktemp("ui"))
    for day, names in DAYS.items():
        for name in names:
            place(spotter / name, world.claude / "projects")
        world.cli("run", "--now", f"{day}T23:59:59Z")
    return world


class Served:
    def __init__(self, proc: subprocess.Popen, url: str, port: int, output: list[str]):
        self.proc = proc
        self.url = url
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.output = output


def start_ui(world: World, *extra: str, browser: str | None = None, timeout: float = 120.0) -> Served:
    """``openmemory ui`` on ``world``, once it has printed its link: ``--no-browser``, or with
    ``browser`` as ``$BROWSER`` (a program that is given what it should open)."""
    env = dict(world.env, BROWSER=browser) if browser else world.env
    proc = subprocess.Popen([*CLI, "ui", *([] if browser else ["--no-browser"]), "--now", NOW, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    found = threading.Event()

    def read():
        for line in proc.stdout:
            output.append(line)
            if URL.search(line):
                found.set()
        found.set()

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found.wait(0.1):
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"openmemory ui printed no link in {timeout} s: {''.join(output)}")
    match = next((URL.search(line) for line in output if URL.search(line)), None)
    if match is None:
        proc.kill()
        raise AssertionError(f"openmemory ui exited ({proc.poll()}) without a link: {''.join(output)}")
    return Served(proc, match.group(0), int(match.group(1)), output)


def stop(served: Served) -> None:
    if served.proc.poll() is None:
        served.proc.terminate()
        try:
            served.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            served.proc.kill()
            served.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def served(world):
    served = start_ui(world)
    yield served
    stop(served)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    executable = ensure_chromium()
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(executable), args=CHROMIUM_ARGS, timeout=120_000)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def signed_in(browser, served):
    """A browser context signed in with the printed link."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    response = page.goto(served.url)
    assert response is not None and response.status == 200
    assert page.url == served.base + "/"  # the token is exchanged for a cookie, and leaves the address bar
    yield context
    context.close()
