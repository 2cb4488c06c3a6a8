"""``python -m instructor``: the release command under the package's own name."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "instructor", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


def test_python_m_instructor_is_the_release_command():
    helped = _run("--help")
    assert helped.returncode == 0 and "{student,gradescope}" in helped.stdout and "--out" in helped.stdout
    bare = _run()
    lines = bare.stderr.strip().splitlines()
    assert bare.returncode == 2 and len(lines) == 1 and "required" in lines[0], bare.stderr
