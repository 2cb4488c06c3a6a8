"""Through the real grader: each student's own hidden inputs, Exercise 2's own-loss
fallback that a chosen minimum cannot buy, and what a wrong answer's result records."""
from __future__ import annotations

import textwrap


from autograde.grade import grade_submission
from grading.ex2 import OWN_LOSS_REFUSED, REGRADE_NOTE
from grading import CheckList, independent, load_checks, local_call
from tools.browser import ROOT

REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
SEED = 20
SEARCH = ("ex2_grid_minimum", "ex2_custom_ratios", "ex2_several_budgets", "ex2_hidden_budgets",
          "ex2_hidden_ratios")


def only(exercises, seed=SEED) -> CheckList:
    """The checks of ``exercises``, keeping the seed (for_student needs it)."""
    checks = load_checks(seed=seed)
    out = CheckList(c for c in checks if c.exercise in exercises)
    out.seed = checks.seed
    return out


def _with(tmp_path, name: str, replaced: dict) -> str:
    """The reference submission with some functions' code replaced."""
    import ast

    tree = ast.parse(REFERENCE)
    lines = REFERENCE.splitlines(keepends=True)
    for node in sorted(tree.body, key=lambda n: -n.lineno):
        if isinstance(node, ast.FunctionDef) and node.name in replaced:
            lines[node.lineno - 1:node.end_lineno] = [textwrap.dedent(replaced[node.name]).strip() + "\n"]
    path = tmp_path / name
    path.write_text("".join(lines))
    return path


# ------------------------------------------------------------------ per-student hidden inputs

def _answers_for(student: str) -> dict:
    """The hidden Exercise 1 inputs ``student`` is graded on, with the right answers: what an
    accomplice graded as ``student`` could pass on."""
    from grading import for_student

    table = {}

    def spy(N, D):
        value = independent.chinchilla_loss(N, D)
        if isinstance(N, float):
            table[(N, D)] = value
        return value

    (check,) = [c for c in for_student(only({"ex1"}), student) if c.hidden]
    assert check.run(local_call(spy)).passed
    return table


def test_an_accomplices_answers_are_for_other_inputs(tmp_path):
    table = _answers_for("alice")
    copied = _with(tmp_path, "copied.py", {"chinchilla_loss": (
        f"TABLE = {table!r}\n"
        "def chinchilla_loss(N, D):\n"
        "    return TABLE.get((float(N), float(D)), 2.0)\n")})
    checks = only({"ex1"})
    hidden = {}
    for student in ("alice", "bob", "alice"):
        report = grade_submission(copied, checks, timeout=5, student=student)
        assert not report.grader_errors, report.grader_errors
        hidden.setdefault(student, []).append(
            [(c.name, r.passed, r.feedback) for c, r in report.results if c.hidden])
    assert hidden["alice"][0][0][1], "alice's own answers pass alice's hidden test"
    assert not hidden["bob"][0][0][1], "bob is graded on other inputs"
    assert hidden["alice"][0] == hidden["alice"][1], "one student: the same inputs every time"


# ------------------------------------------------------------------ the own-loss fallback

CHOSEN_MINIMUM = {  # wrong everywhere; its minimum sits where the "search" puts its answer
    "chinchilla_loss": """
        def chinchilla_loss(N, D):
            return 2.0 + (np.log(D / N) - np.log(0.1)) ** 2
        """,
    "compute_optimal": """
        def compute_optimal(C, ratios=None):
            grid = np.logspace(-1, 3.3, 200) if ratios is None else np.asarray(ratios, dtype=float)
            r = float(grid[np.argmin(np.abs(np.log(grid) - np.log(0.1)))])  # no loss called
            N = float(np.sqrt(C / (6 * r)))
            return N, r * N, r, 2.0 + float(np.log(r) - np.log(0.1)) ** 2
        """}
HONEST_SEARCH = """
    def compute_optimal(C, ratios=None):
        grid = np.logspace(-1, 3.3, 200) if ratios is None else np.asarray(ratios, dtype=float)
        N = np.sqrt(C / (6 * grid))
        losses = chinchilla_loss(N, grid * N)
        i = int(np.argmin(losses))
        return float(N[i]), float(grid[i] * N[i]), float(grid[i]), float(losses[i])
    """


