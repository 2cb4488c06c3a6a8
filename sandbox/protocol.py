"""The grader's side of the pipe to a sandbox worker: frames, strictly parsed.

A frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON. Everything
that arrives is written by a process that runs student code, so the parser trusts nothing:

* sizes are bounded (one frame, and everything one worker may send in its lifetime);
* JSON's non-standard ``NaN``/``Infinity`` tokens, integers that do not fit a float and
  floats that overflow to infinity are refused; a non-finite float is accepted only in its
  explicit form ``{"$float": "nan"|"inf"|"-inf"}``;
* duplicate keys are refused (no "last one wins" games);
* a returned value must be *plain*: a float, a string, or a list of those, nested at most
  :data:`MAX_DEPTH` deep (the same shapes :func:`sandbox.plain.to_plain` produces).

The worker's encoder lives in :mod:`sandbox.confined.frames` (``tag``/``write_frame``),
which must not import this package; the sandbox's tests
(``test_worker_encoding_round_trips_through_the_strict_decoder``) check that the two agree.
"""
from __future__ import annotations

import json
import math
import os
import select
import struct
import time

HEADER = struct.Struct(">I")
MAX_FRAME = 8 * 1024 * 1024
MAX_TOTAL = 64 * 1024 * 1024
MAX_DEPTH = 10
MAX_ITEMS = 100_000
MAX_STRING = 10_000
NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class ProtocolError(Exception):
    """The worker sent something that is not a well-formed, plain frame."""


class FrameTooLarge(ValueError):
    """A request the grader wanted to send is larger than a frame may be."""


class WorkerTimeout(Exception):
    """No complete frame arrived before the deadline."""


class WorkerGone(Exception):
    """The worker closed its end: it exited or was killed."""


# ----------------------------------------------------------------------------- encoding

def _tag(value):
    if type(value).__module__ == "numpy":  # arrays and scalars, without importing numpy here
        value = value.tolist()
    if type(value) is float and not math.isfinite(value):
        return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if isinstance(value, (list, tuple)):
        return [_tag(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _tag(v) for k, v in value.items()}
    return value


def encode(obj) -> bytes:
    """One frame for the worker (the grader's own data: arguments and instructions)."""
    data = json.dumps(_tag(obj), allow_nan=False, separators=(",", ":")).encode()
    if len(data) > MAX_FRAME:
        raise FrameTooLarge(f"it is {len(data) / 1e6:.1f} MB once encoded, more than the "
                            f"{MAX_FRAME / 1e6:.0f} MB the grader sends to the sandbox")
    return HEADER.pack(len(data)) + data


# ----------------------------------------------------------------------------- decoding

def _refuse_constant(token: str):
    raise ProtocolError(f"non-standard JSON literal {token}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ProtocolError(f"float literal {text[:40]} overflows")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 15:
        raise ProtocolError("integer literal too long")
    return int(text)


def _pairs(pairs):
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ProtocolError("duplicate key in a JSON object")
    obj = dict(pairs)
    if "$float" in obj:
        if len(obj) != 1 or obj["$float"] not in NON_FINITE:
            raise ProtocolError("malformed non-finite float")
        return _NonFinite(NON_FINITE[obj["$float"]])
    return obj


class _NonFinite(float):
    """Marks a non-finite float decoded from its explicit form until :func:`plain` unwraps
    it; a bare dict can never pass for a number."""


def decode(payload: bytes) -> dict:
    """Parse one frame's payload; the top level must be a JSON object."""
    try:
        text = payload.decode("utf-8")
        obj = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float,
                         parse_int=_bounded_int, object_pairs_hook=_pairs)
    except ProtocolError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"malformed frame: {type(exc).__name__}") from None
    if type(obj) is not dict:
        raise ProtocolError("a frame must be a JSON object")
    return obj


def plain(value, _depth: int = 0, _budget: list | None = None):
    """Validate a decoded answer and return it as plain data (float, str, nested lists).

    Integers, booleans, null and objects are refused: the worker's honest encoder never
    writes them for an answer (every number is sent as a float).
    """
    budget = [MAX_ITEMS] if _budget is None else _budget
    if _depth > MAX_DEPTH:
        raise ProtocolError("answer nested too deeply")
    kind = type(value)
    if kind is _NonFinite:
        return float(value)
    if kind is float:
        return value
    if kind is str:
        if len(value) > MAX_STRING:
            raise ProtocolError("answer string too long")
        return value
    if kind is list:
        budget[0] -= len(value)
        if budget[0] < 0:
            raise ProtocolError("answer has too many items")
        return [plain(v, _depth + 1, budget) for v in value]
    raise ProtocolError(f"answer contains a JSON {kind.__name__}, not a number")


def text(value, limit: int = 500) -> str:
    """A string field for display (a message from student code): bounded and printable."""
    if type(value) is not str:
        return ""
    value = "".join(c if c.isprintable() else " " for c in value[: limit + 1])
    return value if len(value) <= limit else value[:limit] + "..."


# ----------------------------------------------------------------------------- reading

class FrameReader:
    """Reads frames from a non-blocking pipe with a deadline, counting every byte."""

    def __init__(self, fd: int):
        self.fd = fd
        os.set_blocking(fd, False)
        self.buffer = bytearray()
        self.total = 0
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)

    def _frame_ready(self):
        if len(self.buffer) < HEADER.size:
            return None
        (size,) = HEADER.unpack_from(self.buffer)
        if size > MAX_FRAME:
            raise ProtocolError(f"frame of {size} bytes is larger than {MAX_FRAME}")
        if len(self.buffer) < HEADER.size + size:
            return None
        payload = bytes(self.buffer[HEADER.size:HEADER.size + size])
        del self.buffer[:HEADER.size + size]
        return payload

    def read(self, deadline: float) -> dict:
        """The next frame, or WorkerTimeout once ``deadline`` has passed with none. What the
        pipe already holds is read even past the deadline: a reply that came in time counts,
        however late this thread got to run (another grading thread holding the GIL)."""
        while True:
            payload = self._frame_ready()
            if payload is not None:
                return decode(payload)
            remaining = deadline - time.monotonic()
            if not self.poller.poll(max(0, int(remaining * 1000) + 1) if remaining > 0 else 0):
                if remaining <= 0:
                    raise WorkerTimeout
                continue
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                raise WorkerGone
            self.total += len(chunk)
            if self.total > MAX_TOTAL:
                raise ProtocolError(f"the worker sent more than {MAX_TOTAL} bytes")
            self.buffer += chunk


def write_all(fd: int, data: bytes, deadline: float) -> None:
    """Write a request without ever blocking past the deadline (a worker that stops
    reading must not hang the grader)."""
    os.set_blocking(fd, False)
    poller = select.poll()
    poller.register(fd, select.POLLOUT | select.POLLERR)
    view = memoryview(data)
    while view:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise WorkerTimeout
        poller.poll(max(1, int(remaining * 1000) + 1))
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            continue
        except (BrokenPipeError, OSError):
            raise WorkerGone from None
        view = view[written:]
