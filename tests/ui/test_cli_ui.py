"""`openmemory ui` as a command: the other commands never import what it needs, and a data
folder without a store gets a page that says so (and no store is made)."""

from __future__ import annotations

import http.client
import re
import subprocess
import sys
import time
from urllib.parse import urlsplit

from .conftest import World, start_ui, stop

UI_MODULES = ("starlette", "uvicorn", "jinja2", "matplotlib", "playwright", "openmemory_local.ui.server",
              "openmemory_local.eval.plots")


def test_other_commands_do_not_import_the_pages_dependencies(tmp_path):
    code = ("import sys\nfrom openmemory_local.cli.main import main\n"
            f"assert main(['stats', '--home', {str(tmp_path / 'home')!r}]) == 0\n"
            "assert main(['lessons', '--home', %r]) == 0\n"
            "print(sorted(m for m in %r if m in sys.modules))\n") % (str(tmp_path / "home"), UI_MODULES)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def _get(port: int, path: str, cookie: str | None = None) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path, headers={"Cookie": cookie} if cookie else {})
    response = conn.getresponse()
    response.body = response.read().decode()
    conn.close()
    return response


def test_a_data_folder_without_a_store(tmp_path):
    world = World(tmp_path)
    served = start_ui(world)
    try:
        url = urlsplit(served.url)
        signed = _get(served.port, f"{url.path}?{url.query}")
        assert signed.status == 303 and signed.getheader("location") == "/"
        cookie = signed.getheader("set-cookie").split(";", 1)[0]
        page = _get(served.port, "/", cookie)
        assert page.status == 200 and "No memory yet" in page.body and "openmemory run" in page.body
        assert page.getheader("content-security-policy").startswith("default-src 'self'")
        assert page.getheader("x-frame-options") == "DENY"
        assert _get(served.port, "/search?q=git+push", cookie).status == 200
        assert _get(served.port, "/lessons/1", cookie).status == 404
        assert not (world.home / "openmemory.db").exists()  # looking creates nothing
        # a store that cannot be used is said to be so, and left as it is
        world.home.mkdir()
        (world.home / "openmemory.db").write_bytes(b"not a database" * 100)
        page = _get(served.port, "/", cookie)
        assert page.status == 503 and "The store cannot be used" in page.body and "not a database" in page.body
        assert (world.home / "openmemory.db").read_bytes() == b"not a database" * 100
    finally:
        stop(served)
    assert served.proc.returncode == 0 or served.proc.returncode == -15


def test_the_browser_it_opens_gets_its_own_one_time_link_through_a_private_file(tmp_path):
    world = World(tmp_path)
    seen = tmp_path / "seen"
    seen.mkdir()
    script = tmp_path / "browser.sh"
    script.write_text(f'#!/bin/sh\nf="${{1#file://}}"\nstat -c %a "$f" > {seen}/mode.tmp\n'
                      f'cp "$f" {seen}/page.html\nmv {seen}/mode.tmp {seen}/mode\n')
    script.chmod(0o755)
    served = start_ui(world, browser=str(script))
    try:
        deadline = time.monotonic() + 60
        while not (seen / "mode").exists():  # the browser is started once the server is up
            assert time.monotonic() < deadline and served.proc.poll() is None, "".join(served.output)
            time.sleep(0.05)
        assert (seen / "mode").read_text().strip() == "600"
        opened = re.search(r'url=(http://127\.0\.0\.1:\d+/\?token=[^"]+)"', (seen / "page.html").read_text()).group(1)
        assert opened != served.url  # a token of its own
        for link in (opened, served.url):  # each signs in every client that opens it (no cookie kept here)
            url = urlsplit(link)
            assert _get(served.port, f"{url.path}?{url.query}").status == 303
            assert _get(served.port, f"{url.path}?{url.query}").status == 303
        assert _get(served.port, "/?token=not-this-pages").status == 403
    finally:
        stop(served)
