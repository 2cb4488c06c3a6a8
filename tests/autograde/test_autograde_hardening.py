"""The grader against whole classes: no channel between submissions, no file that ends a
class run, bounded parsing, clean output. (Single hostile files: test_autograde_redteam.py.)

Every class here is generated at run time (one of them holds a 9 MB statement, which does
not belong in the repository) and graded from the command line, as an instructor would.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sandbox.handle import MAX_WORK_DEPTH, Sandbox, folder_usage, remove_tree
from sandbox.submission import (COURSE_PLUMBING, MAX_LINES, MAX_TOKENS, code_too_large,
                                  read_submission, units_from_python, yaml_aliases)
from sandbox.textsafe import csv_cell, file_name
from tests.redteam import build
from tests.redteam.cases import Case
from tests.redteam.leftovers import in_ci, leftover_processes

ROOT = Path(__file__).resolve().parents[2]
REDTEAM = ROOT / "tests" / "redteam" / "submissions"
REFERENCE = ROOT / "tests" / "redteam" / "reference_submission.py"
SEED = 11


@pytest.fixture(scope="module", autouse=True)
def strong_isolation():
    """Hostile code runs here: as in the red-team suite, only with the namespace or uid
    sandbox (a failure under CI, a skip elsewhere)."""
    from sandbox.handle import zygote_for

    if zygote_for("auto").isolation == "rlimits":
        reason = "these tests need the namespace or uid sandbox; only rlimits is available here"
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def autograde(*args, cwd=ROOT, timeout=180):
    """Run the command line under a wrapper that reports the peak resident memory of the
    grader and everything it started (KiB, from getrusage of the finished children)."""
    wrapper = ("import resource, subprocess, sys\n"
               "code = subprocess.run(sys.argv[1:]).returncode\n"
               "print('PEAK_KIB', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,"
               " file=sys.stderr)\nsys.exit(code)\n")
    started = time.monotonic()
    args = [os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args]
    done = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "autograde",
                           *args], cwd=cwd, capture_output=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.monotonic() - started
    peak = int(done.stderr.rsplit(b"PEAK_KIB", 1)[1].split()[0])
    return done, seconds, peak


def rows(path: Path) -> dict:
    with path.open(newline="", encoding="utf-8") as f:
        return {row["submission"]: row for row in csv.DictReader(f)}


# ----------------------------------------------------------------------------- relay

PUBLISHER = Case("publisher.py", "a correct submission whose daemon publishes the exercise's "
                 "constants as POSIX read locks on numpy's __init__.py, and outlives grading",
                 prefix='''
def publish_as_locks():
    import fcntl
    import os
    import signal
    import struct
    import time

    try:
        os.setsid()
    except OSError:
        pass
    os._exit = lambda *args: None
    if os.fork() == 0:
        fd = os.open(np.__file__, os.O_RDONLY)
        for slot, value in enumerate((1.69, 406.0, 410.0, 0.34, 0.28)):
            start = slot * 10**7 + round(value * 1000)
            lock = struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, start, 1, 0)
            try:
                fcntl.fcntl(fd, fcntl.F_SETLK, lock)
            except OSError:
                pass
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        while True:
            time.sleep(0.05)


publish_as_locks()
''')
READER = Case("reader.py", "no implementation of exercise 1: reads a classmate's published "
              "constants back with F_GETLK", replace={"ex1": '''
import fcntl
import os
import struct


def published():
    fd = os.open(np.__file__, os.O_RDONLY)
    try:
        values = []
        for slot in range(5):
            query = struct.pack("hhqqi4x", fcntl.F_WRLCK, 0, slot * 10**7, 10**7, 0)
            kind, _, start, _, _ = struct.unpack("hhqqi4x", fcntl.fcntl(fd, fcntl.F_GETLK, query))
            if kind == fcntl.F_UNLCK:
                raise LookupError("nothing was published")
            values.append((start - slot * 10**7) / 1000)
        return values
    finally:
        os.close(fd)


def chinchilla_loss(N, D):
    E, A, B, alpha, beta = published()
    return E + A / N**alpha + B / D**beta
'''})


def test_no_relay_through_posix_locks_between_two_submissions(tmp_path):
    """A correct submission's daemon publishes answers as byte-range locks (kernel state,
    not file content) on a file every sandbox can read; a classmate with no implementation
    reads them back. Graded together (concurrently), and the reader again alone afterwards,
    the reader's exercise 1 earns nothing, and three seconds later nothing is left."""
    klass = tmp_path / "class"
    klass.mkdir()
    (klass / "publisher.py").write_text(build.python_text(PUBLISHER))
    (klass / "reader.py").write_text(build.python_text(READER))
    done, _, _ = autograde(klass, "--jobs", "2", "--json", tmp_path / "class.json",
                           "--seed", SEED, "--timeout", "3", "--quiet")
    assert done.returncode == 0, done.stderr
    graded = json.loads((tmp_path / "class.json").read_text())["submissions"]
    scores = {Path(v["submission"]).name: {e["id"]: e["score"] for e in v["exercises"]}
              for v in graded.values()}
    assert scores == {"publisher.py": {"ex1": 10, "ex2": 20, "ex3": 30, "ex4": 15, "ex4b": 25},
                      "reader.py": {"ex1": 0, "ex2": 20, "ex3": 30, "ex4": 15, "ex4b": 25}}
    done, _, _ = autograde(klass / "reader.py", "--json", tmp_path / "alone.json",
                           "--seed", SEED, "--timeout", "3", "--quiet")
    assert done.returncode == 0, done.stderr
    alone = json.loads((tmp_path / "alone.json").read_text())
    assert {e["id"]: e["score"] for e in alone["exercises"]}["ex1"] == 0
    time.sleep(3)
    assert leftover_processes() == []


