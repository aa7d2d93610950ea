"""The commons in the page, in a real browser (Debian's Chromium, driven by Playwright):
publishing, a lesson received from another node with its provenance graph, the node view.

Two real node processes on loopback (``tests/node/harness.py``): ``mine``, the engine's node
(threshold 1, so that one trusted confirmation makes a lesson common), and ``other``, another
agent's, which publishes a lesson and one derived from it (the graph has an edge), while a
third key, which no node trusts yet, attests the first. The engine is a real store made from
the spotter transcripts (three nightly runs, as in ``test_browser.py``) with ``[publish]
min_strength = 0.9``, and a git user named like a word of one lesson's text, so that the
redaction gate holds that lesson back. The page is a real ``openmemory ui`` process.

One browser, one server, one pair of nodes for the module; the tests run in order and build
on each other (opted in, published, received, trusted, revoked, node stopped). Waits poll
what the nodes report, never a fixed time.
"""

from __future__ import annotations

import json
import re
import time

import nacl.signing
import pytest

from openmemory_local.core.config import Config
from openmemory_local.commons.publish import status as publish_status
from openmemory_local.storage.store import Store
from openmemory_node import wire
from tests.local.test_sleep_real import DAYS, place
from tests.node.harness import Cluster, wait_until

from .conftest import World, shoot
from .test_browser import _request, _session

pytestmark = pytest.mark.slow

FAMILY = "/home/USER/projects/spotter-worktrees/*"
WORKTREE = "/home/USER/projects/spotter-worktrees/spotter-gqc"
OTHER_FAMILY = "/home/marco/projects/spotter"
PULLED = "2026-02-13T07:00:00Z"  # the engine's run after the lessons arrived (the page's "now" is 08:00)
L1 = ('`mix test` failed: "** (DBConnection.ConnectionError) connection refused: the database is not '
      'running".')  # claims (their renderings): a lesson on the wire
L2 = ('`mix test` failed: "** (DBConnection.ConnectionError) connection refused"; the same call succeeded after '
      "`mix ecto.create`.")
HELD_WORD = "xterm"  # this machine's git user name, and a word of lesson 6's text: held back


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("nodes"))
    try:
        mine = cluster.node("mine", extra_config="[commons]\nthreshold = 1")
        mine.init()
        other = cluster.node("other")
        other.init([mine.multiaddr])
        for node in (mine, other):
            node.start(wait=False)
        for node in (mine, other):
            node.wait_ready(timeout=60)
        cluster.wait_line_meshed([mine, other], timeout=60)
        yield mine, other
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def world(spotter, tmp_path_factory, nodes):
    """The spotter store, beside ``mine``; then two lessons from ``other`` received."""
    mine, other = nodes
    world = World(tmp_path_factory.mktemp("ui-commons"))
    world.home.mkdir(parents=True)
    (world.home / "config.toml").write_text(f'[node]\nhome = "{mine.home}"\n\n[publish]\nmin_strength = 0.9\n')
    (world.root / ".gitconfig").write_text(f"[user]\n\tname = {HELD_WORD}\n")
    for day, names in DAYS.items():
        for name in names:
            place(spotter / name, world.claude / "projects")
        world.cli("run", "--now", f"{day}T23:59:59Z")
    # another agent of the owner's team publishes a lesson, then one derived from it (shown as the
    # team's before they are verified); a key nobody trusts attests the first
    mine.post("/v1/team", {"key": other.public_key, "note": "the other agent"})
    world.l1 = other.publish(L1, kind="error")["id"]
    world.l2 = other.publish(L2, kind="error", derived_from=[world.l1])["id"]
    world.stranger = nacl.signing.SigningKey.generate()
    vote = wire.new_attestation(world.stranger, lesson_id=world.l1, failure="confirmed", fix="untested",
                                exposed=False, met_before=False,
                                evidence={"sessions": 4, "matched": 2, "window": 7 * 86400}, created=int(time.time()))
    world.vote = other.post("/v1/records", {"cbor": wire.encode(vote).hex()})["id"]
    wait_until(lambda: all(mine.has(r) for r in (world.l1, world.l2, world.vote)), 60, 0.1,
               what="the other agent's lessons and the vote on the engine's node")
    world.cli("run", "--now", PULLED)  # pulls them, renders them into the project's memory folders
    return world


