"""The notebook's self-check is the grader: the same checks, run on the same code in the same
sandbox (allowed imports, time limit), with the hidden tests named and counted. It works in
the student release too, where neither solutions/ nor the instructor-side files exist."""
from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from autograde.grade import grade_submission
from grading import EXERCISES, STUDENT_RELEASE_FILES, load_checks
from autograde.selfcheck import check_code, self_check

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "redteam" / "reference_submission.py"
SUBMISSIONS = ROOT / "tests" / "redteam" / "submissions"
PUBLIC = load_checks(include_hidden=False)
PUBLIC_POINTS = {e.id: sum(c.points for c in PUBLIC if c.exercise == e.id) for e in EXERCISES}
HIDDEN_POINTS = {e.id: e.max_points - PUBLIC_POINTS[e.id] for e in EXERCISES}
ALL = [e.id for e in EXERCISES]


@pytest.fixture(scope="module")
def reference_functions():
    return runpy.run_path(str(REFERENCE))


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.id)
def test_reference_earns_every_public_point_and_hidden_tests_are_named(
        exercise, reference_functions, capsys):
    earned = self_check(exercise.id, reference_functions[exercise.function])
    out = capsys.readouterr().out
    assert earned == PUBLIC_POINTS[exercise.id] > 0
    assert "All public tests passed" in out and "(hidden)" in out
    assert f"worth {HIDDEN_POINTS[exercise.id]:g} more points" in out
    assert "not in the grader's sandbox" not in out  # the sandbox ran it


def test_namespace_lookup_and_missing_function(reference_functions, capsys):
    assert self_check("ex3", {"memory_per_gpu": reference_functions["memory_per_gpu"]}) == \
        PUBLIC_POINTS["ex3"]
    assert self_check("ex4", {"chinchilla_loss": reference_functions["chinchilla_loss"]}) == 0
    out = capsys.readouterr().out
    assert "no function `communication_time_per_step` found" in out


def test_not_implemented_is_reported_not_raised(capsys):
    cells = ["def chinchilla_loss(N, D):\n    raise NotImplementedError('replace this line')\n"]
    assert self_check("ex1", None, cells=cells) == 0
    out = capsys.readouterr().out
    assert "not implemented yet" in out and "Fix first: implement Exercise 1" in out


def test_a_wrong_answer_is_explained(capsys):
    cells = ["def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.28 + 410.0 / D**0.34\n"]
    # Every value is off by more than 5 %: the property checks do not pay either.
    assert self_check("ex1", None, cells=cells) == 0
    assert "exponents swapped" in capsys.readouterr().out


@pytest.mark.parametrize("loss, unit", [
    ("406.0 / N**0.34 + 410.0 / (D / 1e9)**0.28", "D counted in billions of tokens"),
    ("406.0 / (N / 1e9)**0.34 + 410.0 / D**0.28", "N counted in billions of parameters"),
    ("406.0 / (N / 1e9)**0.34 + 410.0 / (D / 1e9)**0.28", "N and D both counted in billions"),
])
def test_a_unit_slip_is_named_as_such(loss, unit, capsys):
    """Model and token counts in billions (as tables print them) are named as a unit slip,
    under the values that fail, not answered with the hint about the constants."""
    cells = [f"def chinchilla_loss(N, D):\n    return 1.69 + {loss}\n"]
    assert self_check("ex1", None, cells=cells) == 0
    out = capsys.readouterr().out
    gpt3 = out.split("ex1_gpt3", 1)[1].split("ex1_chinchilla", 1)[0]
    assert f"Why: your numbers match {unit}" in gpt3
    assert "Hint: use exactly E, A, B" not in out


def test_an_unused_import_the_grader_lacks_costs_only_its_statement(capsys):
    """As in a .py file: the failed ``import scipy.optimize`` is one unit of its own, so the
    rest of its cell (and the exercise) still counts, here and in the grader alike."""
    reference = REFERENCE.read_text()
    cells = ["import scipy.optimize\nimport numpy as np\n", reference.replace("import numpy as np", "")]
    assert self_check("ex2", None, cells=cells) == 14
    assert "All public tests passed" in capsys.readouterr().out


def test_an_infinite_loop_is_stopped_and_explained(capsys):
    cells = ["def chinchilla_loss(N, D):\n    while True:\n        pass\n"]
    assert self_check("ex1", None, cells=cells, timeout=1) == 0
    assert "infinite loop" in capsys.readouterr().out


def test_a_function_the_sandbox_cannot_see_is_checked_here_and_says_so(capsys):
    def chinchilla_loss(N, D):
        return 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28

    assert self_check("ex1", chinchilla_loss) == PUBLIC_POINTS["ex1"]
    assert "not in the grader's sandbox" in capsys.readouterr().out


def test_unknown_exercise_is_a_value_error(reference_functions):
    with pytest.raises(ValueError, match="exercise_id"):
        self_check("ex5", reference_functions["chinchilla_loss"])


# ------------------------------------------------------------------ self-check == grader