def test_without_a_pid_namespace_nothing_outlives_grading_either():
    """The weakest mode (no namespaces, no root: the grader's own uid) has only the process
    group; seccomp keeps the daemon of setsid_daemon.py from leaving it."""
    from autograde.grade import grade_submission
    from grading import load_checks

    report = grade_submission(REDTEAM / "setsid_daemon.py", load_checks(seed=SEED),
                              timeout=3, isolation="rlimits")
    assert report.isolation == "rlimits"
    assert {e["id"]: e["score"] for e in report.exercises()} == {
        "ex1": 10, "ex2": 20, "ex3": 30, "ex4": 0, "ex4b": 25}
    time.sleep(3)
    assert leftover_processes() == []


def test_kernel_channels_are_closed_inside_the_sandbox(tmp_path):
    """Each system call that could reach another sandbox, or outlive this one, is refused."""
    probe = tmp_path / "probe.py"
    probe.write_text('''
import errno, fcntl, os, socket, struct

def attempt(action):
    try:
        action()
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return "allowed"

def probe():
    fd = os.open(__file__, os.O_RDONLY)
    lock = struct.pack("hhqqi4x", fcntl.F_RDLCK, 0, 0, 1, 0)
    return ",".join(f"{name}={attempt(action)}" for name, action in [
        ("setsid", os.setsid), ("setpgid", lambda: os.setpgid(0, 0)),
        ("flock", lambda: fcntl.flock(fd, fcntl.LOCK_SH)),
        ("setlk", lambda: fcntl.fcntl(fd, fcntl.F_SETLK, lock)),
        ("getlk", lambda: fcntl.fcntl(fd, fcntl.F_GETLK, lock)),
        ("socket", lambda: socket._socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
        ("getfd", lambda: fcntl.fcntl(fd, fcntl.F_GETFD)),
    ])
''')
    with Sandbox(probe, timeout=10) as sandbox:
        result = dict(item.split("=") for item in sandbox.call("probe").split(","))
    assert result == {"setsid": "EPERM", "setpgid": "EPERM", "flock": "EPERM",
                      "setlk": "EPERM", "getlk": "EPERM", "socket": "EPERM",
                      "getfd": "allowed"}


