"""Structured logs on stderr, py-libp2p's own loggers included.

Two formats: ``text`` (``2025-01-01T12:00:00.123Z info gossip accepted id=... peer=...``)
and ``json`` (one object per line). Structured fields are passed as ``extra={"kv": {...}}``
or through :func:`event`.

py-libp2p configures its ``libp2p`` logger at import (no handlers, propagation off, unless
``LIBP2P_DEBUG`` is set): :func:`setup` turns propagation back on so its records come out
here, at ``libp2p_level``.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LEVELS = ("debug", "info", "warning", "error")


def _ts(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def _fmt_value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' "=\n'):
        return json.dumps(text)
    return text


class Formatter(logging.Formatter):
    def __init__(self, as_json: bool = False):
        super().__init__()
        self.as_json = as_json

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = dict(getattr(record, "kv", None) or {})
        name = record.name
        if name.startswith("openmemory_node."):
            name = name[len("openmemory_node."):]
        message = record.getMessage()
        if self.as_json:
            obj = {"ts": _ts(record.created), "level": record.levelname.lower(), "logger": name,
                   "msg": message}
            obj.update(fields)
            if record.exc_info:
                obj["exc"] = self.formatException(record.exc_info)
            return json.dumps(obj, default=str)
        parts = [_ts(record.created), record.levelname.lower(), name, message]
        parts.extend(f"{k}={_fmt_value(v)}" for k, v in fields.items())
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class _ExpectedFailures(logging.Filter):
    """py-libp2p logs every failed dial at ERROR; a peer being down is expected (the
    reconnect loop retries with backoff and logs it at DEBUG): demote these to DEBUG. So is
    its seven-line report of a stream refused because the peer does not speak the protocol
    (sync notes such a peer once, in one line, and does not ask again for an hour)."""

    PREFIXES = ("Failed to open TCP stream",)

    def _expected(self, message: str) -> bool:
        return message.startswith(self.PREFIXES) or (
            message.startswith("Failed to open stream to peer") and "not supported" in message)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR and self._expected(str(record.msg)):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


def setup(level: str = "info", libp2p_level: str = "warning", fmt: str = "text") -> None:
    for name in (level, libp2p_level):
        if name.lower() not in LEVELS:
            raise ValueError(f"log level {name!r}: one of {', '.join(LEVELS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(Formatter(as_json=(fmt == "json")))
    handler.addFilter(_ExpectedFailures())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # stray loggers of other libraries: warnings only
    ours = logging.getLogger("openmemory_node")
    ours.setLevel(level.upper())
    lib = logging.getLogger("libp2p")
    lib.handlers.clear()
    lib.propagate = True
    lib.setLevel(libp2p_level.upper())
    # Some py-libp2p modules pin their own logger's level (auto_connector: INFO); make every
    # libp2p logger follow libp2p_level instead.
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("libp2p.") and isinstance(logger, logging.Logger):
            logger.setLevel(logging.NOTSET)
            logger.propagate = True
            logger.handlers.clear()
    for noisy in ("multiaddr", "trio", "async_service", "asyncio"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, lib.level))


def event(logger: logging.Logger, level: int, message: str, **kv: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"kv": kv})
