"""The formatting-preserving JSON editor: add then remove is the identity, on any layout."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openmemory_local.integrations import jsonedit

SERVER = {"type": "stdio", "command": "/opt/om/bin/openmemory", "args": ["mcp", "--home", "/d"], "env": {}}
HOOK = {"hooks": [{"type": "command", "command": "python -P -m x --home '/a b'", "timeout": 15}]}
TARGETS = [(["mcpServers"], "openmemory", SERVER), (["hooks", "SessionEnd"], None, HOOK)]

scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8)
keys = st.sampled_from(["mcpServers", "hooks", "SessionEnd", "model", "projects", "a", "é", "openmemory2"])
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=3),
    max_leaves=10,
)


def _layout(value, indent, separators, crlf: bool, ascii_: bool, trailing: str) -> str:
    text = json.dumps(value, indent=indent, separators=separators, ensure_ascii=ascii_)
    if crlf:
        text = text.replace("\n", "\r\n")
    return text + trailing


def _blocked(document: dict, path: list[str], key: str | None) -> bool:
    """Whether a key of ``path`` holds something an item cannot be added to (the oracle)."""
    container = document
    for depth, name in enumerate(path):
        if name not in container:
            return False
        container = container[name]
        last = depth == len(path) - 1
        wanted = dict if (not last or key is not None) else list
        if not isinstance(container, wanted):
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    document=st.dictionaries(keys, values, max_size=5),
    indent=st.sampled_from([None, 2, 4, "\t"]),
    separators=st.sampled_from([(",", ": "), (", ", ": "), (",", ":"), (" , ", " : ")]),
    crlf=st.booleans(),
    ascii_=st.booleans(),
    trailing=st.sampled_from(["", "\n", "\r\n", "  \n\n"]),
    target=st.sampled_from(TARGETS),
)
def test_add_then_remove_gives_back_the_exact_text(document, indent, separators, crlf, ascii_, trailing, target):
    path, key, value = target
    text = _layout(document, indent, separators, crlf, ascii_, trailing)
    try:
        new_text, addition = jsonedit.add_item(jsonedit.parse(text), path, key, value)
    except jsonedit.MalformedJSON:
        assert _blocked(document, path, key)  # a scalar or the wrong container is in the way
        return
    assert not _blocked(document, path, key)
    added = json.loads(new_text)
    holder = added
    for name in path:
        holder = holder[name]
    if key is not None:
        assert holder[key] == value
    else:
        assert holder[-1] == value
    # nothing else changed, semantically
    expected = json.loads(text)
    cursor = expected
    for name in path:
        cursor = cursor.setdefault(name, {} if (name != path[-1] or key is not None) else [])
    if key is not None:
        cursor[key] = value
    else:
        cursor.append(value)
    assert added == expected
    # the record survives a trip through the manifest, and removal is the exact inverse
    record = jsonedit.Addition.from_json(json.loads(json.dumps(addition.to_json())))
    restored, status = jsonedit.remove_item(jsonedit.parse(new_text), record)
    assert status == "removed"
    assert restored == text


def test_removal_keeps_what_others_added_before_and_after_our_item():
    text = '{\n  "mcpServers": {\n    "a": {}\n  }\n}\n'
    new_text, addition = jsonedit.add_item(jsonedit.parse(text), ["mcpServers"], "openmemory", SERVER)
    edited = new_text.replace('"a": {}', '"a": {},\n    "b": 1').replace("\n  }\n}", ',\n    "c": 2\n  }\n}')
    restored, status = jsonedit.remove_item(jsonedit.parse(edited), addition)
    assert status == "removed"
    assert json.loads(restored) == {"mcpServers": {"a": {}, "b": 1, "c": 2}}
    assert restored == '{\n  "mcpServers": {\n    "a": {},\n    "b": 1,\n    "c": 2\n  }\n}\n'


def test_created_containers_stay_when_others_filled_them():
    text = '{"model": "opus"}'
    new_text, addition = jsonedit.add_item(jsonedit.parse(text), ["hooks", "SessionEnd"], None, HOOK)
    data = json.loads(new_text)
    data["hooks"]["Stop"] = [{"hooks": []}]
    restored, status = jsonedit.remove_item(jsonedit.parse(json.dumps(data)), addition)
    assert status == "removed"
    assert json.loads(restored) == {"model": "opus", "hooks": {"Stop": [{"hooks": []}]}}


def test_duplicate_keys_follow_json_parse_last_one_wins():
    text = '{"mcpServers": {"x": 1}, "mcpServers": {"y": 2}}'
    new_text, addition = jsonedit.add_item(jsonedit.parse(text), ["mcpServers"], "openmemory", SERVER)
    assert json.loads(new_text)["mcpServers"] == {"y": 2, "openmemory": SERVER}
    assert jsonedit.remove_item(jsonedit.parse(new_text), addition) == (text, "removed")


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("[]", "top level"),
        ('{"a": 1,}', "line 1"),
        ('{"a": }', "not valid JSON"),
        ("{" * 100000, "JSON"),
    ],
)
def test_malformed_documents_are_rejected_with_a_clear_message(text, message):
    with pytest.raises(jsonedit.MalformedJSON, match=message):
        jsonedit.parse(text)


def test_a_big_config_is_edited_quickly_and_exactly():
    projects = {f"/home/u/p{i}": {"history": ["x" * 200] * 20, "mcpServers": {}} for i in range(2000)}
    text = json.dumps({"numStartups": 1, "projects": projects, "mcpServers": {}}, indent=2)
    assert len(text) > 8_000_000
    new_text, addition = jsonedit.add_item(jsonedit.parse(text), ["mcpServers"], "openmemory", SERVER)
    assert new_text[: len(text) - 20] == text[: len(text) - 20]
    assert jsonedit.remove_item(jsonedit.parse(new_text), addition) == (text, "removed")