#: The planted-mistake set, written as a student's notebook cells (one cell per exercise).
PLANTED = {
    "swapped_exponents": ("return E + A / N**ALPHA + B / D**BETA",
                          "return E + A / N**BETA + B / D**ALPHA"),
    "math_pow": ("return E + A / N**ALPHA + B / D**BETA",
                 "import math\n    return E + A / math.pow(N, ALPHA) + B / math.pow(D, BETA)"),
    "scipy_import": ("import numpy as np", "import scipy.optimize\nimport numpy as np"),
    "grid_201": ("np.logspace(-1, 3.3, 200)", "np.logspace(-1, 3.3, 201)"),
    "gigabytes": ("return total\n", "return total / 1e9\n"),
    "one_element_loss": ("return E + A / N**ALPHA + B / D**BETA",
                         "return np.atleast_1d(E + A / N**ALPHA + B / D**BETA)"),
    "infinite_loop": ("dp_volume = 2 * (2 * model_params)", "while True:\n        pass"),
}


def _cells(source: str) -> list[str]:
    """A .py submission cut into notebook cells at its '# Exercise' comments."""
    parts, current = [], []
    for line in source.splitlines(keepends=True):
        if line.startswith("# Exercise") and current:
            parts.append("".join(current))
            current = []
        current.append(line)
    return parts + ["".join(current)]


def _notebook_cells(path: Path) -> list[str] | None:
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
        return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                for c in nb["cells"] if c.get("cell_type") == "code"]
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None


def _same_score(name: str, cells: list[str], path: Path):
    grader = grade_submission(path, PUBLIC, timeout=2)
    mine = check_code(ALL, cells=cells, timeout=2)
    return name, grader.score, mine.score


