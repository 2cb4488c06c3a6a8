"""Frames between the grader and the sandbox's processes (the sandbox's side).

Requests and replies on a worker's pipes are length-prefixed JSON frames
(:func:`read_frame`, :func:`write_frame`); control messages between the grader and the
zygote travel on a Unix socket, with file descriptors attached (:func:`send_message`,
:func:`recv_message`). The grader parses what a worker sends with the strict decoder of
:mod:`sandbox.protocol`, never with this module.
"""
from __future__ import annotations

import json
import math
import os
import socket
import struct

HEADER = struct.Struct(">I")
MAX_REQUEST = 16 * 1024 * 1024


def read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int):
    (size,) = HEADER.unpack(read_exact(fd, HEADER.size))
    if size > MAX_REQUEST:
        raise EOFError
    return json.loads(read_exact(fd, size), object_hook=untag)


def write_frame(fd: int, obj) -> None:
    data = json.dumps(tag(obj), allow_nan=False, separators=(",", ":")).encode()
    data = HEADER.pack(len(data)) + data
    while data:
        data = data[os.write(fd, data):]


def send_message(sock, obj, fds=()) -> None:
    """One control message (grader <-> zygote): a length-prefixed JSON frame on a Unix
    stream socket, with file descriptors attached to its first byte."""
    data = json.dumps(obj).encode()
    data = HEADER.pack(len(data)) + data
    sent = socket.send_fds(sock, [data], list(fds)) if fds else sock.send(data)
    sock.sendall(data[sent:])


def recv_message(sock, max_fds: int = 0):
    """(object, file descriptors); (None, []) when the other end has closed."""
    head, fds = b"", []
    while len(head) < HEADER.size:
        if max_fds and not fds:
            chunk, fds, _, _ = socket.recv_fds(sock, HEADER.size - len(head), max_fds)
        else:
            chunk = sock.recv(HEADER.size - len(head))
        if not chunk:
            return None, fds
        head += chunk
    (size,) = HEADER.unpack(head)
    if size > MAX_REQUEST:
        return None, fds
    data = b""
    while len(data) < size:
        chunk = sock.recv(min(size - len(data), 1 << 20))
        if not chunk:
            return None, fds
        data += chunk
    return json.loads(data), list(fds)


def tag(value):
    """Non-finite floats travel as ``{"$float": "nan"|"inf"|"-inf"}``: JSON has no literal
    for them, and the grader refuses the non-standard ``NaN``/``Infinity`` tokens."""
    if type(value) is float and not math.isfinite(value):
        return {"$float": "nan" if value != value else ("inf" if value > 0 else "-inf")}
    if type(value) is list:
        return [tag(v) for v in value]
    if type(value) is dict:
        return {k: tag(v) for k, v in value.items()}
    return value


def untag(obj):
    if set(obj) == {"$float"}:
        return float(obj["$float"])
    return obj


def greet(control_fd: int, prepare) -> tuple:
    """A template process's start, on its socket to the grader: read the configuration, run
    ``prepare(config) -> (mode, prepared)`` (the walls, the imports; an exception is sent as
    ``fatal`` and ends the process) and say ``ready`` with the mode reached. The template
    dies with the grader while it prepares (:func:`.kernel.die_with_starter`), and from just
    before its greeting only when its socket closes. Returns ``(socket, mode, prepared)``."""
    from .kernel import die_with_starter, outlive_starter

    control = socket.socket(fileno=control_fd)
    die_with_starter(control)
    cfg, _ = recv_message(control)
    if cfg is None:
        os._exit(0)
    try:
        mode, prepared = prepare(cfg)
    except Exception as exc:  # noqa: BLE001 - whatever stopped the walls, said in one line
        send_message(control, {"op": "fatal", "message": f"{type(exc).__name__}: {exc}"[:500]})
        os._exit(3)
    outlive_starter(control)  # before the word: the grading thread that waits for it may then end
    send_message(control, {"op": "ready", "isolation": mode})
    return control, mode, prepared