def test_a_chosen_minimum_earns_no_search_points_and_an_honest_search_keeps_them(tmp_path):
    """In one process (the fallback alone) the chosen minimum passes the search tests; through
    the grader, which also grades the search with the exercise's loss, it earns none of them,
    while the same wrong loss with a real search earns all of Exercise 2."""
    from grading import grade_callable

    functions = dict(independent.FUNCTIONS)
    namespace = {"np": __import__("numpy")}
    for source in CHOSEN_MINIMUM.values():
        exec(textwrap.dedent(source), namespace)
    functions.update(chinchilla_loss=namespace["chinchilla_loss"],
                     compute_optimal=namespace["compute_optimal"])
    checks = only({"ex1", "ex2"})
    in_process = grade_callable(lambda name: local_call(functions[name]), checks)
    assert any(r.passed and r.condition == "far" for c, r in in_process if c.name in SEARCH), \
        "the attack no longer passes the fallback alone: this test shows nothing"

    attack = grade_submission(_with(tmp_path, "chosen.py", CHOSEN_MINIMUM), checks, timeout=5)
    paid = [c.name for c, r in attack.results if r.passed and c.name in SEARCH]
    assert paid == [] and not attack.grader_errors
    assert any(OWN_LOSS_REFUSED in r.feedback for c, r in attack.results if c.name in SEARCH)

    honest = grade_submission(_with(tmp_path, "honest.py", {
        "chinchilla_loss": CHOSEN_MINIMUM["chinchilla_loss"], "compute_optimal": HONEST_SEARCH}),
        checks, timeout=5)
    ex2 = [(c, r) for c, r in honest.results if c.exercise == "ex2"]
    assert all(r.passed for _, r in ex2), [r.feedback for _, r in ex2 if not r.passed]
    assert any(REGRADE_NOTE in r.feedback for _, r in ex2)


# ------------------------------------------------------------------ wrong answers, structured

def test_a_dict_where_a_tuple_is_asked_says_so_in_plain_words(tmp_path):
    path = _with(tmp_path, "dict.py", {"compute_optimal": """
        def compute_optimal(C, ratios=None):
            return {"N": 1.0, "D": 2.0, "ratio": 2.0, "loss": 3.0}
        """})
    report = grade_submission(path, only({"ex2"}), timeout=5)
    feedback = {c.name: r for c, r in report.results}
    first = feedback["ex2_returns_four_numbers"]
    assert "returned a dict; expected a tuple of 4 numbers" in first.feedback, first.feedback
    assert "builtins" not in first.feedback
    assert first.got == "compute_optimal(1e+21) -> returned a dict" and first.mistake == "ex2_wrong_type"


def test_a_swapped_exponent_loss_with_a_201_point_grid_loses_the_default_grid_tests(tmp_path):
    path = _with(tmp_path, "swapped201.py", {
        "chinchilla_loss": """
            def chinchilla_loss(N, D):
                return 1.69 + 406.0 / N**0.28 + 410.0 / D**0.34
            """,
        "compute_optimal": HONEST_SEARCH.replace("np.logspace(-1, 3.3, 200)", "np.logspace(-1, 3.3, 201)")})
    report = grade_submission(path, only({"ex1", "ex2"}), timeout=5)
    ex2 = {c.name: r for c, r in report.results if c.exercise == "ex2"}
    default_grid = ("ex2_grid_minimum", "ex2_several_budgets", "ex2_hidden_budgets")
    assert not any(ex2[name].passed for name in default_grid), \
        {n: ex2[n].feedback for n in default_grid if ex2[n].passed}
    assert ex2["ex2_custom_ratios"].passed and ex2["ex2_hidden_ratios"].passed  # its search is right
    earned = sum(c.points for c, r in report.results if c.exercise == "ex2" and r.passed)
    assert earned <= 20 - 9


