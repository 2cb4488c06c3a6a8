"""The notebook's self-check: public checks only, in-process, and it works in the student
release, where neither solutions/ nor the instructor-side grading files exist."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import solutions
from tests.grading import EXERCISES, STUDENT_RELEASE_FILES, load_checks
from tests.grading.selfcheck import self_check

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_POINTS = {e.id: sum(c.points for c in load_checks(include_hidden=False) if c.exercise == e.id)
                 for e in EXERCISES}


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_reference_earns_every_public_point(exercise, capsys):
    earned = self_check(exercise.id, getattr(solutions, exercise.function))
    out = capsys.readouterr().out
    assert earned == PUBLIC_POINTS[exercise.id] > 0
    assert "All tests passed." in out and "(hidden)" not in out
    assert "Hidden tests with random inputs run when your work is graded." in out


def test_namespace_lookup_and_missing_function(capsys):
    assert self_check("ex3", {"memory_per_gpu": solutions.memory_per_gpu}) == PUBLIC_POINTS["ex3"]
    assert self_check("ex4", {"chinchilla_loss": solutions.chinchilla_loss}) == 0
    out = capsys.readouterr().out
    assert "no function `communication_time_per_step` found" in out


def test_not_implemented_is_reported_not_raised(capsys):
    def chinchilla_loss(N, D):
        raise NotImplementedError("replace this line with your code")

    assert self_check("ex1", chinchilla_loss) == 0
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Fix first: implement Exercise 1" in out


def test_a_wrong_answer_is_explained(capsys):
    def chinchilla_loss(N, D):
        return 1.69 + 406.0 / N**0.28 + 410.0 / D**0.34

    # Every value is off by more than 5 %: the property checks do not pay either.
    assert self_check("ex1", chinchilla_loss) == 0
    assert "exponents swapped" in capsys.readouterr().out


def test_unknown_exercise_is_a_value_error():
    with pytest.raises(ValueError, match="exercise_id"):
        self_check("ex5", solutions.chinchilla_loss)


def test_self_check_in_the_student_release(tmp_path):
    """Copy only the release files; make solutions/ and the repository unimportable."""
    (tmp_path / "tests" / "grading").mkdir(parents=True)
    for name in STUDENT_RELEASE_FILES:
        shutil.copy(ROOT / "tests" / "grading" / name, tmp_path / "tests" / "grading" / name)
    shutil.copytree(ROOT / "autograde", tmp_path / "autograde",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = textwrap.dedent(f"""
        import os, sys
        root = {str(ROOT)!r}
        sys.path = [p for p in sys.path if os.path.realpath(p or ".") != root]
        sys.path.insert(0, {str(tmp_path)!r})
        sys.modules["solutions"] = None  # importing it now raises ImportError
        from tests.grading.selfcheck import self_check
        import tests.grading
        assert tests.grading.__file__.startswith({str(tmp_path)!r}), tests.grading.__file__
        E, A, B, ALPHA, BETA = 1.69, 406.0, 410.0, 0.34, 0.28
        def chinchilla_loss(N, D):
            return E + A / N**ALPHA + B / D**BETA
        def compute_optimal(C, ratios=None):
            raise NotImplementedError
        print("SCORE", self_check("ex1", chinchilla_loss), self_check("ex2", globals()))
        assert "tests.grading.mistakes" not in sys.modules
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"SCORE {PUBLIC_POINTS['ex1']} 0" in done.stdout.replace(".0", "")
    assert "not implemented yet" in done.stdout