def opted_in(world) -> dict[str, bool]:
    """Each project family's opt-in, as the store holds it (read in this process)."""
    with Store.open(Config(home=world.home, claude_dir=world.claude), create=False) as store:
        return {f["family"]: f["enabled"] for f in publish_status(store)["families"]}


def files_of(world, record_id: str) -> list:
    return world.memory_files(f"openmemory-commons-{record_id[:16]}.md")


def flashes(page) -> list[str]:
    """The page's messages, as written (HTML would show the node CLI's double spaces as one)."""
    return [page.locator(".flash").nth(i).text_content().strip() for i in range(page.locator(".flash").count())]


def test_opting_in_shows_what_would_leave_first_then_publishing_and_revoking(signed_in, served, world, nodes):
    mine, _ = nodes
    page = signed_in.new_page()
    page.goto(served.base + "/publishing")
    family = page.locator("section.publishing", has=page.locator(f"code.family:text-is('{FAMILY}')"))
    assert "not published" in family.locator("h2").inner_text()
    # the preview: exactly what would leave, nothing changed yet
    family.get_by_role("link", name="Opt in…").click()
    page.wait_for_url(re.compile(re.escape(served.base) + r"/publishing/opt-in\?family=.*"))
    rows = page.locator("#would-leave tr.leaving")
    preview = {int(rows.nth(i).get_attribute("data-lesson")): rows.nth(i).locator("td.text").inner_text()
               for i in range(rows.count())}
    assert len(preview) >= 2 and any("has no upstream branch" in t for t in preview.values())
    assert not any(w in t for t in preview.values() for w in ("USER", "spotter-gqc", "/home/"))
    assert opted_in(world) == {}  # looking changed nothing
    shoot(page, "publishing-opt-in-preview")
    page.locator("#confirm-opt-in").click()
    page.wait_for_url(served.base + "/publishing")
    (said,) = flashes(page)
    assert said.startswith(f"{FAMILY}: opted in; ")
    # the same function as the CLI: its sentence, and its dry run now lists what the preview showed
    again = world.cli("publish", "enable", WORKTREE).stdout.strip()
    assert again == said.replace(": opted in; ", ": already opted in; ", 1)
    dry = json.loads(world.cli("publish", "--dry-run", "--json").stdout)
    assert {r["lesson"]: r["text"] for r in dry["records"]} == preview

    # the other project: nothing of it would leave (its lesson about xterm.js was a bug report, not a
    # correction, since issue 32; and a correction has no commons form anyway: it stays personal)
    page.goto(served.base + "/publishing/opt-in?family=" + OTHER_FAMILY)
    assert page.locator("#nothing-leaves").count() == 1
    page.locator("#confirm-opt-in").click()
    page.wait_for_url(served.base + "/publishing")

    # publish now: the records leave for the node; the page lists them with the node's status
    page.locator("#publish-now").click()
    page.wait_for_url(served.base + "/publishing")
    said = flashes(page)
    assert said[0].startswith(f"Published: {len(preview)} record(s) sent to the node at ")
    family = page.locator("section.publishing", has=page.locator(f"code.family:text-is('{FAMILY}')"))
    records = family.locator("div.record")
    assert records.count() == len(preview)
    ids = [records.nth(i).get_attribute("data-record") for i in range(records.count())]
    assert all(mine.has(rid) for rid in ids)  # on the node, as the page says
    for i in range(records.count()):
        assert records.nth(i).locator(".node-status").inner_text().startswith("candidate; group of 1 record(s)")
    shoot(page, "publishing")

    # revoke one published lesson: withdrawn from the commons, through the node
    push = next(lid for lid, text in preview.items() if "has no upstream branch" in text)
    row = family.locator(f"tr.published-lesson[data-lesson='{push}']")
    rid = row.locator("div.record").get_attribute("data-record")
    row.locator("form.revoke button").click()
    page.wait_for_url(served.base + "/publishing")
    said = flashes(page)
    assert said[0].startswith(f"record {rid} revoked (withdrawn) by ") and said[0].endswith("; now revoked")
    assert said[1] == f"Lesson {push} is not published again."
    assert mine.status_of(rid) == "revoked"
    row = page.locator(f"tr.published-lesson[data-lesson='{push}']")
    assert "revoked" in row.locator(".node-status").inner_text()
    page.goto(f"{served.base}/lessons/{push}")  # the lesson's own page says it too
    assert "revoked" in page.locator(f"#on-the-commons li[data-record='{rid}']").inner_text()
    page.goto(served.base + "/publishing")

    # opting out offers to revoke what was published; leave it there
    family = page.locator("section.publishing", has=page.locator(f"code.family:text-is('{FAMILY}')"))
    family.get_by_role("link", name="Opt out…").click()
    page.wait_for_url(re.compile(re.escape(served.base) + r"/publishing/opt-out\?family=.*"))
    left = len(preview) - 1
    assert page.locator("#stays").inner_text().startswith(f"{left} records of {left} lessons stay")
    assert page.locator("#opt-out-revoke").count() == 1
    page.locator("#opt-out").click()
    page.wait_for_url(served.base + "/publishing")
    said = flashes(page)
    assert said[0] == f"{FAMILY}: opted out; nothing more is published from it"
    assert said[1].startswith(f"{len(preview) - 1} record(s) of lesson(s) ") and "stay on the commons" in said[1]
    assert all(mine.status_of(r) == "candidate" for r in ids if r != rid)
    assert opted_in(world) == {FAMILY: False, OTHER_FAMILY: True}
    page.close()


