"""``python -m labs``: every runnable lab, with its command."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_m_labs_lists_every_runnable_lab_with_its_command():
    out = subprocess.run([sys.executable, "-m", "labs"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runnable = sorted(p.stem for p in (ROOT / "labs").glob("*.py")
                      if p.stem != "__main__" and 'if __name__ == "__main__"' in p.read_text(encoding="utf-8"))
    listed = sorted(line.split()[2].removeprefix("labs.") for line in out.stdout.splitlines()[1:])
    assert listed == runnable
    assert "python -m labs.grid3d --nproc 4 " in out.stdout and "Lab 2: data parallelism with DDP." in out.stdout
    assert "``" not in out.stdout


def test_every_documented_lab_command_gives_the_ranks_it_needs():
    """A lab refuses to start without ``--nproc`` (``labs.launch``); a command the pages show
    without it fails for the reader who copies it. ``gpu_check`` starts its own ranks."""
    import re

    tracked = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    command = re.compile(r"python -m labs\.([a-z_0-9]+)([^`\n#]*)")
    shown = []
    for name in tracked.stdout.split():
        for lab, args in command.findall((ROOT / name).read_text(encoding="utf-8")):
            if lab != "gpu_check" and "--help" not in args:
                shown.append((name, lab, args.strip()))
    assert len(shown) >= 20, shown  # the labs' pages show them
    missing = [s for s in shown if "--nproc" not in s[2]]
    assert missing == [], missing
