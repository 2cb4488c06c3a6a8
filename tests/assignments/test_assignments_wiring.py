"""Everything the exercises have, the assignments have: a Gradescope bundle that grades an
assignment (run as Gradescope runs it, in a temporary folder), the class run's CSV and class
report with an assignment's column and named mistakes, and a student release whose modules
hold no assignment's answer."""
from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import pytest

from assignments import ASSIGNMENTS, a1_ring
from instructor import release
from instructor.student_notebook import BEGIN, END, write_student_version

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / ASSIGNMENTS["a1"][1]
#: Gradescope's results.json ("Specifications", gradescope-autograders.readthedocs.io).
VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    out = tmp_path_factory.mktemp("gradescope-a1")
    return release.build_gradescope(out, verify=False, assignment="a1")


def check_schema(results: dict) -> None:
    assert {"score", "execution_time", "output", "tests"} <= set(results)
    for test in results["tests"]:
        assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
        assert test["visibility"] in VISIBILITIES
        assert test["status"] == ("passed" if test["score"] == test["max_score"] else "failed")
    assert results["score"] == pytest.approx(sum(t["score"] for t in results["tests"]), abs=1e-9)


def test_the_bundle_installs_torchs_cpu_build_and_names_the_assignment(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        setup = z.read("setup.sh").decode()
        pin = z.read("torch-version").decode().strip()
        assert z.read("assignment").decode().strip() == "a1"
        requirements = z.read("requirements-autograder.txt").decode()
    from importlib.metadata import version

    assert pin == version("torch").split("+")[0]
    assert "--index-url https://download.pytorch.org/whl/cpu" in setup and "torch==$(cat torch-version)" in setup
    assert "torch==" not in requirements and "numpy==" in requirements  # torch only from the CPU index
    assert {"assignments/a1_ring.py", "assignments/common.py", "labs/collectives.py"} <= names
    assert not any(n.endswith((".md", ".ipynb")) for n in names)  # no master notebook


def test_the_bundle_grades_the_reference_full_and_the_stub_zero_as_gradescope_would(bundle, tmp_path):
    good = release.run_bundle(bundle, a1_ring.reference_submission(tmp_path))
    check_schema(good)
    assert len(good["tests"]) == 5
    assert good["score"] == pytest.approx(10.0, abs=1e-9)
    stub, _ = write_student_version(MASTER, tmp_path / "stub")
    bad = release.run_bundle(bundle, stub)
    check_schema(bad)
    assert bad["score"] == 0 and len(bad["tests"]) == 5
    assert any("not implemented yet" in t["output"] for t in bad["tests"])


def test_a_class_of_assignment_submissions_gets_rows_a_column_and_named_mistakes(tmp_path):
    from autograde.cli import main

    source = a1_ring.reference_source()
    wrong_mean = source.replace('    if op == "mean":\n        tensor.div_(n)\n', "")
    assert wrong_mean != source
    folder = tmp_path / "class"
    for student, text in (("ada", source), ("bob", wrong_mean)):
        (folder / student).mkdir(parents=True)
        (folder / student / "ring.py").write_text(text, encoding="utf-8")
    (folder / "cy").mkdir()  # in the class, sent nothing
    grades, page = tmp_path / "grades.csv", tmp_path / "class.html"
    code = main([str(folder), "--assignment", "a1", "--jobs", "2", "--csv", str(grades),
                 "--class-report", str(page), "-q"])
    assert code == 0
    rows = {r["student_id"]: r for r in csv.DictReader(grades.open(encoding="utf-8"))}
    assert set(rows) == {"ada", "bob", "cy"}
    assert float(rows["ada"]["score"]) == pytest.approx(10.0) == float(rows["ada"]["a1"])
    assert float(rows["bob"]["score"]) <= 8.0 + 1e-9
    assert float(rows["bob"]["a1"]) == pytest.approx(float(rows["bob"]["score"]))
    assert rows["cy"]["status"] == "missing" and float(rows["cy"]["max_score"]) == pytest.approx(10.0)
    html = page.read_text(encoding="utf-8")
    assert "Assignment 1: ring all-reduce" in html
    assert "mean not divided by the world size</strong>, made by 1 of 3" in html


def test_an_unknown_assignment_is_one_clear_error(capsys):
    from autograde.cli import main

    with pytest.raises(SystemExit) as exit_:
        main([str(MASTER), "--assignment", "a9"])
    assert exit_.value.code == 2
    assert "no assignment 'a9'" in capsys.readouterr().err


def test_the_release_strips_the_labs_ring_which_is_assignment_1s_answer(tmp_path):
    """Lab 1's ring is A1's reference: the release's labs/collectives.py keeps its signature
    and docstring, and raises NotImplementedError where the answer was."""
    import ast

    target = tmp_path / "labs" / "collectives.py"
    target.parent.mkdir()
    text = (ROOT / "labs" / "collectives.py").read_text(encoding="utf-8")
    target.write_text(text, encoding="utf-8")
    assert release.strip_marked_modules(tmp_path) == ["labs/collectives.py"]
    stripped = target.read_text(encoding="utf-8")
    answer = text.split(BEGIN, 1)[1].split(END, 1)[0]
    for line in answer.splitlines():
        if len(line.strip()) > 20:
            assert line.strip() not in stripped, line
    function = next(n for n in ast.parse(stripped).body
                    if isinstance(n, ast.FunctionDef) and n.name == "ring_all_reduce")
    assert any(isinstance(s, ast.Raise) and "NotImplementedError" in ast.dump(s) for s in function.body)
    assert BEGIN not in stripped and END not in stripped


def test_every_registered_grader_keeps_the_contract_and_a_broken_one_is_named():
    import types

    import assignments
    from assignments.common import grader

    for assignment in assignments.ASSIGNMENTS:
        assignments.check_grader(grader(assignment))  # raises if not
    broken = types.ModuleType("assignments.a9_broken")
    broken.NAME, broken.FUNCTION, broken.CLASS = "Assignment 9", "f", "C"
    broken.TITLES, broken.POINTS = {"one": "One"}, {"two": 5}
    with pytest.raises(TypeError) as caught:
        assignments.check_grader(broken)
    message = str(caught.value)
    assert message.startswith("assignments.a9_broken is not an assignment grader")
    for lacking in ("TITLES and POINTS", "exactly one of FUNCTION", "grade_file()", "self_check()"):
        assert lacking in message
    assert "\n" not in message