def test_a_received_lesson_its_provenance_graph_and_a_veto(signed_in, served, world):
    l1, l2 = world.l1, world.l2
    name = f"openmemory-commons-{l2[:16]}.md"
    rendered = len(files_of(world, l2))
    assert rendered >= 1  # `openmemory run` wrote it into the project's memory folders
    page = signed_in.new_page()
    page.goto(served.base + "/")
    layer = page.locator("#layer-commons")
    family = layer.locator("section.project", has=page.locator(f"code.family:text-is('{FAMILY}')"))
    assert family.locator(f"article.commons[data-commons='{l1}']").count() == 1
    row = family.locator(f"article.commons[data-commons='{l2}']")
    assert "team: not yet verified by independent agents" in row.inner_text() and "Reported by other agents" in row.inner_text()
    shoot(page, "lessons-with-commons")
    row.locator("a.id").click()
    page.wait_for_url(f"{served.base}/commons/{l2}")
    assert page.locator("#commons-text").inner_text() == L2
    assert "not an instruction" in page.locator("#commons-notice").inner_text()
    assert page.locator("#commons-status").inner_text() == "candidate"
    # the provenance chain, as the node reports it, drawn as a graph: L1 -> L2
    graph = page.locator("#provenance-graph svg")
    assert graph.locator("g.node").count() == 2
    edges = graph.locator("g.edge")
    assert edges.count() == 1
    assert (edges.get_attribute("data-from"), edges.get_attribute("data-to")) == (l1, l2)
    assert graph.locator(f"g.node.focus[data-id='{l2}']").count() == 1
    assert "As the node reports it" in page.locator("#provenance").inner_text()
    assert page.locator("#no-votes").count() == 1 and page.locator("#no-own-attestations").count() == 1
    svg = page.request.get(f"{served.base}/commons/{l2}/provenance.svg")
    assert svg.status == 200 and svg.headers["content-type"].startswith("image/svg+xml") and l1[:16] in svg.text()
    shoot(page, "commons-lesson-provenance")
    # one click on the parent's box: its page, with the vote the node did not count, and why
    graph.locator(f"g.node[data-id='{l1}'] a").click()
    page.wait_for_url(f"{served.base}/commons/{l1}")
    vote = page.locator("#votes tr.vote")
    assert vote.count() == 1 and vote.get_attribute("data-signer") == world.stranger.verify_key.encode().hex()
    assert "not counted: its key is not in this node's trust list" in vote.inner_text()
    assert page.locator("#tally").inner_text().startswith("0 of 1 vote counted under the trusted policy")
    # veto the derived lesson: its file leaves every memory folder at once
    page.goto(f"{served.base}/commons/{l2}")
    page.locator("#veto").click()
    page.wait_for_url(f"{served.base}/commons/{l2}")
    (said,) = flashes(page)
    folders = f"{rendered} memory folder{'s' if rendered != 1 else ''}"
    assert said == f"Received lesson {l2[:16]} vetoed: never rendered again; its file was removed from {folders}."
    assert files_of(world, l2) == [] and all(name not in p.read_text() for p in world.memory_files("MEMORY.md"))
    assert page.locator("#no-files").inner_text().endswith("(vetoed).")
    page.goto(served.base + "/")
    assert "vetoed" in page.locator(f"#layer-commons article.commons[data-commons='{l2}']").first.inner_text()
    # unveto, then the CLI's veto: the same function, the same sentence, the same effect
    page.goto(f"{served.base}/commons/{l2}")
    page.locator("#unveto").click()
    page.wait_for_url(f"{served.base}/commons/{l2}")
    assert flashes(page)[0].startswith(f"Received lesson {l2[:16]} unvetoed: written again into {folders}")
    assert len(files_of(world, l2)) == rendered
    assert world.cli("veto", l2[:16], "--now", "2026-02-13T08:30:00Z").stdout.strip() == said
    assert files_of(world, l2) == []
    world.cli("unveto", l2[:16])
    assert len(files_of(world, l2)) == rendered
    page.close()


