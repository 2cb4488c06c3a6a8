"""Grade a student's file instead of the reference:

    pytest tests/grading --submission path/to/submission.ipynb

Without ``--submission`` the grading tests run against ``solutions/``. With it, the
reference-scoring tests grade that file through ``sandbox.handle`` (skipped if the
autograder is not installed); the planted-mistake tests are unaffected. The options are
registered in tests/conftest.py, so that they parse from the repository root as well.
"""
from __future__ import annotations

import pytest


def _option(config, name, default=None):
    try:
        return config.getoption(name)
    except ValueError:  # this conftest was loaded after option parsing
        return default


@pytest.fixture(scope="session")
def submission_path(request):
    return _option(request.config, "--submission")


@pytest.fixture(scope="session")
def call_for_function(submission_path, request):
    """``name -> call`` for the code under test: the reference, or the sandboxed submission."""
    if not submission_path:
        import solutions
        from grading import local_call

        yield lambda name: local_call(getattr(solutions, name))
        return
    sandbox = pytest.importorskip("sandbox.handle", reason="the autograder's sandbox is not available")
    timeout = _option(request.config, "--submission-timeout", 10.0)
    with sandbox.Sandbox(submission_path, timeout=timeout) as box:
        yield lambda name: (lambda *args: box.call(name, *args))


def pytest_terminal_summary(terminalreporter):
    """Print the mutation score of the grading checks (tests/grading/test_mutation.py)."""
    from tests.grading import mutants

    if not mutants.SCORES:
        return
    write = terminalreporter.write_line
    terminalreporter.write_sep("=", "mutation score of the grading checks")
    total_caught = total = 0
    for exercise in sorted(mutants.SCORES):
        caught, graded, equivalent, missed = mutants.SCORES[exercise]
        total_caught, total = total_caught + caught, total + graded
        write(f"{exercise}: {caught}/{graded} wrong variants lose points "
              f"({100 * caught / graded:.1f}%); {equivalent} equivalent variant(s) not graded")
        for what in missed:
            write(f"    full marks: {what}")
    write(f"all: {total_caught}/{total} ({100 * total_caught / max(total, 1):.1f}%)")
