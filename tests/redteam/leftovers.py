"""What a grading run may leave behind: nothing. Shared by the red-team tests."""
from __future__ import annotations

import os


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def leftover_processes() -> list:
    """Processes forked from a sandbox's template process (workers and anything they
    started) other than the live template processes of this test session. Forked
    processes keep the template's command line (this checkout's worker.py), since none of
    them execs anything: that tells them from other checkouts' graders on the same
    machine, whose sandboxes may run under the same range of uids."""
    from sandbox import handle as sandbox

    zygotes = {z.process.pid for z in sandbox._zygotes.values()}
    marker = str(sandbox.WORKER).encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in zygotes:
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue  # it has just exited
        if marker in command:
            found.append((int(entry.name), command.replace(b"\0", b" ")[:120]))
    return found