def test_namespaces_and_file_watches_are_refused_inside_the_sandbox(tmp_path):
    """clone with a CLONE_NEW* flag is refused (its child would be root of a new user
    namespace, able to mount), clone3 says ENOSYS (as under Docker's profile, so the C
    library falls back to clone), and inotify/fanotify, which would report a classmate's
    opens of the shared read-only files, are refused; a plain fork still works."""
    probe = tmp_path / "probe.py"
    probe.write_text('''
import ctypes, errno, os, platform

libc = ctypes.CDLL(None, use_errno=True)
CLONE = {"x86_64": 56, "aarch64": 220}[platform.machine()]

def result(value):
    if value == 0:  # the child of a clone that was allowed
        os._exit(0)
    if value > 0:
        os.waitpid(value, 0)
        return "allowed"
    return errno.errorcode.get(ctypes.get_errno(), "?")

def probe():
    return ",".join(f"{name}={result(call())}" for name, call in [
        ("clone_newuser", lambda: libc.syscall(CLONE, 0x10000000 | 17, 0, 0, 0, 0)),
        ("clone_newnet", lambda: libc.syscall(CLONE, 0x40000000 | 17, 0, 0, 0, 0)),
        ("clone3", lambda: libc.syscall(435, None, 0)),
        ("inotify", lambda: libc.inotify_init1(0)),
        ("fanotify", lambda: libc.fanotify_init(0, 0)),
        ("fork", lambda: libc.syscall(CLONE, 17, 0, 0, 0, 0)),
    ])
''')
    with Sandbox(probe, timeout=10) as sandbox:
        result = dict(item.split("=") for item in sandbox.call("probe").split(","))
    assert result == {"clone_newuser": "EPERM", "clone_newnet": "EPERM", "clone3": "ENOSYS",
                      "inotify": "EPERM", "fanotify": "EPERM", "fork": "allowed"}


def test_parsing_is_linear_in_what_a_file_holds():
    """Quotes and backslashes in a docstring, and blank lines in a cell, once made the
    grader's regular expressions quadratic (200 KB: minutes, with every grading thread
    stopped, since ``re`` holds the GIL). Now 400 KB of either is read in well under the
    generous bound below (milliseconds on a quiet machine)."""
    docstring = 'def f():\n    """\'' + "\\\'" * 200_000 + '\\\n    """\n    return 1\n'
    compile(docstring, "docstring.py", "exec")  # valid Python
    blank = {"cells": [{"cell_type": "code", "source": "x = 1\n" + " \n" * 200_000 + "y = 2"}]}
    started = time.monotonic()
    assert code_too_large(docstring) is None
    assert COURSE_PLUMBING.search(blank["cells"][0]["source"]) is None
    assert time.monotonic() - started < 5


def test_a_sparse_markdown_file_is_refused_unread(tmp_path):
    """A 2 GB sparse .md (a few bytes on disk) beside a correct notebook: refused by its
    size, never read whole; the class run completes within the memory bound."""
    klass = tmp_path / "class"
    (klass / "alice").mkdir(parents=True)
    with open(klass / "alice" / "notes.md", "wb") as f:
        f.write(b"---\njupytext:\n  formats: md:myst\n---\n")
        f.truncate(2 * 1024**3)
    shutil.copy(REFERENCE, klass / "bob.py")
    done, seconds, peak_kib = autograde(klass, "--json", tmp_path / "r.json", "--seed", SEED)
    assert done.returncode == 0, done.stderr
    graded = json.loads((tmp_path / "r.json").read_text())["submissions"]
    assert peak_kib < 1024 * 1024, peak_kib
    assert [v["score"] for k, v in graded.items() if "bob" in k] == [100]


def test_stored_outputs_do_not_count_toward_the_size_limit(tmp_path):
    """25 MB of stored output (figures kept in the notebook) is ignored, not "too large"."""
    notebook = json.loads((REDTEAM / "reference.ipynb").read_text())
    notebook["cells"][1]["outputs"] = [{"output_type": "display_data", "metadata": {},
                                        "data": {"image/png": "A" * (25 * 1024 * 1024)}}]
    path = tmp_path / "big.ipynb"
    path.write_text(json.dumps(notebook))
    submission = read_submission(path)
    assert submission.problem is None and submission.units


def test_a_deep_folder_tree_is_measured_and_removed_without_recursion(tmp_path):
    """3,000 nested folders (a path far past PATH_MAX), unreadable ones among them, and a
    file at the bottom: measured with a bounded cost and removed whole."""
    top = tmp_path / "deep"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(3000):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    os.close(fd)
    os.chmod(top / "d" / "d", 0)
    entries, _, depth = folder_usage(top)
    assert depth > MAX_WORK_DEPTH and entries <= MAX_WORK_DEPTH + 3
    os.chmod(top / "d" / "d", 0o700)
    remove_tree(top)
    assert not top.exists()


