"""The outcome of decoding one input, as a value that compares every entry of the record's state
with its type (``True == 1`` in Python; here they differ), or the refusal. Imported by the wire
tests that hold the decoder's answers against the general path's and against mutated inputs."""

from __future__ import annotations

from openmemory_node import wire
from openmemory_node.wire import codec


def typed(value):
    """A value with the type of every item in it."""
    kind = type(value)
    if kind is dict:
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if kind is list or kind is tuple:
        return (kind.__name__, [typed(v) for v in value])
    if kind is wire.Evidence:
        return ("Evidence", typed(vars(value)))
    return (kind.__name__, value)


def _record_state(record, spans):
    state = dict(vars(record))
    data, kept = state.pop("_spans")
    assert data is state["_cbor"] and kept is spans and type(spans) is dict
    return "record", type(record).__name__, typed(state), spans


def python_record(data: bytes):
    """codec's decoding (size, encoding, version, type, schema): a record's state (every entry of
    its __dict__, in order, with types) and spans, or the refusal (code, field, message)."""
    try:
        return _record_state(*codec._decode(data))
    except wire.WireError as exc:
        return "refused", exc.code, exc.field, str(exc)
