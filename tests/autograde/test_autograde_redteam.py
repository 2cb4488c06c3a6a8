"""The red-team suite: every hostile or broken submission in tests/redteam/submissions earns
exactly what it deserves, and one broken exercise costs only that exercise.

What each case deserves comes from tests/redteam/cases.py and the checks' own metadata
(points per check, public or hidden), never from a grading run. All cases are graded once,
two at a time, with a short per-test time limit so the hanging ones stay cheap.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograde.classrun import find_submissions, grade_many
from autograde.grade import grade_submission
from grading import EXERCISES, load_checks
from tests.redteam import build
from tests.redteam.cases import CASES, Case
from tests.redteam.leftovers import in_ci, leftover_processes

ROOT = Path(__file__).resolve().parents[2]
SUBMISSIONS = ROOT / "tests" / "redteam" / "submissions"
TIMEOUT = 3.0  # seconds per test and per unit: far above what any honest call here needs
SEED = 20240601
HONEST = {"reference.ipynb", "reference_magics_and_plots.ipynb", "custom_valueerror_subclass.py",
          "docstring_backslash_quotes.py", "blank_lines_cell.ipynb", "unused_scipy_import.ipynb"}


@pytest.fixture(scope="module", autouse=True)
def strong_isolation():
    """The hostile submissions need the namespace or uid sandbox. In the rlimits fallback
    (no user namespaces and not root: some laptops and locked-down runners) the student's code
    runs as the grader's own user, and a case such as "signal every process" would take the
    test session down with it. Skip there, with the reason; CI must have the real thing."""
    from sandbox.handle import zygote_for

    mode = zygote_for("auto").isolation
    if mode == "rlimits":
        reason = ("the red-team suite needs the namespace or uid sandbox; this machine only "
                  "allows rlimits isolation (enable unprivileged user namespaces, or run as root)")
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)
    return mode


@pytest.fixture(scope="module")
def checks():
    return load_checks(include_hidden=True, seed=SEED)


@pytest.fixture(scope="module")
def graded(checks):
    paths = [SUBMISSIONS / c.name for c in CASES]
    reports = grade_many(paths, checks, jobs=2, timeout=TIMEOUT)
    return {**{c.name: r for c, r in zip(CASES, reports)}, "_finished": time.monotonic()}


def deserved(case: Case, checks) -> dict:
    """Exercise id -> points the case deserves, from the checks' metadata alone."""
    out = {}
    for exercise in EXERCISES:
        group = [c for c in checks if c.exercise == exercise.id]
        names = {c.name for c in group}
        if exercise.id not in case.lost:
            out[exercise.id] = float(sum(c.points for c in group))
            continue
        keeps = case.keeps.get(exercise.id, ())
        if keeps == "public":
            kept = {c.name for c in group if not c.hidden}
        elif isinstance(keeps, str) and keeps.startswith("all_but:"):
            excluded = set(keeps.split(":", 1)[1].split(","))
            assert excluded <= names, f"{case.name}: unknown checks {excluded - names}"
            kept = names - excluded
        else:
            kept = set(keeps)
            assert kept <= names, f"{case.name}: unknown checks {kept - names}"
        out[exercise.id] = float(sum(c.points for c in group if c.name in kept))
    return out


def test_there_are_at_least_thirty_hostile_cases():
    hostile = [c for c in CASES if c.name not in HONEST]
    assert len(hostile) >= 30, len(hostile)
    assert all(c.lost for c in hostile), [c.name for c in hostile if not c.lost]


def test_committed_files_are_built_from_the_cases():
    assert build.main(["--check"]) == 0, "run: python -m tests.redteam.build"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_case_scores_exactly_what_it_deserves(case, graded, checks):
    report = graded[case.name]
    assert not report.grader_errors, report.grader_errors
    got = {e["id"]: e["score"] for e in report.exercises()}
    assert got == deserved(case, checks), "\n".join(report.problems)
    if case.message:
        for exercise in report.exercises():
            if exercise["id"] in case.lost:
                text = " ".join(t["feedback"] for t in exercise["tests"]) + " ".join(report.problems)
                assert case.message in text, (exercise["id"], text[:2000])


