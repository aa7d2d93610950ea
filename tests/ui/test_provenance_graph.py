"""openmemory_local.eval.plots' provenance graph: a chain as the node gives it (GET /v1/commons/{id},
``chain``) drawn as a layered SVG: parents above what derives from them, every text escaped,
the same bytes for the same chain. And the page's redirect target check."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from openmemory_local.eval.plots import PlotError, chain_graph, layered_layout, provenance_svg
from openmemory_local.ui.commons_pages import _safe_next

A, B, C, D, R = (ch * 68 for ch in "abcd0")
HOSTILE = 'a lesson that says </text><script>alert("x")</script> & <!-- -->'
SVG = "{http://www.w3.org/2000/svg}"

#: The focus C derives from A and B, which both derive from R (a diamond); D derives from C.
CHAIN = {"id": C, "status": "candidate", "type": "lesson", "text": HOSTILE,
         "parents": [{"id": A, "status": "common", "text": "parent a",
                      "parents": [{"id": R, "status": "revoked", "text": "the root", "parents": []}]},
                     {"id": B, "status": "absent", "parents": [{"id": R, "status": "revoked", "repeated": True}]}],
         "children": [{"id": D, "status": "candidate", "text": "a child", "children": []}]}


def test_the_chain_becomes_nodes_and_edges_parent_to_child():
    nodes, edges = chain_graph(CHAIN)
    assert set(nodes) == {A, B, C, D, R}
    assert edges == sorted([(R, A), (R, B), (A, C), (B, C), (C, D)])
    assert nodes[C]["focus"] is True and nodes[R]["status"] == "revoked" and nodes[R]["text"] == "the root"
    assert nodes[B]["status"] == "absent" and nodes[B]["text"] is None


def test_layers_put_every_parent_above_what_derives_from_it():
    nodes, edges = chain_graph(CHAIN)
    where = layered_layout(nodes, edges)
    assert {n: layer for n, (layer, _) in where.items()} == {R: 0, A: 1, B: 1, C: 2, D: 3}
    assert all(where[p][0] < where[c][0] for p, c in edges)
    assert sorted(where[n][1] for n in (A, B)) == [0, 1]  # side by side in their layer
    # a longer path wins: R -> A -> C and R -> C put C below A
    nodes2, edges2 = chain_graph({"id": C, "status": "candidate", "parents": [
        {"id": A, "status": "common", "parents": [{"id": R, "status": "common", "parents": []}]},
        {"id": R, "status": "common", "repeated": True}]})
    assert layered_layout(nodes2, edges2)[C][0] == 2


def test_a_cycle_never_in_a_real_chain_still_terminates():
    nodes = {A: {}, B: {}}
    where = layered_layout(nodes, [(A, B), (B, A)])
    assert set(where) == {A, B}


def test_the_svg_is_valid_escaped_deterministic_and_links_where_asked():
    svg = provenance_svg(CHAIN, href=lambda n: f"/commons/{n['id']}" if n["id"] != B else None)
    assert svg == provenance_svg(CHAIN, href=lambda n: f"/commons/{n['id']}" if n["id"] != B else None)
    root = ET.fromstring(svg)  # well-formed XML: the hostile text did not break out
    text = svg.decode()
    assert "<script" not in text and "&lt;script&gt;" in text
    groups = root.findall(f"{SVG}g")
    nodes = [g for g in groups if g.get("class", "").startswith("node")]
    edges = [g for g in groups if g.get("class") == "edge"]
    assert len(nodes) == 5 and len(edges) == 5
    assert {(e.get("data-from"), e.get("data-to")) for e in edges} == {(R, A), (R, B), (A, C), (B, C), (C, D)}
    focus = [g for g in nodes if "focus" in g.get("class")]
    assert [g.get("data-id") for g in focus] == [C] and focus[0].get("data-status") == "candidate"
    links = {g.get("data-id"): g.find(f"{SVG}a") for g in nodes}
    assert links[B] is None and links[A].get("href") == f"/commons/{A}"
    shown = " ".join(t.text or "" for t in root.iter(f"{SVG}text"))
    assert A[:16] in shown and "(not held here)" in shown and "revoked" in shown


def test_an_empty_chain_is_a_clear_error():
    with pytest.raises(PlotError, match="empty chain"):
        provenance_svg({})


@pytest.mark.parametrize("value, expected", [
    ("/commons/1220ab", "/commons/1220ab"), ("/node", "/node"), ("//evil.example/", "/node"),
    ("http://evil.example/", "/node"), ("/\\evil", "/node"), ("", "/node"), (None, "/node"),
])
def test_an_action_goes_back_only_to_a_path_of_this_page(value, expected):
    assert _safe_next(value, "/node") == expected