def test_no_absolute_path_of_the_grading_machine_in_the_csv(tmp_path, monkeypatch):
    """Loose files named by absolute paths, from another working directory."""
    import contextlib
    import csv
    import io

    from autograde.cli import main

    (tmp_path / "deep" / "inside").mkdir(parents=True)
    files = [tmp_path / "deep" / "inside" / "alice.py", tmp_path / "bob.py"]
    for f in files:
        f.write_text(REFERENCE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([str(f) for f in files] + ["--public-only", "--timeout", "5",
                                               "--csv", str(tmp_path / "grades.csv")]) == 0
    text = (tmp_path / "grades.csv").read_text()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted(r["submission"] for r in rows) == ["alice.py", "bob.py"]
    assert str(tmp_path) not in text and "/tmp" not in text and str(ROOT) not in text


def test_a_search_on_its_own_copy_of_a_mistyped_loss_keeps_exercise_2(tmp_path):
    """The loss typed twice with the same slip (in chinchilla_loss and inside compute_optimal,
    as the reference solution writes it out again): substituting the exercise's loss changes
    nothing, but the loss is a slip of the exercise's, so the search's points stay."""
    mistyped = "1.69 + 406.0 / N**0.34 + 410.0 / D**0.27"
    path = _with(tmp_path, "inline.py", {
        "chinchilla_loss": f"def chinchilla_loss(N, D):\n    return {mistyped}\n",
        "compute_optimal": HONEST_SEARCH.replace("chinchilla_loss(N, grid * N)",
                                                 f"(lambda N, D: {mistyped})(N, grid * N)")})
    report = grade_submission(path, only({"ex1", "ex2"}), timeout=5)
    ex2 = [(c, r) for c, r in report.results if c.exercise == "ex2"]
    assert all(r.passed for _, r in ex2), [r.feedback for _, r in ex2 if not r.passed]
    assert any(r.condition == "slip" for _, r in ex2)
    assert sum(c.points for c, r in report.results if c.exercise == "ex1" and r.passed) < 10


# ------------------------------------------------------------------ the report's wording

def test_one_why_per_mistake_and_fix_first_names_the_cause_not_the_cell_it_stopped(tmp_path):
    """A math.pow loss fails the array test and stops a plot cell that calls it: Fix first
    points at the loss (its test), not at the plot cell; its Why is given once."""
    import json

    from autograde.reports import student_text

    loss = ("import math\n\ndef chinchilla_loss(N, D):\n"
            "    return 1.69 + 406.0 / math.pow(N, 0.28) + 410.0 / math.pow(D, 0.34)\n")
    plot = "import numpy as np\nlosses = chinchilla_loss(np.logspace(6, 12, 5), 1.4e12)\n"
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
        for c in (loss, plot)], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    report = grade_submission(path, only({"ex1"}), timeout=5)
    text = student_text(report)
    assert report.problems and report.problems[0].startswith("cell 2")
    fix = text.split("Fix first: ", 1)[1]
    assert fix.startswith("Exercise 1, ex1_gpt3") and "stopped cell 2: fix `chinchilla_loss` first" in fix
    whys = [line.strip() for line in text.split("Fix first: ")[0].splitlines() if line.strip().startswith("Why:")]
    assert sum("exponents swapped" in w for w in whys) == 1  # in full once, then pointers
    pointers = [w for w in whys if w.startswith("Why: the same mistake as under")]
    assert len(pointers) >= 2 and set(pointers) == {"Why: the same mistake as under ex1_gpt3 above."}