@pytest.mark.parametrize("name", ["syntax_error.py", "empty.py", "binary.py", "binary.ipynb"])
def test_unrunnable_files_get_a_message_for_every_test(name, graded):
    case = next(c for c in CASES if c.name == name)
    for exercise in graded[name].exercises():
        for test in exercise["tests"]:
            assert not test["passed"]
            assert case.message in test["feedback"], test["feedback"]


def test_hostile_runs_leave_no_files_behind(graded):
    """Fake results, sitecustomize.py and friends were written, if at all, inside the
    sandbox's own temporary folder, which is gone."""
    leftovers = {"results.json", "grades.json", "sitecustomize.py", "usercustomize.py",
                 "evil.pth"}
    for folder in (SUBMISSIONS, SUBMISSIONS.parent, ROOT, Path.cwd()):
        assert not leftovers & {p.name for p in folder.iterdir()}, folder


def test_reports_come_from_the_grader_only(tmp_path):
    """The submission that writes a perfect results.json everywhere it can: the files the
    grader writes still say what the grader found."""
    gradescope, report = tmp_path / "results.json", tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "autograde", str(SUBMISSIONS / "fake_results_file.py"),
         "--gradescope", str(gradescope), "--json", str(report), "--timeout", str(TIMEOUT),
         "--seed", str(SEED), "--quiet"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "results.json"]
    results = json.loads(gradescope.read_text())
    lost = [e for e in json.loads(report.read_text())["exercises"] if e["id"] == "ex4"][0]
    assert results["score"] == 100 - lost["max_score"]
    assert lost["score"] == 0


def test_shipped_conftest_and_sitecustomize_are_ignored(tmp_path, checks):
    """A submission folder that also ships conftest.py, sitecustomize.py and a .pth file:
    only the submission is graded, and the extra files never run."""
    folder = tmp_path / "student"
    folder.mkdir()
    submission = folder / "exercises.py"
    submission.write_text(build.python_text(Case(
        "x.py", "ships config files", replace={"ex1": "def chinchilla_loss(N, D):\n    return 0.0\n"})))
    payload = ("import builtins, os\nos.environ['HACKED'] = '1'\n"
               "builtins.chinchilla_loss = lambda N, D: 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28\n")
    for name in ("conftest.py", "sitecustomize.py", "usercustomize.py"):
        (folder / name).write_text(payload)
    (folder / "zz.pth").write_text("import sitecustomize\n")
    assert find_submissions(tmp_path) == [submission]
    report = grade_submission(submission, checks, timeout=TIMEOUT)
    scores = {e["id"]: e["score"] for e in report.exercises()}
    assert scores["ex1"] == 0 and scores["ex2"] == 20
    assert scores["ex4"] == 15 and scores["ex4b"] == 25  # Exercise 4's two parts


def require_root() -> None:
    """The uid mode needs a root grader: skip without one, except under CI (which runs as
    root), where not running the real check is a failure."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        if in_ci():
            pytest.fail("the uid-mode tests need a root grader, and CI runs as root")
        pytest.skip("the uid mode needs a root grader")


def test_no_process_outlives_grading(graded):
    """Three seconds after a grading run (every red-team case, including the daemon that
    leaves its process group and ignores signals), no process it started remains."""
    time.sleep(max(0.0, graded["_finished"] + 3.0 - time.monotonic()))
    assert leftover_processes() == []


@pytest.mark.parametrize("name", ["os_exit_at_import.py", "fork_bomb.py", "kill_everything.py",
                                  "segfault.py", "background_thread.py", "reference.ipynb",
                                  "network_access.py", "setsid_daemon.py",
                                  "proc_cmdline_thief.py", "import_site_packages.py",
                                  "ansi_escape_report.py", "disk_flood.py", "inotify_watch.py",
                                  "clone_new_user_namespace.py"])
def test_uid_mode_without_namespaces(name, checks):
    """The fallback used where namespaces are refused (e.g. Gradescope's containers)."""
    require_root()
    case = next(c for c in CASES if c.name == name)
    report = grade_submission(SUBMISSIONS / name, checks, timeout=TIMEOUT, isolation="uid")
    assert report.isolation == "uid"
    assert {e["id"]: e["score"] for e in report.exercises()} == deserved(case, checks)
    time.sleep(0.2)
    assert leftover_processes() == []  # its uid was cleared before the sandbox closed
