"""The layers run one way (COURSE_DESIGN.md, "Layers, one way down"), checked by import-linter
with the contract in pyproject.toml: on the tree as it is, and on copies with an upward
import or a cycle planted, which the contract must refuse (a contract that cannot fail would
guard nothing)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("solutions", "coursefig", "labs", "sandbox", "grading", "assignments", "autograde",
            "instructor", "tools", "tests")


def lint_imports(tree: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` run on ``tree`` (its pyproject.toml, its packages first on the path)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The course's packages (Python files only) and its pyproject.toml, in a fresh folder."""
    if not Path(sys.executable).with_name("lint-imports").exists():
        pytest.skip("import-linter is not installed (requirements.txt pins it)")
    copy = tmp_path_factory.mktemp("layers")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, copy / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.ipynb", "*.json", "*.md",
                                                      "submissions", "assets", "reference"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    return copy


def test_the_tree_keeps_its_layers(tree):
    done = lint_imports(tree)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


@pytest.mark.parametrize("importer, imported", [
    ("solutions/scaling.py", "labs.launch"),          # the formulas would need the labs
    ("sandbox/plain.py", "grading"),                  # the engine would know the exercises
    ("grading/core.py", "autograde.reports"),         # a grader would need its front end
    ("autograde/cli.py", "instructor.release"),       # a front end would need the release tool
    ("labs/report.py", "tests.site_visits"),          # product code would import tests/
    ("grading/report.py", "assignments.common"),      # the two graders would import each other
])
def test_an_import_that_runs_the_wrong_way_fails_the_contract(tree, importer, imported):
    path = tree / importer
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original + f"\n\ndef _planted():\n    import {imported}  # noqa\n", encoding="utf-8")
        done = lint_imports(tree)
    finally:
        path.write_text(original, encoding="utf-8")
    assert done.returncode != 0, f"{importer} importing {imported} was not refused"
    assert "BROKEN" in done.stdout


@pytest.mark.parametrize("runtime", ["confined/frames.py", "ranks/rank.py"])
def test_the_confined_runtimes_cannot_import_the_engine(tree, runtime):
    path = tree / "sandbox" / runtime
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original + "\n\nfrom sandbox import protocol  # noqa\n", encoding="utf-8")
        done = lint_imports(tree)
    finally:
        path.write_text(original, encoding="utf-8")
    assert done.returncode != 0 and "BROKEN" in done.stdout