def _notebook(path, cells):
    import json

    path.write_text(json.dumps({"cells": [
        {"cell_type": "code", "metadata": {}, "source": c, "outputs": [], "execution_count": None}
        for c in cells], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_fix_first_is_not_a_later_exercise_stub_that_stopped_its_own_cell(tmp_path):
    """Working top to bottom: Exercise 1 answered wrongly, Exercise 2 still the hand-out's stub,
    and the cell after it stopped by that stub. Fix first names Exercise 1's failing test, in
    the one-exercise self-check and in the whole report, not the cell Exercise 2's stub stopped
    (the report says Exercise 2 is not implemented yet); that cell is still listed as not run."""
    from autograde.reports import student_text

    loss = "def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.34 + 410.0 / (D / 1e9)**0.28\n"
    stub = ("def compute_optimal(C, ratios=None):\n"
            "    raise NotImplementedError('Implement `compute_optimal`: replace this line with your code.')\n")
    table = "best = compute_optimal(5.88e23)\n"
    path = _notebook(tmp_path / "nb.ipynb", [loss, stub, table])
    for exercises in ({"ex1"}, {"ex1", "ex2"}):
        report = grade_submission(path, only(exercises), timeout=5)
        text = student_text(report)
        assert report.problems and report.problems[0].startswith("cell 3"), report.problems
        assert "Parts of your submission that did not run:\n  - cell 3" in text
        fix = text.split("Fix first: ", 1)[1]
        assert fix.startswith("Exercise 1, ex1_gpt3"), (exercises, fix)


def test_fix_first_still_names_a_cell_that_failed_on_its_own(tmp_path):
    """A cell that fails for its own reason (a name never defined) is still what to fix first."""
    from autograde.reports import student_text

    loss = "def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.34 + 410.0 / (D / 1e9)**0.28\n"
    path = _notebook(tmp_path / "nb.ipynb", [loss, "print(chinchila_loss(70e9, 1.4e12))\n"])
    text = student_text(grade_submission(path, only({"ex1"}), timeout=5))
    assert text.split("Fix first: ", 1)[1].startswith("cell 2"), text


def test_an_untouched_stub_is_not_attempted_even_when_a_cell_did_not_run():
    from autograde.grade import SubmissionReport
    from autograde.reports import STUB_STATUS, status
    from grading import Result

    checks = only({"ex1"})
    report = SubmissionReport(submission="x.ipynb", problems=["cell 5 (`plot(...)`) raised NotImplementedError"],
                              results=[(c, Result(False, "Not implemented yet", True)) for c in checks])
    assert status(report) == STUB_STATUS == "not attempted (still the stub)"
    report.results[0] = (checks[0], Result(False, "wrong"))
    assert status(report) == "not run"


def test_gradescope_passes_the_submitting_students_id(tmp_path, monkeypatch):
    import json

    from autograde.gradescope import gradescope_student

    (tmp_path / "submission").mkdir()
    monkeypatch.delenv("GRADESCOPE_STUDENT", raising=False)
    assert gradescope_student(tmp_path / "submission") == ""
    (tmp_path / "submission_metadata.json").write_text(json.dumps(
        {"id": 1, "users": [{"email": "a@example.com", "id": 1234, "name": "A"}]}))
    assert gradescope_student(tmp_path / "submission") == "1234"
    from autograde import classrun
    assert classrun._takes_student()  # the class run and Gradescope pass student= through


def test_a_wrong_loss_does_not_hide_exercise_2s_own_mistake(tmp_path):
    """chinchilla_loss with A * N**alpha and compute_optimal without the 6: every Exercise 2
    test fails under either loss, but only the exercise's loss lets the grader recognise the
    missing 6, so those tests explain it (and their points stay 0)."""
    from grading.explain import WHY

    path = _with(tmp_path, "both.py", {
        "chinchilla_loss": """
        def chinchilla_loss(N, D):
            return 1.69 + 406.0 * N**0.34 + 410.0 / D**0.28
        """,
        "compute_optimal": """
        def compute_optimal(C, ratios=None):
            ratios = np.logspace(-1, 3.3, 200) if ratios is None else np.asarray(ratios, float)
            N = np.sqrt(C / ratios)
            losses = chinchilla_loss(N, ratios * N)
            i = int(np.argmin(losses))
            return float(N[i]), float(ratios[i] * N[i]), float(ratios[i]), float(losses[i])
        """})
    report = grade_submission(path, only({"ex1", "ex2"}), timeout=5)
    ex2 = {c.name: r for c, r in report.results if c.exercise == "ex2"}
    assert not report.grader_errors
    assert not ex2["ex2_grid_minimum"].passed and not ex2["ex2_returns_four_numbers"].passed
    assert WHY["ex2_forgets_the_6"] in ex2["ex2_grid_minimum"].feedback
    assert WHY["ex2_forgets_the_6"] in ex2["ex2_returns_four_numbers"].feedback
    assert ex2["ex2_custom_ratios"].passed  # what was right stays right
    assert REGRADE_NOTE.rstrip(".") in report.notes  # said once, for the whole exercise


def test_cells_stopped_by_exercises_not_written_yet_are_one_line_and_a_real_error_keeps_its_own(tmp_path):
    """A student checking Exercise 1 with Exercises 2 and 3 still the hand-out's stubs: the cells
    that call those stubs are said in one line (which cells, which functions), not a line each;
    a cell that failed on its own error is still listed by itself."""
    from autograde.reports import student_text

    loss = "def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28\n"
    stub2 = ("def compute_optimal(C, ratios=None):\n"
             "    raise NotImplementedError('Implement `compute_optimal`: replace this line with your code.')\n")
    stub3 = ("def memory_per_gpu(params, gpus, zero_stage, bytes_per_param=12):\n"
             "    raise NotImplementedError('Implement `memory_per_gpu`: replace this line with your code.')\n")
    path = _notebook(tmp_path / "nb.ipynb", [loss, stub2, "a = compute_optimal(1e23)\n", "1 / 0\n", stub3,
                                             "b = memory_per_gpu(7e9, 8, 1)\n", "c = compute_optimal(1e24)\n"])
    report = grade_submission(path, only({"ex1"}), timeout=5)
    assert len(report.problems) == 4, report.problems
    text = student_text(report)
    listed = text.split("Parts of your submission that did not run:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert len(listed) == 2, listed
    assert listed[0].startswith("  - cells 3, 6 and 7 call exercises not written yet")
    assert "`compute_optimal`, `memory_per_gpu`" in listed[0]
    assert listed[1].startswith("  - cell 4") and "ZeroDivisionError" in listed[1]


def test_a_py_file_s_lines_stopped_by_a_stub_are_one_line_too(tmp_path):
    from autograde.reports import student_text

    path = tmp_path / "answer.py"
    path.write_text("def chinchilla_loss(N, D):\n    return 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28\n\n\n"
                    "def compute_optimal(C, ratios=None):\n"
                    "    raise NotImplementedError('Implement `compute_optimal`: replace this line with your code.')\n\n\n"
                    "a = compute_optimal(1e23)\nb = compute_optimal(1e24)\n", encoding="utf-8")
    report = grade_submission(path, only({"ex1"}), timeout=5)
    assert len(report.problems) == 2, report.problems
    listed = student_text(report).split("did not run:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert listed == ["  - lines 9 and 10 call an exercise not written yet (`compute_optimal`: still the "
                      "hand-out's stub), so they stopped there"], listed
