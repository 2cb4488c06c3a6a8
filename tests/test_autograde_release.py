"""`make student-release` and `make gradescope`: what goes out, what stays in, and that both
work where the course's own folder is out of reach."""
from __future__ import annotations

import ast
import json
import os
import zipfile
from pathlib import Path

import pytest

from autograde import release
from autograde.gradescope import pick_submission

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    base = tmp_path_factory.mktemp("release")
    here = os.getcwd()
    os.chdir(base)
    try:  # a relative --out, as the Makefile passes it
        assert release.main(["student", "--out", "student"]) == 0  # verifies itself
    finally:
        os.chdir(here)
    return base / "student"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return release.build_gradescope(tmp_path_factory.mktemp("gradescope"), verify=False)


def test_student_release_leaves_out_solutions_hidden_tests_and_instructor_material(student):
    files = {p.relative_to(student).as_posix() for p in student.rglob("*") if p.is_file()}
    assert not [f for f in files if f.startswith(("solutions/", "tests/redteam/", "benchmarks/"))]
    assert "book/instructors.md" not in files
    assert "autograde/release.py" not in files and "tools/student_notebook.py" not in files
    assert {f for f in files if f.startswith("tests/")} == \
        {f"tests/grading/{name}" for name in __import__("tests.grading").grading.STUDENT_RELEASE_FILES}
    for name in ("ex1.py", "ex2.py", "ex3.py", "ex4.py"):
        text = (student / "tests" / "grading" / name).read_text()
        assert "hidden=True" not in text and "rng.uniform" not in text and "rng.randint" not in text
        ast.parse(text)


def test_student_release_has_the_student_notebook_not_the_solutions(student):
    master = (ROOT / "chapters" / "09-exercises.md").read_text()
    for suffix in (".md", ".ipynb"):
        text = (student / "chapters" / ("09-exercises" + suffix)).read_text()
        assert "### BEGIN SOLUTION" not in text
        assert "NotImplementedError" in text
    # the body of the first solution region of the master is gone from the release
    solution = master.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0].strip()
    assert solution and solution not in (student / "chapters" / "09-exercises.md").read_text()


def test_student_release_verification_catches_a_broken_release(student, tmp_path):
    """The check that `build_student` runs fails when the public tests cannot run."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(student, broken)
    (broken / "tests" / "grading" / "public_expected.json").write_text("{}")
    with pytest.raises(SystemExit):
        release.verify_student(broken)


def test_gradescope_bundle_layout(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
        requirements = z.read("requirements-autograder.txt").decode().split()
        ex1 = z.read("tests/grading/ex1.py").decode()
    assert {"setup.sh", "run_autograder", "requirements-autograder.txt"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert {"autograde/worker.py", "autograde/gradescope.py", "autograde/plain.py",
            "solutions/__init__.py", "tests/grading/public_expected.json"} <= names
    assert "hidden=True" in ex1  # the real checks, hidden ones included
    assert not [n for n in names if n.startswith("tests/redteam") or "/test_" in n]
    assert all("==" in line for line in requirements)
    assert any(line.startswith("numpy==") for line in requirements)


def test_gradescope_bundle_grades_the_reference_with_full_marks(bundle):
    results = release.run_bundle(bundle, release.REFERENCE)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) == 100
    visibilities = {t["visibility"] for t in results["tests"] if "hidden" in t["name"]}
    assert visibilities == {"after_published"}
    assert {t["visibility"] for t in results["tests"] if "hidden" not in t["name"]} == {"visible"}
    assert "seed" in results["extra_data"]


def test_gradescope_bundle_grades_a_hostile_notebook_exactly(bundle):
    results = release.run_bundle(bundle, ROOT / "tests" / "redteam" / "submissions" /
                                 "os_exit_cell.ipynb")
    assert results["score"] == 70  # exercise 3 (30 points) was replaced by os._exit(0)


def test_gradescope_picks_the_exercises_notebook(tmp_path):
    (tmp_path / "notes.py").write_text("x = 1\n")
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "09-exercises.ipynb").write_text("{}")
    (tmp_path / "other.ipynb").write_text("{}")
    chosen, note = pick_submission(tmp_path)
    assert chosen == tmp_path / "sub" / "09-exercises.ipynb"
    assert "notes.py" in note and "conftest.py" not in note
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pick_submission(empty) == (None, "")


def test_gradescope_without_a_submission_writes_a_zero_with_an_explanation(tmp_path):
    from autograde.gradescope import main

    (tmp_path / "in").mkdir()
    assert main([str(tmp_path / "in"), str(tmp_path / "results.json")]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0 and "09-exercises.ipynb" in results["output"]
