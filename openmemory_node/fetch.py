"""``/openmemory/fetch/1.0.0``: ask a peer for records by id.

On one stream the client writes up to ``max_requests_per_stream`` request frames, each the
bytes of one record id (1 to 64 bytes), then closes its side. The server answers each
request in order with one status byte, followed for FOUND by one frame holding the record's
exact bytes:

    0x00 FOUND         + frame(record bytes)
    0x01 NOT_FOUND
    0x02 RATE_LIMITED  then the server closes the stream
    0x03 BAD_REQUEST   then the server closes the stream (an empty or oversized id frame)

Requests beyond ``max_requests_per_stream`` are not answered (the server closes). Every
request costs one token of the requester's fetch bucket (``fetch_rate``/``fetch_burst``);
a graylisted peer's stream is reset unanswered; a request frame must arrive within
``request_timeout``. At most ``max_concurrent_streams`` streams are served at once, and at
most ``max_streams_per_peer`` to one peer: a stream beyond that is reset and costs the peer
``rate_penalty`` (a client of ours never opens more than that to one peer at once), so that
one peer cannot hold every slot. The client validates every record it receives through the ingest
pipeline like any other, and charges the server for an answer that is not the record it
asked for.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable

import trio
from libp2p.custom_types import TProtocol
from libp2p.peer.id import ID

from . import wire
from .config import FetchSection
from .ingest import Ingest, Outcome
from .log import event
from .policy import BLOCKED, FETCH_BAD_REQUEST, FETCH_MISMATCH, FETCH_STREAMS, GRAYLISTED, Action, Verdict
from .streams import FrameError, close_quietly, frame, read_exact, read_frame

log = logging.getLogger(__name__)

PROTOCOL_ID = "/openmemory/fetch/1.0.0"
MAX_ID_BYTES = 64
FOUND, NOT_FOUND, RATE_LIMITED, BAD_REQUEST = 0, 1, 2, 3
STATUS_NAMES = {FOUND: "found", NOT_FOUND: "not-found", RATE_LIMITED: "rate-limited",
                BAD_REQUEST: "bad-request"}


class FetchError(Exception):
    pass


@dataclass(frozen=True)
class FetchResult:
    id: bytes
    status: str  # found, not-found, rate-limited, bad-request, invalid, mismatch, unanswered
    outcome: Outcome | None = None


class Fetch:
    protocol_id = PROTOCOL_ID

    def __init__(self, host: Any, ingest: Ingest, settings: FetchSection,
                 clock: Callable[[], float]):
        self.host = host
        self.ingest = ingest
        self.settings = settings
        self.clock = clock
        self._slots = trio.Semaphore(settings.max_concurrent_streams)
        self._serving: dict[str, int] = {}  # peer -> streams being served
        self._opening: dict[str, trio.Semaphore] = {}  # peer -> our streams to it
        self.served = 0
        self.refused_streams = 0

    async def run(self) -> None:
        return None

    # -- server ---------------------------------------------------------------------------
    async def handle(self, stream: Any, peer: str) -> None:
        policy = self.ingest.policy
        if policy.ledger.is_graylisted(peer, self.clock()) or peer in policy.blocked:
            await close_quietly(stream, reset=True)
            return
        if self._serving.get(peer, 0) >= self.settings.max_streams_per_peer:
            self.refused_streams += 1
            self.ingest.charge(peer, Verdict(
                Action.REJECT, FETCH_STREAMS, f"more than {self.settings.max_streams_per_peer} fetch streams at once",
                policy.limits.rate_penalty))
            await close_quietly(stream, reset=True)
            return
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            self.refused_streams += 1
            await close_quietly(stream, reset=True)
            return
        self._serving[peer] = self._serving.get(peer, 0) + 1
        try:
            await self._serve(stream, peer)
        except FrameError as exc:
            event(log, logging.DEBUG, "fetch stream ended", peer=peer, reason=str(exc))
        finally:
            self._slots.release()
            left = self._serving[peer] - 1
            if left:
                self._serving[peer] = left
            else:
                del self._serving[peer]
            await close_quietly(stream)

    async def _serve(self, stream: Any, peer: str) -> None:
        policy = self.ingest.policy
        for _ in range(self.settings.max_requests_per_stream):
            try:
                request = await read_frame(stream, MAX_ID_BYTES, self.settings.request_timeout)
            except FrameError as exc:
                if "exceeds maximum" in str(exc):
                    self.ingest.charge(peer, policy.bad_input(FETCH_BAD_REQUEST, str(exc)))
                    await _write(stream, bytes([BAD_REQUEST]))
                raise
            if request is None:
                return
            if not request:
                self.ingest.charge(peer, policy.bad_input(FETCH_BAD_REQUEST, "empty id"))
                await _write(stream, bytes([BAD_REQUEST]))
                return
            refused = policy.admit_fetch(peer, self.clock())
            if refused is not None:
                self.ingest.charge(peer, refused)
                if refused.code not in (GRAYLISTED, BLOCKED):
                    await _write(stream, bytes([RATE_LIMITED]))
                return
            data = self.ingest.store.data_by_idb(request)
            self.served += 1
            if data is None:
                await _write(stream, bytes([NOT_FOUND]))
            else:
                await _write(stream, bytes([FOUND]) + frame(data))

    # -- client ---------------------------------------------------------------------------
    async def fetch(self, peer: str, ids: list[bytes], timeout: float = 10.0) -> list[FetchResult]:
        """Ask ``peer`` for ``ids``; every record received goes through the ingest."""
        results: list[FetchResult] = []
        step = self.settings.max_requests_per_stream
        for start in range(0, len(ids), step):
            results.extend(await self._fetch_batch(peer, ids[start:start + step], timeout))
        return results

    async def _fetch_batch(self, peer: str, ids: list[bytes], timeout: float) -> list[FetchResult]:
        opening = self._opening.setdefault(peer, trio.Semaphore(self.settings.max_streams_per_peer))
        with trio.fail_after(timeout):
            async with opening:  # never more streams at once to a peer than it serves
                return await self._fetch_stream(peer, ids, timeout)

    async def _fetch_stream(self, peer: str, ids: list[bytes], timeout: float) -> list[FetchResult]:
        max_record = self.ingest.policy.limits.max_record_bytes
        results: list[FetchResult] = []
        try:
            stream = await self.host.new_stream(ID.from_base58(peer), [TProtocol(PROTOCOL_ID)])
        except Exception as exc:
            raise FetchError(f"cannot open a fetch stream to {peer}: {exc}") from None
        try:
            await stream.write(b"".join(frame(i) for i in ids))
            await stream.close_write()
            for wanted in ids:
                status = (await read_exact(stream, 1, timeout))[0]
                if status != FOUND:
                    results.append(FetchResult(wanted, STATUS_NAMES.get(status, "bad-status")))
                    if status in (RATE_LIMITED, BAD_REQUEST) or status not in STATUS_NAMES:
                        break
                    continue
                data = await read_frame(stream, max_record + 1, timeout)
                if data is None:
                    raise FrameError("stream ended before the record")
                results.append(self._receive(peer, wanted, data))
        except FrameError as exc:
            event(log, logging.DEBUG, "fetch failed", peer=peer, reason=str(exc))
        finally:
            await close_quietly(stream)
        answered = {r.id for r in results}
        results.extend(FetchResult(i, "unanswered") for i in ids if i not in answered)
        return results

    def _receive(self, peer: str, wanted: bytes, data: bytes) -> FetchResult:
        if wire.record_id(data) != wanted:
            self.ingest.charge(peer, self.ingest.policy.bad_input(
                FETCH_MISMATCH, "answered a fetch with another record"))
            return FetchResult(wanted, "mismatch")
        outcome = self.ingest.accept(data, peer=peer, via="fetch", solicited=True)
        if outcome.verdict.action in (Action.ACCEPT, Action.DUPLICATE):
            return FetchResult(wanted, "found", outcome)
        return FetchResult(wanted, "invalid", outcome)


async def _write(stream: Any, data: bytes) -> None:
    try:
        await stream.write(data)
    except Exception as exc:
        raise FrameError(f"write failed: {type(exc).__name__}") from None