def test_search_recalls_lessons_own_and_received_beside_episodes(signed_in, served, world):
    page = signed_in.new_page()
    page.goto(served.base + "/search?q=" + "git push fails: the current branch has no upstream branch")
    own = page.locator("#lesson-results li.lesson-hit")
    assert own.count() >= 1 and "has no upstream branch" in own.nth(0).inner_text()
    recalled = json.loads(world.cli("recall", "git push fails: the current branch has no upstream branch",
                                    "--no-touch", "--json", "--now", "2026-02-13T08:00:00Z").stdout)
    assert [int(own.nth(i).get_attribute("data-lesson")) for i in range(own.count())] == \
        [h["lesson"]["id"] for h in recalled["lessons"]]  # `openmemory recall`'s lessons, in its order
    assert page.locator("#episode-results li.result").count() >= 3
    page.goto(served.base + "/search?q=" + "mix test connection refused, the database is not running")
    received = page.locator("#commons-results li.commons-hit")
    assert received.count() >= 1
    assert received.nth(0).get_attribute("data-commons") in (world.l1, world.l2)
    assert "Reported by other agents" in page.locator("main").inner_text()
    shoot(page, "search-lessons")
    page.goto(served.base + "/search?q=mix+test+connection+refused&kind=error")  # a kind of episode: episodes only
    assert page.locator("#commons-results").count() == 0 and page.locator("#lesson-results").count() == 0
    page.close()


