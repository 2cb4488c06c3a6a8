"""tools/mutation.py: its list of mutations still fits the code, and planting is exact.

The mutation run itself is slow (minutes) and lives in `make bench`; these checks are not.
When one fails after a change to solutions/ or labs/, update the entry it names so that it
plants the same bug in the new code."""
from __future__ import annotations

import pytest

from tools import mutation
from tools.mutation import MUTATIONS, ROOT, Mutation, plant, run_one


@pytest.mark.parametrize("m", MUTATIONS, ids=lambda m: m.id)
def test_every_mutation_plants_once_and_changes_the_code(m):
    text = (ROOT / m.file).read_text(encoding="utf-8")
    mutated = plant(text, m)  # LookupError names the problem: text not found, or ambiguous
    assert mutated != text and m.old != m.new
    assert m.file.startswith(("solutions/", "labs/"))
    compile(mutated, m.file, "exec")  # a bug, not a syntax error
    for arg in m.tests:
        if arg.startswith("tests/"):
            assert (ROOT / arg.split("::")[0]).exists(), arg


def test_mutation_ids_are_unique():
    ids = [m.id for m in MUTATIONS]
    assert len(ids) == len(set(ids))


def test_plant_reports_missing_and_ambiguous_text():
    m = Mutation("x", "solutions/x.py", "a = 1", "a = 2", ("tests",), "x")
    assert plant("b = 0\na = 1\n", m) == "b = 0\na = 2\n"
    with pytest.raises(LookupError, match="OLD TEXT NOT FOUND"):
        plant("a = 3\n", m)
    with pytest.raises(LookupError, match=r"AMBIGUOUS \(2 matches\)"):
        plant("a = 1\na = 1\n", m)


def _tree(tmp_path):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "tests").mkdir()
    code = "def double(x):\n    return 2 * x\n\n\ndef unused():\n    return 1\n"
    (tmp_path / "solutions" / "calc.py").write_text(code)
    (tmp_path / "solutions" / "__init__.py").write_text("")  # shadows the course's own package
    (tmp_path / "tests" / "test_calc.py").write_text(
        "from solutions.calc import double\n\n\ndef test_double():\n    assert double(3) == 6\n")
    return code


def test_run_one_runs_pytest_on_the_mutant_and_restores_the_file(tmp_path):
    """One real run (a pytest subprocess) on a two-file tree: the mutant is caught by name."""
    code = _tree(tmp_path)
    seen = Mutation("seen", "solutions/calc.py", "return 2 * x", "return 3 * x", ("tests/test_calc.py",), "")
    caught = run_one(tmp_path, seen, {}, timeout=120)
    assert caught.status == "caught" and caught.caught_by == ["test_calc::test_double"]
    assert (tmp_path / "solutions" / "calc.py").read_text() == code


def test_run_one_statuses(tmp_path, monkeypatch):
    """Survived, failing-before-the-mutant (not a catch), text not found: no subprocess needed."""
    code = _tree(tmp_path)
    tests = ("tests/test_calc.py",)
    planted = []

    def fake_run_tests(tree, selection, timeout):
        planted.append((tree / "solutions" / "calc.py").read_text())
        failing = {"tests.test_calc::test_double"} if "3 * x" in planted[-1] else set()
        return failing, {"tests.test_calc::test_double"} - failing, False, ""

    monkeypatch.setattr(mutation, "run_tests", fake_run_tests)
    seen = Mutation("seen", "solutions/calc.py", "return 2 * x", "return 3 * x", tests, "")
    unseen = Mutation("unseen", "solutions/calc.py", "return 1", "return 2", tests, "")
    gone = Mutation("gone", "solutions/calc.py", "return 4 * x", "return 5 * x", tests, "")
    assert run_one(tmp_path, seen, {}, 1).status == "caught"
    assert run_one(tmp_path, unseen, {}, 1).status == "SURVIVED"
    # A test that already fails with nothing planted does not count as catching.
    assert run_one(tmp_path, seen, {tests: {"tests.test_calc::test_double"}}, 1).status == "SURVIVED"
    assert run_one(tmp_path, gone, {}, 1).status == "OLD TEXT NOT FOUND"
    assert len(planted) == 3 and "return 2\n" in planted[1]  # the mutant was on disk while tests ran
    assert (tmp_path / "solutions" / "calc.py").read_text() == code