def test_self_check_and_grader_give_the_same_public_score(tmp_path):
    reference = REFERENCE.read_text()
    jobs = []
    for name, (old, new) in PLANTED.items():
        assert old in reference, name
        cells = _cells(reference.replace(old, new, 1))
        path = tmp_path / f"{name}.ipynb"
        path.write_text(json.dumps({"cells": [
            {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
            for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
        jobs.append((name, cells, path))
    for path in sorted(SUBMISSIONS.glob("*.ipynb")):
        cells = _notebook_cells(path)
        if cells is not None:  # a file that is not a notebook is not a kernel's history
            jobs.append((path.name, cells, path))
    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(lambda job: _same_score(*job), jobs))
    differ = [s for s in scores if s[1] != s[2]]
    assert not differ, differ
    by_name = {name: grader for name, grader, _ in scores}
    assert by_name["reference.ipynb"] == 70 and by_name["scipy_import"] == 70  # unused: costs nothing


def test_self_check_of_a_py_file_is_the_grader_on_that_file(tmp_path, capsys):
    """From a .py file, self_check grades the file that defines the function."""
    for name in ("wrong_types.py", "hardcoded_two_examples.py", "reference_submission.py"):
        path = (SUBMISSIONS / name) if name != "reference_submission.py" else REFERENCE
        functions = runpy.run_path(str(path))
        mine = sum(self_check(e.id, functions.get(e.function) or functions) for e in EXERCISES)
        grader = grade_submission(path, PUBLIC, timeout=2).score
        assert mine == grader, name
    capsys.readouterr()


def test_self_check_in_the_student_release(tmp_path):
    """Copy only the release files; make solutions/ and the repository unimportable."""
    (tmp_path / "grading").mkdir(parents=True)
    for name in STUDENT_RELEASE_FILES:
        shutil.copy(ROOT / "grading" / name, tmp_path / "grading" / name)
    for package in ("autograde", "sandbox"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    script = textwrap.dedent(f"""
        import os, sys
        root = {str(ROOT)!r}
        sys.path = [p for p in sys.path if os.path.realpath(p or ".") != root]
        sys.path.insert(0, {str(tmp_path)!r})
        sys.modules["solutions"] = None  # importing it now raises ImportError
        from autograde.selfcheck import self_check
        import grading
        assert grading.__file__.startswith({str(tmp_path)!r}), grading.__file__
        good = "E, A, B, ALPHA, BETA = 1.69, 406.0, 410.0, 0.34, 0.28\\n" \\
               "def chinchilla_loss(N, D):\\n    return E + A / N**ALPHA + B / D**BETA\\n"
        todo = "def compute_optimal(C, ratios=None):\\n    raise NotImplementedError\\n"
        print("SCORE", self_check("ex1", None, cells=[good]), self_check("ex2", None, cells=[good, todo]))
        assert "grading.mistakes" not in sys.modules
        assert "grading.independent" not in sys.modules
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"SCORE {PUBLIC_POINTS['ex1']} 0" in done.stdout.replace(".0", "")
    assert "not implemented yet" in done.stdout and "hidden" in done.stdout


PRINTS_INSTEAD_OF_RETURNING = '''
import math

def chinchilla_loss(N, D):
    print(1.69 + 406.0 / N**0.34 + 410.0 / D**0.28)

def compute_optimal(C, ratios=None):
    import numpy as np
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for r in ratios:
        N = math.sqrt(C / (6 * r))
        D = r * N
        loss = chinchilla_loss(N, D)
        if best is None or loss < best[3]:
            best = (N, D, float(r), loss)
    return best
'''


def test_one_slip_costs_one_exercise_in_check_cells_student_and_instructor_grader(tmp_path, capsys):
    """Print instead of return in Exercise 1, a correct Exercise 2: every public Exercise 2
    point in the check cells, the grader on public checks (the student's `python -m
    autograde`) and the instructor's grade, with the one line that says why."""
    from grading.ex2 import REGRADE_NOTE

    path = tmp_path / "prints.py"
    path.write_text(PRINTS_INSTEAD_OF_RETURNING, encoding="utf-8")
    in_cells = self_check("ex2", None, cells=[PRINTS_INSTEAD_OF_RETURNING])
    assert REGRADE_NOTE in capsys.readouterr().out
    student = grade_submission(path, PUBLIC)
    instructor = grade_submission(path, load_checks(include_hidden=True))
    ex2 = EXERCISES[1]
    assert float(in_cells) == pytest.approx(PUBLIC_POINTS["ex2"])
    assert sum(c.points for c, r in student.results if c.exercise == "ex2" and r.passed) \
        == pytest.approx(PUBLIC_POINTS["ex2"])
    assert sum(c.points for c, r in instructor.results if c.exercise == "ex2" and r.passed) \
        == pytest.approx(ex2.max_points)
    assert all(r.feedback.startswith(REGRADE_NOTE) for c, r in instructor.results if c.exercise == "ex2")
    assert not instructor.grader_errors


def test_a_file_name_never_triggers_the_regrade_or_ends_grading(tmp_path):
    """The regrade is decided from the results, not from feedback naming the file; a
    notebook whose cells are not a list is graded (0) and nothing raises."""
    path = tmp_path / "raise_chinchilla_loss.ipynb"
    path.write_text('{"cells": {}}', encoding="utf-8")
    report = grade_submission(path, load_checks(include_hidden=True))
    assert report.score == 0
    assert not any("regrade" in e for e in report.grader_errors)


# ------------------------------------------------- the check cells grade what the grader grades

def _saved(folder: Path, cells: list) -> Path:
    """A saved notebook: a markdown cell, then ``cells`` (the grader numbers all cells)."""
    path = folder / "09-exercises.ipynb"
    path.write_text(json.dumps({"cells": [{"cell_type": "markdown", "metadata": {}, "source": "# Exercises"}] + [
        {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
        for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


HELPER = "def penalty(x, c, e):\n    return c / x**e\n"
USES_HELPER = ("def chinchilla_loss(N, D):\n"
               "    return 1.69 + penalty(N, 406.0, 0.34) + penalty(D, 410.0, 0.28)\n")
RIGHT = "def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28\n"


@pytest.mark.parametrize("case", ["helper deleted after running", "function renamed"])
def test_the_check_cell_gives_the_graders_points_and_names_the_difference(case, tmp_path, capsys):
    if case == "helper deleted after running":
        ran, kept = [HELPER, USES_HELPER], [USES_HELPER]
        named = ("`penalty` is defined only by a cell that is not in the saved 09-exercises.ipynb "
                 "(deleted, or not saved yet): the grader will not find it")
    else:
        ran = [RIGHT, RIGHT.replace("chinchilla_loss", "chinchilla_loss_v2")]
        kept = [ran[1]]
        named = ("the saved 09-exercises.ipynb defines no `chinchilla_loss`, so the grader will not find it (renamed, or not "
                 "saved yet?); it defines `chinchilla_loss_v2`")
    saved = _saved(tmp_path, kept)
    points = self_check("ex1", None, cells=ran, saved=saved)
    out = capsys.readouterr().out
    grader = grade_submission(saved, [c for c in PUBLIC if c.exercise == "ex1"], timeout=10)
    assert points == grader.score == 0  # the check cell and the grader agree
    assert f"Warning: {named}." in out
    assert f"The cells run in this kernel score {PUBLIC_POINTS['ex1']:g} / " in out
    if case == "helper deleted after running":  # one numbering: the saved file's cell 2
        assert "cell 2" in out and "cell 1," not in out


def test_a_saved_notebook_like_the_kernel_is_graded_without_a_warning(tmp_path, capsys):
    saved = _saved(tmp_path, [HELPER, USES_HELPER])
    assert self_check("ex1", None, cells=[HELPER, USES_HELPER], saved=saved) == PUBLIC_POINTS["ex1"]
    out = capsys.readouterr().out
    assert "Warning" not in out and "All public tests passed" in out


def test_the_saved_notebook_is_found_from_the_session_or_beside_the_kernel(tmp_path, monkeypatch):
    from autograde.selfcheck import saved_notebook

    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert saved_notebook({}) is None
    (tmp_path / "notes.ipynb").write_text("{}")  # no check cells: not the exercises
    mine = _saved(tmp_path, ['self_check("ex1", chinchilla_loss)']).rename(tmp_path / "smith_hw.ipynb")
    assert saved_notebook({}) == mine
    assert saved_notebook({"__session__": "some/server/path/notes.ipynb"}) == tmp_path / "notes.ipynb"
    monkeypatch.setenv("JPY_SESSION_NAME", str(mine))
    assert saved_notebook({}) == mine