def test_the_node_view_trusting_a_key_and_revoking_locally(signed_in, served, world, nodes):
    mine, other = nodes
    l1, l2 = world.l1, world.l2
    stranger = world.stranger.verify_key.encode().hex()
    page = signed_in.new_page()
    page.goto(served.base + "/node")
    assert page.locator("#peer-id").inner_text() == mine.peer_id
    peer = page.locator(f"tr.peer[data-peer='{other.peer_id}']")
    assert peer.count() == 1 and "connected" in peer.inner_text()
    lessons = page.locator("#records tr[data-type='lesson']")
    counts = mine.status()["records"]["lesson"]
    assert lessons.locator("[data-status='candidate']").inner_text() == f"candidate {counts['candidate']}"
    assert page.locator("#trust-list tr[data-key]").count() == 1  # its own key only
    # the node's actions are behind the page's door too: no CSRF token, or another site, is refused
    cookie, csrf = _session(signed_in, served)
    body = f"list=trust&action=add&key={stranger}"
    assert _request(served, "POST", "/node/keys", {"Cookie": cookie, "Origin": served.base}, body)[0] == 403
    assert _request(served, "POST", "/node/keys", {"Cookie": cookie, "Origin": "http://evil.example"},
                    f"{body}&csrf={csrf}")[0] == 403
    assert _request(served, "POST", "/node/revoke-local", {"Cookie": cookie, "Origin": served.base},
                    f"id={l1}")[0] == 403
    assert [k["key"] for k in mine.get("/v1/trust")["trust"]] == [mine.public_key]
    assert mine.get("/v1/revocations/local")["local_revocations"] == []
    # trust the stranger's key, as `openmemory-node trust add` does: its vote counts, L1 is common
    form = page.locator("#trust-add")
    form.locator("input[name=key]").fill(stranger)
    form.locator("input[name=note]").fill("the build server")
    form.locator("button").click()
    page.wait_for_url(served.base + "/node")
    said = flashes(page)
    assert re.fullmatch(rf"{stranger}  added; \d+ statuses changed", said[0]) and said[1].startswith(
        "This memory pulled from the node: ")
    assert "the build server" in page.locator(f"#trust-list tr[data-key='{stranger}']").inner_text()
    assert mine.status_of(l1) == "common" and other.status_of(l1) == "candidate"  # trusted here only
    shoot(page, "node")
    page.goto(f"{served.base}/commons/{l1}")
    assert page.locator("#commons-status").inner_text() == "common"  # the engine pulled it at once
    assert page.locator("#status-text").inner_text().startswith("common: confirmed by 1 independent agent")
    assert "counted" == page.locator("#votes tr.vote td").last.inner_text()
    # revoke it on my node only: it and what derives from it leave the memory folders now
    assert files_of(world, l1) and files_of(world, l2)
    page.locator("form.revoke-local input[name=reason]").fill("the database here is always up")
    page.locator("#revoke-local").click()
    page.wait_for_url(f"{served.base}/commons/{l1}")
    said = flashes(page)
    assert re.fullmatch(rf"{l1}  revoked here only \(never published\); now revoked, \d+ statuses changed", said[0])
    assert said[1].startswith("This memory pulled from the node: ") and "left the memory folders" in said[1]
    assert mine.status_of(l1) == mine.status_of(l2) == "revoked"
    assert other.status_of(l1) == other.status_of(l2) == "candidate"  # nothing was published
    assert files_of(world, l1) == files_of(world, l2) == []
    assert "revoked locally, on this node" in page.locator("#revocations").inner_text()
    page.goto(f"{served.base}/commons/{l2}")
    assert page.locator(f"#provenance-graph g.node[data-id='{l2}']").get_attribute("data-status") == "revoked"
    assert "because the lesson it derives from" in page.locator("#revocations").inner_text()
    # the node view lists it; lift it, as `openmemory-node revoke --undo`
    page.goto(served.base + "/node")
    local = page.locator(f"#local-revocations tr[data-record='{l1}']")
    assert "the database here is always up" in local.inner_text()
    local.locator("button").click()
    page.wait_for_url(served.base + "/node")
    assert flashes(page)[0] == f"{l1}  local revocation lifted; now common"
    assert mine.status_of(l2) == "candidate"
    # a key the node cannot read is refused with its reason, and nothing changes
    form = page.locator("#trust-add")
    form.locator("input[name=key]").fill("0" * 63 + "g")
    form.locator("button").click()
    page.wait_for_url(served.base + "/node")
    assert flashes(page)[0].startswith("The commons node refused: bad-key")
    assert page.locator("#trust-list tr[data-key]").count() == 2
    page.close()


def test_without_a_node_running_the_pages_say_so(signed_in, served, world, nodes):
    mine, _ = nodes
    mine.stop(timeout=30)  # SIGTERM: the daemon removes its api.addr as it stops
    page = signed_in.new_page()
    response = page.goto(served.base + "/node")
    assert response.status == 200
    assert f"the commons node at {mine.home} is not running" in page.locator("#no-node").inner_text()
    assert page.locator("#start-node").inner_text() == f"openmemory-node start --home {mine.home}"  # made already
    shoot(page, "node-not-running")
    page.goto(f"{served.base}/commons/{world.l2}")  # drawn from what this memory holds
    assert "is not running" in page.locator("#node-problem").inner_text()
    assert page.locator("#provenance-graph svg g.edge").count() == 1
    assert "As this memory holds it" in page.locator("#provenance").inner_text()
    page.goto(served.base + "/publishing")
    assert "is not running" in page.locator("#node-problem").inner_text()
    records = page.locator("section.publishing div.record")
    unknown = records.filter(has_text="status unknown (node not running)")
    assert records.count() >= 2 and unknown.count() == records.count() - 1  # the revoked one says so instead
    page.close()