@pytest.mark.parametrize("attack", ["files", "depth"])
def test_a_submission_cannot_fill_the_disk_without_namespaces(tmp_path, attack):
    """In the uid mode (no tmpfs of its own) a function that creates 20,000 files, or
    folders 1,000 deep, is stopped by the grader's folder check and told why; the
    submission's folder is gone afterwards."""
    from sandbox.handle import can_switch_uid
    from grading import SubmissionError

    if not can_switch_uid():
        pytest.skip("the uid mode needs root")
    probe = tmp_path / "flood.py"
    probe.write_text('''
import os

def flood(kind):
    if kind == "files":
        for i in range(20_000):
            open(f"f{i}", "w").close()
    else:
        for i in range(1_000):
            os.mkdir("d")
            os.chdir("d")
    return "done"
''')
    with Sandbox(probe, timeout=20, isolation="uid") as sandbox:
        with pytest.raises(SubmissionError, match="wrote more to disk than a submission may"):
            sandbox.call("flood", attack)
        folder = sandbox._dir
    assert not folder.exists()


def test_one_memory_limit_covers_all_of_a_submissions_processes(tmp_path):
    """15 children of 150 MB each (2.2 GB in all) under a 512 MB limit: each child is
    within its own address-space limit, the group is not, and the grader stops it."""
    from grading import SubmissionError

    probe = tmp_path / "children.py"
    probe.write_text('''
import os, time

def spread():
    for _ in range(15):
        if os.fork() == 0:
            block = bytearray(150 * 1024 * 1024)
            for i in range(0, len(block), 4096):
                block[i] = 1
            time.sleep(60)
            os._exit(0)
    time.sleep(30)
    return "done"
''')
    with Sandbox(probe, timeout=20, memory_mb=512) as sandbox:
        with pytest.raises(SubmissionError, match="more than the 512 MB a submission may use"):
            sandbox.call("spread")


