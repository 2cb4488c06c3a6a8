"""The autograder's parts: strict frames, submissions as units, the sandbox's walls, the
command line and its reports. (The hostile submissions are in test_autograde_redteam.py.)"""
from __future__ import annotations

import ast
import csv
import json
import re
import math
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sandbox import protocol
from autograde.classrun import find_submissions
from sandbox.confined import frames
from autograde.grade import grade_submission
from sandbox.handle import COURSE_ROOT, Sandbox, readable_by_others
from sandbox.submission import clean_cell, read_submission, units_from_python
from grading import EXERCISES, SubmissionError, load_checks
from grading.core import handout_parameters

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "tests" / "redteam" / "reference_submission.py"
SEED = 7
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def skip_unless_ci(reason: str) -> None:
    """Skip a test that cannot run its real check here; under CI=true, fail instead."""
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(reason)
    pytest.skip(reason)


def run_cli(*args, cwd=None, timeout=180):
    return subprocess.run([sys.executable, "-m", "autograde", *map(str, args)], cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.fixture(scope="module")
def checks():
    return load_checks(include_hidden=True, seed=SEED)


# ----------------------------------------------------------------------------- protocol

def frame(payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + payload


@pytest.mark.parametrize("payload", [
    b'{"id": 1, "ok": true, "value": NaN}',
    b'{"id": 1, "ok": true, "value": Infinity}',
    b'{"id": 1, "ok": true, "value": -Infinity}',
    b'{"id": 1, "ok": true, "value": 1e999}',
    b'{"id": 1, "id": 2}',
    b'{"id": 12345678901234567890}',
    b'{"value": {"$float": "nan", "x": 1}}',
    b'{"value": {"$float": "NaN"}}',
    b'[1, 2]',
    b'\xff\xfe',
])
def test_decode_refuses_what_a_plain_answer_cannot_be(payload):
    with pytest.raises(protocol.ProtocolError):
        protocol.decode(payload)


@pytest.mark.parametrize("value", [1, True, None, {"a": 1.0}, [1.0, [2.0, None]], "x" * 20000,
                                   [[[[[[[[[[[[1.0]]]]]]]]]]]]])
def test_plain_refuses_anything_but_floats_strings_and_lists(value):
    with pytest.raises(protocol.ProtocolError):
        protocol.plain(value)


def test_plain_refuses_too_many_items():
    with pytest.raises(protocol.ProtocolError):
        protocol.plain([[0.0] * 60_000, [0.0] * 60_000])


finite_or_not = st.floats(allow_nan=True, allow_infinity=True)
answers = st.recursive(finite_or_not | st.text(max_size=20),
                       lambda inner: st.lists(inner, max_size=5), max_leaves=30)


@settings(max_examples=200, deadline=None)
@given(answers)
def test_worker_encoding_round_trips_through_the_strict_decoder(value):
    """The worker's encoder and the grader's decoder agree, non-finite floats included."""
    r, w = os.pipe()
    try:
        frames.write_frame(w, {"id": 1, "ok": True, "value": value})
        os.close(w)
        w = None
        reply = protocol.FrameReader(r).read(time.monotonic() + 5)
    finally:
        os.close(r)
        if w is not None:
            os.close(w)
    got = protocol.plain(reply["value"])

    def same(a, b):
        if isinstance(a, float):
            return type(b) is float and (a == b or (math.isnan(a) and math.isnan(b)))
        if isinstance(a, list):
            return type(b) is list and len(a) == len(b) and all(map(same, a, b))
        return a == b

    assert same(value, got)


def test_reader_refuses_an_oversized_frame_and_stops_at_the_deadline():
    r, w = os.pipe()
    try:
        os.write(w, struct.pack(">I", 2**31))
        with pytest.raises(protocol.ProtocolError):
            protocol.FrameReader(r).read(time.monotonic() + 5)
    finally:
        os.close(r), os.close(w)
    r, w = os.pipe()
    try:
        os.write(w, frame(b'{"id": 1')[:-2])  # half a frame, then silence
        started = time.monotonic()
        with pytest.raises(protocol.WorkerTimeout):
            protocol.FrameReader(r).read(time.monotonic() + 0.3)
        assert time.monotonic() - started < 2
    finally:
        os.close(r), os.close(w)


def test_reader_counts_everything_a_worker_sends(monkeypatch):
    monkeypatch.setattr(protocol, "MAX_TOTAL", 1000)
    r, w = os.pipe()
    try:
        os.write(w, frame(b'{"pad": "' + b"x" * 2000 + b'"}'))
        with pytest.raises(protocol.ProtocolError):
            protocol.FrameReader(r).read(time.monotonic() + 5)
    finally:
        os.close(r), os.close(w)


# ----------------------------------------------------------------------------- submissions

def test_python_statements_become_units_with_their_own_line_numbers():
    text = ("import numpy as np\n\n@staticmethod\ndef f(x):\n    return x\n"
            "a = 1; b = 2\nif __name__ == '__main__':\n    print('self test')\n"
            "from autograde.selfcheck import self_check\n")
    units, problem = units_from_python(text, "s.py")
    assert problem is None
    assert [u.label for u in units] == ["line 1", "line 3", "line 6", "line 7"]
    assert units[1].defines == {"f"} and units[2].defines == {"a", "b"}
    # Not padded (that would cost the square of the line count); the worker shifts lines.
    assert units[1].line == 3 and units[1].source.splitlines()[0] == "@staticmethod"


def test_a_python_syntax_error_names_the_line():
    units, problem = units_from_python("x = 1\ndef f(:\n    pass\n", "s.py")
    assert units == [] and "line 2" in problem


def test_ipython_lines_are_removed_without_moving_lines():
    code, changed = clean_cell("%matplotlib inline\nfor i in range(2):\n    !ls\nx = 1")
    assert changed and code.splitlines() == ["", "for i in range(2):", "    pass", "x = 1"]
    assert clean_cell("%%bash\necho hi")[0] is None
    assert clean_cell("%%time\nx = 1")[0] == "\nx = 1"


def test_a_continuation_line_that_begins_with_bang_or_percent_stays_python():
    """Only a line that starts a logical line is IPython's, as IPython reads it: black's
    style of breaking before ``!=`` or ``%`` inside brackets, a string's lines and a backslash
    continuation stay as they are."""
    cell = ('assert (n\n        != 0), "n"\ns = """\n!not a shell line\n"""\nr = (7\n     % 3)\n'
            'w = 1 + \\\n    2\n!ls\n  %time x = 1')
    code, changed = clean_cell(cell)
    assert changed and code.split("\n") == cell.split("\n")[:-2] + ["", "  pass"]
    ast.parse(code.replace("  pass", "pass"))


@pytest.mark.parametrize("odd", ["\x0c", "\x0b", "\x1c", "\x85", "\u2028", "\u2029"])
def test_units_keep_python_line_numbers_whatever_characters_splitlines_breaks_at(odd):
    """A form feed (an editor's page break) or U+2028 pasted into a docstring is whitespace or
    text to Python, a line break to ``str.splitlines``: the units must still be the statements."""
    page_break = odd if odd == "\x0c" else ""  # Python reads a form feed as whitespace, refuses the rest outside strings
    text = ('def f():\n    """a' + odd + 'b"""\n    return 1\n' + page_break + '\n'
            'def g():\r    return 2\r\nx = f() + g()\n')
    units, problem = units_from_python(text, "s.py")
    assert problem is None and [u.line for u in units] == [1, 5, 7]
    namespace: dict = {}
    for u in units:
        exec(compile("\n" * (u.line - 1) + u.source, "s.py", "exec"), namespace)
    assert namespace["x"] == 3


def test_an_answer_written_in_the_self_checks_cell_is_kept():
    """A student who merged cells: the function (and the numpy import, and the constants)
    written beside the self-check's import and call stay; the set-up itself goes, line for line."""
    from sandbox.submission import units_from_cells

    cell = ("import numpy as np\nfrom autograde.selfcheck import self_check\n"
            "E, A, B, ALPHA, BETA = 1.69, 406.0, 410.0, 0.34, 0.28\n"
            "def chinchilla_loss(N, D):\n    return E + A / N**ALPHA + B / D**BETA\n"
            "self_check('ex1', chinchilla_loss)\n")
    units, notes, _ = units_from_cells([{"cell_type": "code", "source": cell}])
    assert [u.line for u in units] == [1, 3] and "self_check" not in "".join(u.source for u in units)
    assert {"np", "chinchilla_loss", "E"} <= set().union(*(u.defines for u in units))
    assert "the functions defined in 1 cell of them were kept" in notes[0]
    plumbing_only = units_from_cells([{"cell_type": "code", "source": "from grading import load_checks\n"
                                                                       "public = load_checks()\n"}])
    assert plumbing_only[0] == [] and "were kept" not in plumbing_only[1][0]
    # the hand-out's Colab cell: standard-library imports and constants, no answer: it goes whole
    setup = ('import importlib, importlib.util, pathlib, subprocess, sys\nCOURSE_URL = "https://example.org/c"\n'
             'if importlib.util.find_spec("coursefig") is None:\n    sys.path.insert(0, "course")\n')
    assert units_from_cells([{"cell_type": "code", "source": setup}])[0] == []
    numpy_too = units_from_cells([{"cell_type": "code", "source": "import numpy as np\n"
                                                                    "from autograde.selfcheck import self_check\n"}])
    assert [u.source for u in numpy_too[0]] == ["import numpy as np\n"]


def test_notebook_units_skip_plumbing_and_remember_markdown_definitions(tmp_path):
    cells = [
        {"cell_type": "code", "source": "from grading import load_checks"},
        {"cell_type": "code", "source": ["import numpy as np\n", "def f(x):\n", "    return x"]},
        {"cell_type": "markdown", "source": "def chinchilla_loss(N, D):\n    return 0"},
        {"cell_type": "raw", "source": "def g():"},
        {"cell_type": "code", "source": "self_check('ex1', f)"},
    ]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    submission = read_submission(path)
    assert submission.problem is None
    # An import is a unit of its own (as a statement of a .py is): if it fails, the function
    # defined below it in the same cell still exists.
    assert [u.label for u in submission.units] == ["cell 2", "cell 2", "cell 5"]
    assert [u.defines for u in submission.units[:2]] == [{"np"}, {"f"}]
    assert [u.line for u in submission.units[:2]] == [1, 2]
    assert {"chinchilla_loss", "g"} <= submission.markdown_defs
    assert any("set up the self-check" in n for n in submission.notes)


def test_the_paired_markdown_form_reads_like_the_notebook():
    nb = read_submission(ROOT / "chapters" / "09-exercises.ipynb")
    md = read_submission(ROOT / "chapters" / "09-exercises.md")
    assert [u.source.strip() for u in nb.units] == [u.source.strip() for u in md.units]
    assert len(nb.units) > 10


# ----------------------------------------------------------------------------- sandbox walls

PROBE = '''
import json, os, resource, socket, sys
print("this goes nowhere")

def facts():
    out = {"cwd": os.getcwd(), "files": sorted(os.listdir(".")), "uid": os.getuid(),
           "path": sys.path, "env": dict(os.environ),
           "as": resource.getrlimit(resource.RLIMIT_AS)[0],
           "nproc": resource.getrlimit(resource.RLIMIT_NPROC)[0]}
    for name in ("solutions", "tests", "grading", "sandbox", "autograde", "assignments", "labs"):
        try:
            __import__(name)
            out[name] = "imported"
        except ImportError:
            out[name] = "absent"
    try:
        with open(COURSE_FILE) as f:
            out["course_file"] = "read"
    except OSError as exc:
        out["course_file"] = type(exc).__name__
    try:
        socket.create_connection(("1.1.1.1", 53), timeout=2)
        out["network"] = "connected"
    except OSError as exc:
        out["network"] = type(exc).__name__
    return json.dumps(out)

def kind(x):
    return type(x).__module__ + "." + type(x).__name__ + ":" + str(getattr(x, "dtype", ""))

def sleepy(seconds):
    import time
    time.sleep(seconds)
    return 1.0

def crash():
    os._exit(0)

def nothing():
    pass

class BadInput(ValueError):
    pass

def picky(x):
    raise BadInput("x must be positive")
'''


@pytest.fixture(scope="module")
def probe_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("probe") / "probe.py"
    course_file = COURSE_ROOT / "solutions" / "__init__.py"
    path.write_text(f"COURSE_FILE = {str(course_file)!r}\n" + PROBE)
    return path


@pytest.fixture(scope="module")
def facts(probe_file):
    os.environ["AUTOGRADE_TEST_CANARY"] = "grader-secret"
    try:
        with Sandbox(probe_file, timeout=10) as sandbox:
            return sandbox.isolation, json.loads(sandbox.call("facts"))
    finally:
        del os.environ["AUTOGRADE_TEST_CANARY"]


def test_the_working_folder_holds_only_the_submission(facts):
    _, f = facts
    assert f["files"] == ["probe.py"]


def test_the_course_cannot_be_imported_or_read(facts):
    mode, f = facts
    assert {f[name] for name in ("solutions", "tests", "grading", "sandbox", "autograde", "assignments", "labs")} == {"absent"}
    assert not any(str(COURSE_ROOT) in p for p in f["path"]), f["path"]
    if mode == "namespaces":
        assert f["course_file"] == "FileNotFoundError"


def test_the_environment_is_scrubbed(facts):
    _, f = facts
    assert "AUTOGRADE_TEST_CANARY" not in f["env"]
    assert f["env"].get("PATH") == ""
    assert not any(k.startswith("PYTHON") for k in f["env"])


def test_limits_and_privileges(facts):
    mode, f = facts
    assert f["as"] == 1024 * 1024 * 1024
    assert f["nproc"] == 16
    if IS_ROOT:
        assert f["uid"] != 0
    if mode in ("namespaces", "uid", "rlimits"):
        assert f["network"] != "connected"


def test_calls_cross_as_plain_data(probe_file):
    with Sandbox(probe_file, timeout=10) as sandbox:
        assert sandbox.call("kind", [1, 2]) == "numpy.ndarray:float64"
        assert sandbox.call("kind", 3) == "builtins.int:"
        assert sandbox.call("kind", "dp") == "builtins.str:"
        with pytest.raises(SubmissionError) as err:
            sandbox.call("picky", 1.0)
        assert err.value.kind == "raised" and err.value.exception_type == "ValueError"
        assert "BadInput: x must be positive" in err.value.message
        with pytest.raises(SubmissionError) as err:
            sandbox.call("nothing")
        assert err.value.kind == "not_plain" and "forget `return`" in err.value.message
        with pytest.raises(SubmissionError) as err:
            sandbox.call("chinchilla_loss", 1.0, 2.0)
        assert err.value.kind == "missing"


def test_a_hang_or_a_crash_costs_one_call_and_strikes_stop_repeats(probe_file):
    with Sandbox(probe_file, timeout=1.0) as sandbox:
        for _ in range(2):
            with pytest.raises(SubmissionError) as err:
                sandbox.call("sleepy", 30.0)
            assert err.value.kind == "timeout"
        started = time.monotonic()
        with pytest.raises(SubmissionError) as err:
            sandbox.call("sleepy", 30.0)
        assert "not called again" in err.value.message
        assert time.monotonic() - started < 0.5
        assert sandbox.call("kind", 3) == "builtins.int:"  # a fresh worker, the file replayed
        with pytest.raises(SubmissionError) as err:
            sandbox.call("crash")
        assert err.value.kind == "crashed" and "exited" in err.value.message
        assert sandbox.call("kind", 3) == "builtins.int:"


def test_a_test_budget_is_shared_by_its_calls(probe_file):
    with Sandbox(probe_file, timeout=5.0) as sandbox:
        with sandbox.deadline(0.6):
            with pytest.raises(SubmissionError) as err:
                sandbox.call("sleepy", 30.0)
            assert err.value.kind == "timeout"
            with pytest.raises(SubmissionError):
                sandbox.call("sleepy", 0.0)  # the budget is spent


@pytest.mark.parametrize("mode", ["uid", "rlimits"])
def test_weaker_modes_still_grade_the_reference(mode, checks):
    if mode == "uid" and not IS_ROOT:
        skip_unless_ci("the uid mode needs a root grader (CI runs as root)")
    report = grade_submission(REFERENCE, checks, isolation=mode)
    assert report.isolation == mode
    assert report.score == report.max_score == 100


def test_readable_by_others(tmp_path):
    folder = tmp_path / "course"
    folder.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(folder, 0o755)
    assert readable_by_others(folder) == readable_by_others(tmp_path)
    os.chmod(folder, 0o700)
    assert not readable_by_others(folder)


# ----------------------------------------------------------------------------- whole notebooks

def test_the_reference_scores_full_marks_as_py_notebook_and_markdown(checks):
    for path in (REFERENCE, ROOT / "chapters" / "09-exercises.ipynb",
                 ROOT / "chapters" / "09-exercises.md"):
        report = grade_submission(path, checks)
        assert report.score == report.max_score == 100, (path, report.problems)
        assert not report.grader_errors
        assert not report.problems, (path, report.problems)  # every cell ran, the plots too


REORDERED = """

def communication_time_per_step(model_params, num_layers, seq_len, batch_size, d_model,
                                bandwidth_tb_s, dp_rank=None, tp_rank=None):
    return (4 * model_params + 4 * num_layers * batch_size * seq_len * d_model) / (bandwidth_tb_s * 1e12)
"""


def test_the_hand_outs_names_in_another_order_are_called_by_name(tmp_path, checks):
    """The hand-out says the grader calls Exercise 4(a)'s function by its parameter names: a
    student who kept every name but wrote them in another order gets full marks, in the
    sandbox and in the notebook's self-check alike; renamed parameters still get the
    arguments in the hand-out's order."""
    from grading import grade_callable
    from grading.core import local_call

    path = tmp_path / "reordered.py"
    path.write_text(REFERENCE.read_text() + REORDERED)
    report = grade_submission(path, checks)
    assert report.score == report.max_score == 100, report.problems
    namespace: dict = {}
    exec(REORDERED, namespace)
    ex4 = [c for c in checks if c.exercise == "ex4"]
    results = grade_callable(lambda name: local_call(namespace[name], handout_parameters(name)), ex4)
    assert all(r.passed for _, r in results)
    renamed = {}
    exec("def chinchilla_loss(n, d):\n    return 1.69 + 406.0 / n**0.34 + 410.0 / d**0.28\n", renamed)
    assert local_call(renamed["chinchilla_loss"], handout_parameters("chinchilla_loss"))(1e9, 2e10) == \
        pytest.approx(1.69 + 406.0 / 1e9**0.34 + 410.0 / 2e10**0.28, rel=1e-12)


def test_the_hand_outs_signatures_are_the_references():
    """The names the grader calls by (the reference's signature in solutions/) are the ones
    the hand-out's stubs show."""
    text = (ROOT / "chapters" / "09-exercises.md").read_text()
    for exercise in EXERCISES:
        start = text.index(f"def {exercise.function}(")
        header = text[start:text.index("):", start) + 2]
        tree = ast.parse(header + "\n    pass\n")
        assert tuple(a.arg for a in tree.body[0].args.args) == handout_parameters(exercise.function)


def test_the_student_notebook_scores_zero_with_a_message_per_exercise(tmp_path, checks):
    subprocess.run([sys.executable, str(ROOT / "instructor" / "student_notebook.py"),
                    str(ROOT / "chapters" / "09-exercises.md"), "--out", str(tmp_path)],
                   check=True, capture_output=True, cwd=ROOT)
    report = grade_submission(tmp_path / "09-exercises.ipynb", checks)
    assert report.score == 0 and not report.grader_errors
    exercises = report.exercises()
    assert [e["id"] for e in exercises] == [e.id for e in EXERCISES]
    for exercise in exercises:
        for test in exercise["tests"]:
            assert "NotImplementedError" in test["feedback"] or "Not implemented" in test["feedback"]


# ----------------------------------------------------------------------------- command line

def test_cli_reports_for_one_submission(tmp_path):
    done = run_cli(REFERENCE, "--json", tmp_path / "r.json", "--csv", tmp_path / "r.csv",
                   "--gradescope", tmp_path / "results.json", "--seed", SEED)
    assert done.returncode == 0, done.stderr
    assert "Total: 100 / 100 points" in done.stdout
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["score"] == report["max_score"] == 100 and report["seed"] == SEED
    for exercise in report["exercises"]:
        assert set(exercise) >= {"name", "score", "max_score", "tests"}
        assert exercise["score"] == sum(t["points"] for t in exercise["tests"])
        for test in exercise["tests"]:
            assert set(test) >= {"name", "passed", "points", "max_points", "feedback"}
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == sum(t["score"] for t in results["tests"]) == 100
    hidden = {c.name for c in load_checks(seed=SEED) if c.hidden}
    for test in results["tests"]:
        assert set(test) >= {"name", "score", "max_score", "output", "visibility"}
        is_hidden = test["name"].split(": ", 1)[1] in hidden
        assert test["visibility"] == ("after_published" if is_hidden else "visible")
    # The top-level output names the hidden tests and their points, never their results.
    assert not re.search(r"[✓✗] \w+_hidden", results["output"])
    assert "ex1_hidden_random  3 points (hidden)" in results["output"]
    rows = list(csv.DictReader((tmp_path / "r.csv").open()))
    assert rows[0]["score"] == "100" and rows[0]["ex1"] == "10"


def test_cli_grades_a_class_folder_and_exits_zero_whatever_the_scores(tmp_path):
    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    (klass / "bob").mkdir()
    (klass / "alice" / "exercises.py").write_text(REFERENCE.read_text())
    (klass / "bob" / "exercises.py").write_text("")
    (klass / "bob" / "conftest.py").write_text("raise SystemExit(1)\n")
    (klass / ".ipynb_checkpoints").mkdir()
    (klass / ".ipynb_checkpoints" / "old.py").write_text("")
    assert [p.relative_to(klass).as_posix() for p in find_submissions(klass)] == \
        ["alice/exercises.py", "bob/exercises.py"]
    done = run_cli(klass, "--jobs", "2", "--json", tmp_path / "all.json",
                   "--csv", tmp_path / "all.csv", "--seed", SEED)
    assert done.returncode == 0, done.stderr
    data = json.loads((tmp_path / "all.json").read_text())
    scores = {k: v["score"] for k, v in data["submissions"].items()}  # keyed by student id
    assert scores == {"alice": 100, "bob": 0}
    assert len(list(csv.DictReader((tmp_path / "all.csv").open()))) == 2


@pytest.mark.parametrize("args, message", [
    (["no-such-file.py"], "no such file"),
    (["pyproject.toml"], "unsupported file type"),
    ([str(REFERENCE), "--jobs", "0"], "--jobs"),
    ([str(REFERENCE), "--timeout", "-1"], "--timeout"),
    ([str(REFERENCE), str(ROOT / "chapters" / "09-exercises.ipynb"), "--gradescope", "x.json"],
     "exactly one submission"),
    ([str(REFERENCE), "--similarity"], "--class-report"),  # else nothing would show the pairs
])
def test_cli_refuses_bad_arguments_with_a_clear_message(args, message):
    done = run_cli(*args)
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr  # one line, no usage block


def test_the_namespace_sandbox_without_switching_uid(tmp_path):
    """Root of a user namespace that maps no other uid (like a rootless container): the
    workers drop their capabilities into a nested user namespace instead of changing uid."""
    import shutil

    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-r", "true"], capture_output=True).returncode != 0:
        skip_unless_ci("unprivileged user namespaces are not available")
    redteam = ROOT / "tests" / "redteam" / "submissions"
    done = subprocess.run(
        ["unshare", "-r", sys.executable, "-m", "autograde", str(REFERENCE),
         str(redteam / "os_exit_at_import.py"), str(redteam / "read_test_files.py"),
         "--json", str(tmp_path / "r.json"), "--seed", str(SEED), "--timeout", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    reports = json.loads((tmp_path / "r.json").read_text())["submissions"]
    scores = {Path(v["submission"]).name: (v["score"], v["isolation"]) for v in reports.values()}
    assert scores == {"reference_submission.py": (100, "namespaces"),
                      "os_exit_at_import.py": (70, "namespaces"),
                      "read_test_files.py": (85, "namespaces")}  # loses Exercise 4(a), 15 points


def test_a_slow_file_as_a_whole_is_cut_off_and_says_so(tmp_path):
    path = tmp_path / "slow.py"
    path.write_text("import time\n" + "time.sleep(0.4)\n" * 4 + REFERENCE.read_text())
    sandbox = Sandbox(path, timeout=1.0)
    sandbox.load_budget = 1.0
    with sandbox:
        with pytest.raises(SubmissionError) as err:
            sandbox.call("chinchilla_loss", 1e9, 1e10)
    assert err.value.kind == "missing"
    assert "as a whole ran for more than 1 s" in err.value.message
    late = [p for p in sandbox.problems if "as a whole ran for more than 1 s" in p]
    assert len(late) == 1 and "statements after it" in late[0], sandbox.problems  # one line, not one per statement


def test_a_file_that_ran_out_of_time_is_not_run_again_for_a_regrade(tmp_path, monkeypatch, checks):
    """Exercise 2's regrade appends a cell and runs the file again; where the file ran past
    its time as a whole, the appended cell would be skipped too, and the second run would
    only double the time the student waits (measured: 120 s instead of 60 for a notebook of
    slow cells)."""
    import autograde.grade as grade

    started = []

    class Short(Sandbox):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.load_budget = 1.0
            started.append(self)

    monkeypatch.setattr(grade, "Sandbox", Short)
    path = tmp_path / "slow.py"
    path.write_text("import time\n" + "time.sleep(0.4)\n" * 4 + REFERENCE.read_text())
    report = grade_submission(path, checks, timeout=1.0)
    assert report.score == 0 and len(started) == 1
    assert sum("as a whole ran for more than 1 s" in p for p in report.problems) == 1


def test_very_many_statements_are_run_in_groups_with_their_line_numbers(tmp_path):
    path = tmp_path / "long.py"
    path.write_text("".join(f"x{i} = {i}\n" for i in range(2000)) +
                    "def chinchilla_loss(N, D):\n    return 1 / 0\n")
    submission = read_submission(path)
    assert len(submission.units) <= 500
    with Sandbox(path, timeout=10) as sandbox:
        with pytest.raises(SubmissionError) as err:
            sandbox.call("chinchilla_loss", 1.0, 1.0)
    assert "ZeroDivisionError" in err.value.message and "line 2002" in err.value.message


def test_class_folders_skip_symbolic_links(tmp_path):
    (tmp_path / "real.py").write_text("x = 1\n")
    (tmp_path / "link.py").symlink_to(COURSE_ROOT / "solutions" / "scaling.py")
    assert find_submissions(tmp_path) == [tmp_path / "real.py"]
