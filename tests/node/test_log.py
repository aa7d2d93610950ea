"""Structured logs: key=value text or JSON lines, libp2p's loggers included."""

from __future__ import annotations

import json
import logging

import pytest

from openmemory_node import log as log_mod


def record(name="openmemory_node.ingest", level=logging.INFO, msg="record accepted", **kv):
    rec = logging.LogRecord(name, level, __file__, 1, msg, (), None)
    rec.kv = kv
    return rec


def test_text_and_json_formats_carry_the_fields():
    text = log_mod.Formatter().format(record(id="1220ab", peer="12D3Koo", detail="two words"))
    assert text.split(" ", 3)[1:3] == ["info", "ingest"]
    assert text.endswith('record accepted id=1220ab peer=12D3Koo detail="two words"')
    obj = json.loads(log_mod.Formatter(as_json=True).format(record(id="1220ab")))
    assert obj["level"] == "info" and obj["logger"] == "ingest" and obj["id"] == "1220ab"
    assert obj["ts"].endswith("Z")


def test_setup_routes_libp2p_loggers_at_their_own_level(capsys):
    import libp2p  # noqa: F401  (it sets its loggers up at import)

    root, ours, lib = logging.getLogger(), logging.getLogger("openmemory_node"), logging.getLogger("libp2p")
    saved = (root.handlers[:], root.level, ours.level, lib.level, lib.propagate)
    try:
        log_mod.setup("info", "warning", "json")
        logging.getLogger("libp2p.network.auto_connector").info("chatty")  # pinned INFO upstream
        logging.getLogger("libp2p.pubsub").warning("heard")
        logging.getLogger("libp2p.transport.tcp.tcp").error("Failed to open TCP stream: refused")
        logging.getLogger("openmemory_node.daemon").info("ours")
        lines = [json.loads(l) for l in capsys.readouterr().err.splitlines()]
        assert [l["msg"] for l in lines] == ["heard", "ours"]
        with pytest.raises(ValueError):
            log_mod.setup("loud")
    finally:
        root.handlers[:], root.level, ours.level, lib.level, lib.propagate = saved
