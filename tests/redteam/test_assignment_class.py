"""A class of mixed assignment submissions graded with ``--jobs 2`` gets the same rows as with
``--jobs 1`` (issue 31): grading threads share no random generator and no group of ranks
reaches another's. Assignment 5 is the one whose grader builds its model from torch's global
generator (every correct student lost 3 points with ``--jobs 2`` before)."""
from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a5-pipeline-1f1b.md"
GPIPE = ("    warmup = min(p - stage - 1, m)\n", "    warmup = m\n")
UNSCALED = ("                out = loss_fn(out, targets[i]) / m", "                out = loss_fn(out, targets[i])")


def planted(old: str, new: str) -> str:
    text = MASTER.read_text(encoding="utf-8")
    assert text.count(old) == 1
    return text.replace(old, new)


def rows(folder: Path, jobs: int, out: Path) -> tuple[dict, dict]:
    """The CSV's rows (times left out) and, per student, the feedback of each part it failed."""
    done = subprocess.run([sys.executable, "-m", "autograde", str(folder), "--assignment", "a5", "--jobs", str(jobs),
                           "--csv", str(out), "--json", str(out.with_suffix(".json")), "-q"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-2000:]
    with out.open(encoding="utf-8") as f:
        table = {r["student_id"]: {k: v for k, v in r.items() if "second" not in k and "time" not in k}
                 for r in csv.DictReader(f)}
    graded = json.loads(out.with_suffix(".json").read_text(encoding="utf-8"))["submissions"]
    failed = {s: [f"{t['name']}: {t['feedback']}" for e in g["exercises"] for t in e["tests"] if not t["passed"]]
              for s, g in graded.items()}
    return table, failed


def test_a_class_graded_with_two_jobs_gets_the_rows_it_gets_with_one(tmp_path):
    from instructor.student_notebook import write_student_version

    folder = tmp_path / "class"
    for student, text in (("ada", MASTER.read_text(encoding="utf-8")), ("bob", planted(*GPIPE)),
                          ("cy", planted(*UNSCALED)), ("eve", MASTER.read_text(encoding="utf-8"))):
        (folder / student).mkdir(parents=True)
        (folder / student / "a5-pipeline-1f1b.md").write_text(text, encoding="utf-8")
    stub, _ = write_student_version(MASTER, tmp_path / "stub")
    (folder / "dee").mkdir()
    (folder / "dee" / "a5-pipeline-1f1b.ipynb").write_bytes(stub.read_bytes())
    one, why_one = rows(folder, 1, tmp_path / "one.csv")
    two, why_two = rows(folder, 2, tmp_path / "two.csv")
    differ = sorted(s for s in one if one[s] != two.get(s))
    assert two == one, {s: {"--jobs 1": why_one.get(s), "--jobs 2": why_two.get(s)} for s in differ}
    assert {s: float(r["score"]) for s, r in one.items()} == {"ada": 10, "eve": 10, "bob": 7, "cy": 7, "dee": 0}
