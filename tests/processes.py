"""Processes as ``/proc`` shows them, for the tests that check nothing outlives a grader."""
from __future__ import annotations

import os
from pathlib import Path


def _parents() -> dict:
    """Parent pid -> the living (not zombie) processes it has."""
    children: dict = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def children(pid: int) -> list:
    """Living processes whose parent is ``pid``."""
    return _parents().get(pid, [])


def descendants(pid: int) -> set:
    """Living processes below ``pid``."""
    parents, found, todo = _parents(), set(), [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
