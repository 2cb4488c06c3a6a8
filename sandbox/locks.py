"""Where the sandboxes of one machine lease their uids: one folder for every grading run.

A class run points :data:`tempfile.tempdir` at a folder of its own (``autograde.cli``), which
it removes when it ends. The lock files that keep two runs from handing out the same uid must
not follow it there: two runs would then lease the same uid and kill each other's workers when
they clear it.
"""
from __future__ import annotations

import os
from pathlib import Path


def machine_temp_folder() -> Path:
    """The machine's temporary folder, as :func:`tempfile.gettempdir` finds it on Linux before
    anything sets :data:`tempfile.tempdir`: ``$TMPDIR``, ``$TEMP`` or ``$TMP`` where one names a
    folder, else ``/tmp``."""
    for variable in ("TMPDIR", "TEMP", "TMP"):
        value = os.environ.get(variable)
        if value and os.path.isdir(value):
            return Path(value)
    return Path("/tmp")


def lock_folder(name: str) -> Path:
    """``name`` in :func:`machine_temp_folder`, created readable by all (the locks themselves
    are files only their owner can write)."""
    folder = machine_temp_folder() / name
    folder.mkdir(mode=0o755, exist_ok=True)
    return folder
