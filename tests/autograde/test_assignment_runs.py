"""A class run of an assignment: the file graded is the one that holds the assignment's work
(not the untouched notebook uploaded again later, not a newer scratch file), an empty file or
one with a syntax error says so in its status, and an assignment's notebook graded without
``--assignment`` is refused in one line that names the flag."""
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograde import classrun
from instructor.student_notebook import write_student_version

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a1-ring-allreduce.md"


def autograde(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "autograde", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def stub(tmp_path_factory) -> Path:
    notebook, _ = write_student_version(MASTER, tmp_path_factory.mktemp("stub"))
    return notebook


def test_the_work_is_picked_over_a_later_untouched_notebook_and_a_newer_scratch_file(tmp_path, stub):
    student = tmp_path / "alice"
    student.mkdir()
    work = student / "my-ring.md"
    shutil.copy(MASTER, work)  # the master's solution cell is a correct answer
    later = student / "a1-ring-allreduce.ipynb"
    shutil.copy(stub, later)
    scratch = student / "scratch.py"
    scratch.write_text("import torch\nprint('trying things')\n")
    for age, path in enumerate((work, later, scratch)):  # the work is the oldest
        os.utime(path, (time.time() - 1000 + 100 * age,) * 2)
    found = classrun.Student("alice", files=[(p, p.name) for p in (work, later, scratch)])
    classrun.pick(found, classrun.wanted_for("a1"))
    assert found.chosen == work
    assert "defines the most of `ring_all_reduce`" in found.reason
    # the exercises' rule would have taken the newest file: none of them defines an exercise
    classrun.pick(found)
    assert found.chosen != work


def test_an_empty_file_and_a_syntax_error_say_so_in_the_status(tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a1.py").write_text("")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "a1.py").write_text("def ring_all_reduce(tensor:\n")
    csv = tmp_path / "grades.csv"
    done = autograde(tmp_path, "--assignment", "a1", "--csv", csv, "-q")
    assert done.returncode == 0, done.stderr
    rows = {line.split(",")[0]: line.split(",")[5] for line in csv.read_text().splitlines()[1:]}
    assert rows == {"empty": "empty (nothing to grade)", "broken": "not run (syntax error)"}


def test_an_assignment_graded_as_the_exercises_is_refused_in_one_line(stub):
    done = autograde(stub)
    assert done.returncode == 2 and done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--assignment a1" in lines[0] and "Assignment 1 (ring all-reduce)" in lines[0]


def test_a_row_names_the_walls_its_ranks_had(tmp_path):
    """The class report's isolation column says how the ranks were walled (the weakest of the
    submission's groups: namespaces, uid, rlimits), not just whether namespaces held."""
    import json

    from sandbox.multirank import ISOLATION_ORDER, namespaces_available

    (tmp_path / "ann").mkdir()
    shutil.copy(ROOT / "assignments" / "a4-tensor-parallel.md", tmp_path / "ann")  # a correct answer
    out = tmp_path / "grades.json"
    done = autograde(tmp_path, "--assignment", "a4", "--json", out, "-q")
    assert done.returncode == 0, done.stderr
    row = json.loads(out.read_text())["submissions"]["ann"]
    assert row["score"] == 10 and row["isolation"] in ISOLATION_ORDER[:3]
    if namespaces_available()[0]:
        assert row["isolation"] == "namespaces"
