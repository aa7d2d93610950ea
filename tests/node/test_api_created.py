"""``POST /v1/lessons`` with a caller-fixed ``created``: the same fields give the same record
(a retry is a duplicate, not a second record); a time ahead of the clock is refused."""

from __future__ import annotations

import time

import pytest

from openmemory_node.client import ApiError

TEXT = "`git push` failed: \"fatal: The current branch <branch> has no upstream branch.\"."  # a claim (v2)
PROVENANCE = "ab" * 32


@pytest.mark.slow
def test_a_fixed_created_makes_a_retry_a_duplicate(cluster):
    node = cluster.node("a").init().start()
    created = int(time.time()) - 3600
    body = {"text": TEXT, "kind": "error", "strength": 1.5, "provenance": PROVENANCE, "created": created}
    client = node.client()
    first = client.post("/v1/lessons", body)
    assert first["duplicate"] is False and first["created"] == created
    again = client.post("/v1/lessons", body)
    assert again["duplicate"] is True and again["id"] == first["id"]
    later = client.post("/v1/lessons", {**body, "created": created + 1})
    assert later["id"] != first["id"]
    lessons = [r for r in node.records().values() if r["type"] == "lesson"]
    assert len(lessons) == 2
    for bad, status, code in ((int(time.time()) + 3600, 422, "clock-skew"), ("1795992156", 400, "bad-request"),
                              (True, 400, "bad-request"), (-1, 400, "bad-request"), (1000, 400, "bad-request"),
                              (2**53, 400, "bad-request")):  # out of the wire's range: 400, never clamped
        with pytest.raises(ApiError) as err:
            client.post("/v1/lessons", {**body, "created": bad})
        assert err.value.status == status, (bad, err.value)
        if code:
            assert err.value.code == code
    assert len([r for r in node.records().values() if r["type"] == "lesson"]) == 2