@pytest.fixture
def open_class_folder():
    """A class folder that other users may read, as instructors' folders often are."""
    folder = Path(tempfile.mkdtemp(prefix="autograde-class-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_uid_mode_hides_classmates_and_the_grader_command_line(open_class_folder):
    """Without namespaces (the uid mode), a submission used to read the grader's command
    line in /proc, find the class folder there and run a classmate's file as its own."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        if in_ci():
            pytest.fail("the uid mode needs a root grader, and CI runs as root")
        pytest.skip("the uid mode needs a root grader")
    shutil.copy(REFERENCE, open_class_folder / "classmate.py")
    shutil.copy(REDTEAM / "proc_cmdline_thief.py", open_class_folder)
    for path in open_class_folder.iterdir():
        os.chmod(path, 0o644)
    done, _, _ = autograde(open_class_folder, "--isolation", "uid", "--json",
                           open_class_folder / "r.json", "--seed", SEED, "--quiet")
    assert done.returncode == 0, done.stderr
    graded = json.loads((open_class_folder / "r.json").read_text())["submissions"]
    scores = {Path(v["submission"]).name: {e["id"]: e["score"] for e in v["exercises"]}
              for v in graded.values()}
    assert scores == {"classmate.py": {"ex1": 10, "ex2": 20, "ex3": 30, "ex4": 15, "ex4b": 25},
                      "proc_cmdline_thief.py": {"ex1": 10, "ex2": 0, "ex3": 30, "ex4": 15, "ex4b": 25}}
    assert {v["isolation"] for v in graded.values()} == {"uid"}


# ----------------------------------------------------------------------------- one class

def test_a_class_of_hostile_files_grades_to_one_row_each(tmp_path):
    """A correct file, a 9 MB statement, 60,000 one-line statements, a name that is not
    UTF-8, a lone surrogate in a failing cell and nested YAML anchors: six CSV rows, each
    with its own outcome, within a minute, the grader's peak memory under 1 GB."""
    klass = tmp_path / "class"
    klass.mkdir()
    reference = REFERENCE.read_text()
    (klass / "correct.py").write_text(reference)
    (klass / "big_statement.py").write_text('BLOB = "' + "x" * 9_000_000 + '"\n' + reference)
    (klass / "many_statements.py").write_text("x = 0\n" * 60_000 + reference)
    (klass / os.fsdecode(b"caf\xe9.py")).write_text(reference)
    shutil.copy(REDTEAM / "lone_surrogate.ipynb", klass)
    shutil.copy(REDTEAM / "yaml_anchors.md", klass)
    done, seconds, peak_kib = autograde(klass, "--jobs", "2", "--csv", tmp_path / "grades.csv",
                                        "--json", tmp_path / "grades.json", "--seed", SEED,
                                        "--timeout", "10")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"\x1b" not in done.stdout
    table = rows(tmp_path / "grades.csv")
    scores = {Path(name).name: row["score"] for name, row in table.items()}
    assert scores == {"correct.py": "100", "big_statement.py": "100",
                      "many_statements.py": "100", "caf\\xe9.py": "100",
                      "lone_surrogate.ipynb": "90", "yaml_anchors.md": "0"}
    problems = {Path(report["submission"]).name: " ".join(report["problems"]) for report in
                json.loads((tmp_path / "grades.json").read_text())["submissions"].values()}
    assert "9.0 MB of code, more than the 2 MB" in problems["big_statement.py"]
    assert "YAML anchors" in problems["yaml_anchors.md"]
    assert "\\ud800" in problems["lone_surrogate.ipynb"]
    assert problems["correct.py"] == problems["many_statements.py"] == ""
    assert seconds < 60, seconds
    assert peak_kib < 1024 * 1024, peak_kib
    print(f"six-file class: {seconds:.1f} s, peak resident memory {peak_kib / 1024:.0f} MiB")


def test_files_too_large_to_parse_are_refused_before_parsing(tmp_path):
    """20 MB of dense code (its syntax tree would take about 10 GB) and 150,000 lines of
    `0` (the grader once padded each unit with a newline per preceding line): each gets a
    row that says why, quickly and within the memory bound."""
    klass = tmp_path / "class"
    klass.mkdir()
    (klass / "dense.py").write_text("x = [" + "0," * 10_000_000 + "]\n")
    (klass / "zeros.py").write_text("0\n" * 150_000)
    done, seconds, peak_kib = autograde(klass, "--json", tmp_path / "r.json", "--seed", SEED)
    assert done.returncode == 0, done.stderr
    graded = json.loads((tmp_path / "r.json").read_text())["submissions"]
    problems = {Path(v["submission"]).name: " ".join(v["problems"]) for v in graded.values()}
    assert "more than 250,000 tokens" in problems["dense.py"]
    assert "150,001 lines, more than the 100,000" in problems["zeros.py"]
    assert {v["score"] for v in graded.values()} == {0}
    assert peak_kib < 1024 * 1024 and seconds < 60, (peak_kib, seconds)


# ----------------------------------------------------------------------------- output

def test_console_and_csv_show_hostile_text_as_plain_text(tmp_path):
    klass = tmp_path / "class"
    klass.mkdir()
    shutil.copy(REDTEAM / "ansi_escape_report.py", klass)
    (klass / "=HYPERLINK(1).py").write_text(REFERENCE.read_text())
    (klass / "\x1b[2Jclear.py").write_text(REFERENCE.read_text())
    done, _, _ = autograde(klass, "--csv", tmp_path / "grades.csv", "--seed", SEED)
    assert done.returncode == 0, done.stderr
    assert b"\x1b" not in done.stdout + done.stderr
    assert b"\\x1b[2Jclear.py" in done.stdout
    names = set(rows(tmp_path / "grades.csv"))
    assert {name.rsplit("/", 1)[-1].removeprefix("'") for name in names} == {  # ' : not a formula
        "ansi_escape_report.py", "=HYPERLINK(1).py", "\\x1b[2Jclear.py"}
    assert all(not name.startswith(("=", "+", "-", "@")) for name in names)
    alone, _, _ = autograde(REDTEAM / "ansi_escape_report.py", "--seed", SEED)
    assert b"\x1b" not in alone.stdout and b"\\x1b[2J\\x1b[H" in alone.stdout


def test_text_helpers():
    assert file_name(os.fsdecode(b"caf\xe9\x1b.py")) == "caf\\xe9\\x1b.py"
    assert csv_cell("=1+1") == "'=1+1" and csv_cell("-2") == "'-2" and csv_cell("a=b") == "a=b"
    assert csv_cell("\ud800") == "\\ud800"


def test_gradescope_writes_results_even_when_the_grader_fails(tmp_path):
    (tmp_path / "submission").mkdir()
    shutil.copy(REFERENCE, tmp_path / "submission" / "exercises.py")
    results = tmp_path / "results" / "results.json"
    done = subprocess.run([sys.executable, "-m", "autograde.gradescope",
                           str(tmp_path / "submission"), str(results), "--timeout", "0",
                           "--seed", str(SEED)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 3, done.stderr
    data = json.loads(results.read_text())
    assert data["score"] == 0 and "grader" in json.dumps(data)


def test_gradescope_shows_uploaded_names_escaped(tmp_path):
    """A file name with newlines cannot forge a line such as "All tests passed." in the
    output Gradescope shows: names are shown escaped, on the line that names them."""
    folder = tmp_path / "submission"
    folder.mkdir()
    forged = "x\n\nAll tests passed.\nScore: 100\n.py"
    shutil.copy(REFERENCE, folder / "exercises.py")
    (folder / forged).write_text("x = 1\n")
    results = tmp_path / "results.json"
    done = subprocess.run([sys.executable, "-m", "autograde.gradescope", str(folder),
                           str(results), "--seed", str(SEED)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    output = json.loads(results.read_text())["output"]
    assert "x\\n\\nAll tests passed.\\nScore: 100\\n.py" in output
    assert not any(line.strip() in ("All tests passed.", "Score: 100")
                   for line in output.splitlines())


def test_a_reply_that_came_in_time_counts_however_late_the_grader_reads_it():
    """A grading thread kept from running past its deadline (another thread held the GIL)
    still finds the reply the worker sent in time; with nothing in the pipe, it times out."""
    from sandbox import protocol
    from sandbox.confined import frames

    r, w = os.pipe()
    try:
        reader = protocol.FrameReader(r)
        frames.write_frame(w, {"id": 1, "ok": True, "value": 2.0})
        assert reader.read(time.monotonic() - 5)["value"] == 2.0
        with pytest.raises(protocol.WorkerTimeout):
            reader.read(time.monotonic() - 5)
    finally:
        os.close(r)
        os.close(w)


# ----------------------------------------------------------------------------- bounds

def test_parsing_bounds_are_checked_before_parsing():
    assert code_too_large("x = 0\n" * 1000) is None
    assert "lines" in code_too_large("\n" * (MAX_LINES + 1))
    assert "lines" in code_too_large("\r" * (MAX_LINES + 1))  # old Mac line ends: lines to Python too
    assert code_too_large("\r\n" * (MAX_LINES - 1)) is None  # Windows line ends count once
    assert "tokens" in code_too_large("x = [" + "0," * MAX_TOKENS + "]")
    assert code_too_large('x = "' + "a b " * 2_000_000 + '"') is None  # one token
    assert yaml_aliases("a: &x [1]\nb: [*x, *x]\n")
    assert not yaml_aliases("y = mask & other\nf(*other)\n")


def test_units_are_not_padded(tmp_path):
    """20,000 statements: the units' text grows with the file, not with its square (and
    when they are merged into at most 500 groups, blank lines keep the lines in place)."""
    text = "x = 0\n\n" * 20_000
    units, problem = units_from_python(text, "long.py")
    assert problem is None and len(units) == 20_000
    assert sum(len(u.source) for u in units) == len("x = 0\n") * 20_000
    path = tmp_path / "long.py"
    path.write_text(text)
    merged = read_submission(path).units
    assert len(merged) == 500 and sum(len(u.source) for u in merged) < len(text)
    assert [u.line for u in merged[:3]] == [1, 81, 161]  # 40 statements, 2 lines each
    assert merged[1].source.splitlines()[2] == "x = 0"  # line 83 of the file


def test_a_check_whose_expected_values_cannot_be_loaded_is_a_grader_error(monkeypatch):
    """The public answers (grading/public_expected.json) or the hidden reference failing is
    the grader's fault: the row says "grader error" and the Gradescope entry exits 3, as the
    guide promises, instead of a silent zero for the student's correct work."""
    from autograde import reports
    from autograde.grade import grade_submission
    from grading import framework, load_checks

    def broken(*args, **kwargs):
        raise FileNotFoundError("public_expected.json")

    monkeypatch.setattr(framework, "public_probes", broken)
    report = grade_submission(REFERENCE, load_checks(include_hidden=True, seed=SEED), timeout=5)
    assert report.grader_errors and "FileNotFoundError" in report.grader_errors[0]
    assert reports.status(report) == "grader error"
    hidden = sum(c.points for c, r in report.results if c.hidden)
    assert report.score == pytest.approx(hidden, abs=1e-9)  # what could be checked still counts
    assert all("Please tell your instructor" in r.feedback for c, r in report.results if not c.hidden)
