"""The C record decoder (openmemory_node/wire/_cbor_c.c) against its Python reference, on one input.

Imported by the wire tests; the module is imported directly (not through ``native.load``), so the
comparison runs with ``OPENMEMORY_PURE=1`` too, and a missing or stale build FAILS the tests that
use it (the test install always has gcc: ``pip install -e .`` builds it).
"""

from __future__ import annotations

import functools
import importlib

from openmemory_node import wire
from openmemory_node.wire import cbor, codec
from openmemory_protocol import native


@functools.cache
def c_module():
    return codec.configure_native(built("openmemory_node.wire._cbor_c", "the C decoder"))


def built(name: str, what: str):
    """The accelerator ``name``, imported directly; fails (not skips) when not built or stale."""
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # pragma: no cover - the test install builds it
        raise AssertionError(f"{what} is not built ({exc}): pip install -e . builds it") from None
    assert native._current(module), f"{what} is stale (its source changed): pip install -e . rebuilds it"
    return module


def typed(value):
    """A value with the type of every item in it (``True == 1`` in Python; here they differ)."""
    kind = type(value)
    if kind is dict:
        return ("dict", [(typed(k), typed(v)) for k, v in value.items()])
    if kind is list or kind is tuple:
        return (kind.__name__, [typed(v) for v in value])
    if kind is wire.Evidence:
        return ("Evidence", typed(vars(value)))
    return (kind.__name__, value)


def _fast_state(got):
    """fast_record's answer, typed (spans are offsets: bytes keys, pairs of ints, compared as they are)."""
    return None if got is None else (typed(got[0]), type(got[1]), got[1])


def _record_state(record, spans):
    state = dict(vars(record))
    data, kept = state.pop("_spans")
    assert data is state["_cbor"] and kept is spans and type(spans) is dict
    return "record", type(record).__name__, typed(state), spans


def python_record(data: bytes, loads=cbor.loads_record_python):
    """The Python path's answer (codec._decode after the size, Python only): a record's state
    (every entry of its __dict__, in order, with types) and spans, or the refusal."""
    try:
        return _record_state(*codec._decode_python(data, loads))
    except wire.WireError as exc:
        return "refused", exc.code, exc.field, str(exc)


def check(data: bytes, loads=cbor.loads_record_python, fast=...) -> str:
    """Assert that the C decoder answers as the Python one on ``data``; return the answer's kind.

    ``fast_record``: the same (value, spans), types included, or None exactly where Python's
    ``cbor._fast_record`` returns None. ``record``: a record equal in every entry of its state
    to the Python path's, or None exactly where the Python path refuses. ``loads``: the Python
    decoder's answer on ``data`` (``cbor.loads_record_python``, or its answer kept), ``fast``
    ``cbor._fast_record``'s when the caller has it."""
    c = c_module()
    if fast is ...:
        fast = cbor._fast_record(data)
    assert _fast_state(c.fast_record(data)) == _fast_state(fast), data.hex()
    if fast is not None and data[0] > 0xA0:  # the cut of the signed message: first, last and signature entries
        spans = fast[1]
        for key in {next(iter(spans)), next(reversed(spans)), *(k for k in (b"isignature",) if k in spans)}:
            start, stop = spans[key]
            assert c.without_entry(b"domain\x00", data, start, stop) == (
                b"domain\x00" + bytes((data[0] - 1,)) + data[1:start] + data[stop:])
    reference = python_record(data, loads)
    got = c.record(data)
    if got is not None:
        assert _record_state(*got) == reference, data.hex()
        return "record"
    if reference[0] == "record" and codec._decode_python(data, loads)[0].version != 1:
        # A version 2 record is not the C decoder's shape: it declines it, and the accelerated path
        # (C's fast_record or the general path, then records.py) must answer as the Python one.
        assert accelerated_record(data) == reference, data.hex()
        return "python"
    assert reference[0] == "refused", f"the C path declined a valid record: {data.hex()}"
    return "refused"


def accelerated_record(data: bytes):
    """codec._decode after the size with the accelerators on (C's record, else C's fast_record
    then records.py): a record's state and spans, or the refusal."""
    c = c_module()
    try:
        got = c.record(data)
        if got is None:
            got = codec._decode_python(data, lambda d: c.fast_record(d) or cbor.loads_with_spans(d))
        return _record_state(*got)
    except wire.WireError as exc:
        return "refused", exc.code, exc.field, str(exc)
