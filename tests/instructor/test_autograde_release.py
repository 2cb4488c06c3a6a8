"""`make student-release` and `make gradescope`: what goes out, what stays in, and that both
work where the course's own folder is out of reach."""
from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from instructor import release
from autograde.gradescope import pick_submission

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    base = tmp_path_factory.mktemp("release")
    here = os.getcwd()
    os.chdir(base)
    try:  # a relative --out, as the Makefile passes it
        assert release.main(["student", "--out", "student"]) == 0  # verifies itself
    finally:
        os.chdir(here)
    return base / "student"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return release.build_gradescope(tmp_path_factory.mktemp("gradescope"), verify=False)


def test_student_release_leaves_out_answers_hidden_tests_and_instructor_material(student):
    files = {p.relative_to(student).as_posix() for p in student.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts}
    assert not [f for f in files if f.startswith(("tests/redteam/", "benchmarks/"))]
    assert "book/instructors.md" not in files and "Makefile" not in files
    assert "grading/independent.py" not in files and "grading/mistakes.py" not in files
    assert "instructor/release.py" not in files and "instructor/student_notebook.py" not in files
    assert {f for f in files if f.startswith("grading/")} == \
        {f"grading/{name}" for name in __import__("grading").STUDENT_RELEASE_FILES}
    assert {f for f in files if f.startswith("tests/")} == set(release.OLD_NAME_SHIMS)
    for name in ("ex1.py", "ex2.py", "ex3.py", "ex4.py"):
        text = (student / "grading" / name).read_text()
        assert "hidden=True" not in text
        # The hidden checks' generators are gone: hidden_checks returns [] and nothing else. (A
        # check may still draw fresh random probes of its own, as Exercise 2's guard does.)
        import ast

        hidden = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "hidden_checks"]
        assert len(hidden) == 1 and ast.unparse(hidden[0].body[-1]) == "return []", name
        assert all(isinstance(b, (ast.Return, ast.Expr)) for b in hidden[0].body), name
        ast.parse(text)


def test_student_release_has_the_student_notebook_not_the_solutions(student):
    master = (ROOT / "chapters" / "09-exercises.md").read_text()
    for suffix in (".md", ".ipynb"):
        text = (student / "chapters" / ("09-exercises" + suffix)).read_text()
        assert "### BEGIN SOLUTION" not in text
        assert "NotImplementedError" in text
    # the body of the first solution region of the master is gone from the release
    solution = master.split("### BEGIN SOLUTION", 1)[1].split("### END SOLUTION", 1)[0].strip()
    assert solution and solution not in (student / "chapters" / "09-exercises.md").read_text()


def test_student_release_verification_catches_a_broken_release(student, tmp_path):
    """The check that `build_student` runs fails when the public tests cannot run."""
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(student, broken)
    (broken / "grading" / "public_expected.json").write_text("{}")
    with pytest.raises(SystemExit):
        release.verify_student(broken)


def test_gradescope_bundle_layout(bundle):
    with zipfile.ZipFile(bundle) as z:
        names = set(z.namelist())
        modes = {i.filename: i.external_attr >> 16 for i in z.infolist()}
        requirements = z.read("requirements-autograder.txt").decode().split()
        ex1 = z.read("grading/ex1.py").decode()
    assert {"setup.sh", "run_autograder", "requirements-autograder.txt"} <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert {"sandbox/worker.py", "autograde/gradescope.py", "sandbox/plain.py",
            "solutions/__init__.py", "grading/public_expected.json"} <= names
    assert "hidden=True" in ex1  # the real checks, hidden ones included
    assert not [n for n in names if n.startswith("tests/redteam") or "/test_" in n]
    assert all("==" in line for line in requirements)
    assert any(line.startswith("numpy==") for line in requirements)


def test_gradescope_bundle_grades_the_reference_with_full_marks(bundle):
    results = release.run_bundle(bundle, release.REFERENCE)
    assert results["score"] == sum(t["max_score"] for t in results["tests"]) == 100
    visibilities = {t["visibility"] for t in results["tests"] if "hidden" in t["name"]}
    assert visibilities == {"after_published"}
    assert {t["visibility"] for t in results["tests"] if "hidden" not in t["name"]} == {"visible"}
    assert "seed" in results["extra_data"]


def test_gradescope_bundle_grades_a_hostile_notebook_exactly(bundle):
    results = release.run_bundle(bundle, ROOT / "tests" / "redteam" / "submissions" /
                                 "os_exit_cell.ipynb")
    assert results["score"] == 70  # exercise 3 (30 points) was replaced by os._exit(0)


def test_gradescope_picks_the_exercises_notebook(tmp_path):
    (tmp_path / "notes.py").write_text("x = 1\n")
    (tmp_path / "conftest.py").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "09-exercises.ipynb").write_text("{}")
    (tmp_path / "other.ipynb").write_text("{}")
    chosen, note = pick_submission(tmp_path)
    assert chosen == tmp_path / "sub" / "09-exercises.ipynb"
    assert "notes.py" in note and "conftest.py" not in note
    empty = tmp_path / "empty"
    empty.mkdir()
    assert pick_submission(empty) == (None, "")


def test_gradescope_without_a_submission_writes_a_zero_with_an_explanation(tmp_path):
    from autograde.gradescope import main

    (tmp_path / "in").mkdir()
    assert main([str(tmp_path / "in"), str(tmp_path / "results.json")]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0 and "09-exercises.ipynb" in results["output"]
    assert "(it is empty)" in results["output"]


def test_gradescope_names_what_was_sent_when_nothing_can_be_graded(tmp_path):
    """A student who uploaded only a PDF (or a notebook saved as .txt) is told what the grader
    found, so they can see the upload went wrong."""
    from autograde.gradescope import main

    (tmp_path / "in" / "hw").mkdir(parents=True)
    (tmp_path / "in" / "hw" / "report.pdf").write_bytes(b"%PDF-1.4\n")
    (tmp_path / "in" / "09-exercises.ipynb.txt").write_text("{}")
    assert main([str(tmp_path / "in"), str(tmp_path / "results.json")]) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["score"] == 0 and results["tests"] == []
    assert "it holds 09-exercises.ipynb.txt, hw/report.pdf" in results["output"]
    assert str(tmp_path) not in results["output"]


# ----------------------------------------------------------------------------- a student's kit

def _run_as_student(release: Path, command: str) -> subprocess.CompletedProcess:
    """Run ``command`` (``python -m ...``) in the release, as written, with the course's own
    folder out of reach (the development venv puts it on sys.path)."""
    argv = shlex.split(command)
    assert argv[:2] == ["python", "-m"], command
    wrapper = (f"import os, runpy, sys; root = {str(ROOT)!r}; "
               "sys.path[:] = [p for p in sys.path if os.path.realpath(p or '.') != root]; "
               f"sys.path.insert(0, os.getcwd()); sys.argv = {argv[2:]!r}; "
               f"runpy.run_module({argv[2]!r}, run_name='__main__', alter_sys=True)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-c", wrapper], cwd=release, env=env,
                          capture_output=True, text=True, timeout=300)


def _commands_in(text: str) -> list[str]:
    """The `python -m ...` commands a text tells a student to run."""
    found = re.findall(r"^(python -m [^\n`]+?)\s*$", text, re.M)
    found += re.findall(r"`(python -m [^`]+)`", text)
    return list(dict.fromkeys(c.strip() for c in found))


def test_the_release_has_its_own_readme_and_every_command_it_gives_runs(student):
    readme = (student / "README.md").read_text()
    notebook = (student / "chapters" / "09-exercises.md").read_text()
    assert "make " not in readme and "Makefile" not in readme
    assert "instructor/student_notebook.py" not in notebook and "instructor/student_notebook.py" not in readme
    commands = _commands_in(readme) + _commands_in(notebook)
    assert set(release.STUDENT_COMMANDS) <= set(commands)
    hidden, total = release.hidden_and_total_points()
    assert f"{hidden:g} of the {total:g} points" in readme
    for command in dict.fromkeys(commands):
        done = _run_as_student(student, command)
        assert done.returncode == 0, (command, done.stderr[-2000:])
        assert "not implemented yet" in done.stdout, command
        if "--assignment" not in command:  # the exercises' hidden tests (an assignment has none)
            assert f"worth {hidden:g} more points" in done.stdout, (command, done.stdout[-1500:])
    report = json.loads((student / "my-report.json").read_text())
    assert report["score"] == 0 and report["max_score"] == total - hidden


def test_the_release_ships_solutions_with_the_graded_functions_as_stubs(student):
    wrapper = textwrap.dedent(f"""
        import os, sys
        root = {str(ROOT)!r}
        sys.path[:] = [{str(student)!r}] + [p for p in sys.path if os.path.realpath(p or ".") != root]
        import solutions, solutions.scaling, solutions.memory
        assert solutions.__file__.startswith({str(student)!r})
        print(solutions.memory.zero_memory_per_gpu(7e9, 3, 8, "zero_16"))
        for call in (lambda: solutions.chinchilla_loss(1e9, 1e10),
                     lambda: solutions.compute_optimal(1e21),
                     lambda: solutions.scaling.compute_optimal_sweep(1e21),
                     lambda: solutions.memory_per_gpu(1e9, "dp", 1),
                     lambda: solutions.communication_time_per_step(1e9, 1, 1, 1, 1, 1, 1, 1)):
            try:
                call()
            except NotImplementedError as err:
                print("STUB", err)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", wrapper], env=env, capture_output=True,
                          text=True, timeout=120, cwd=student)
    assert done.returncode == 0, done.stderr
    # The rest of solutions/ works: ZeRO-3 shards all 16 bytes per parameter, 16 * 7e9 / 8.
    assert abs(float(done.stdout.splitlines()[0]) - 1.4e10) <= 1e-6 * 1.4e10
    stubs = [line for line in done.stdout.splitlines() if line.startswith("STUB")]
    assert len(stubs) == 5 and all("chapters/09-exercises.ipynb" in s for s in stubs)
    assert "Exercise 1" in stubs[0] and "Exercise 4" in stubs[-1]


def test_no_line_of_the_graded_implementations_is_in_the_release(student):
    """Each stubbed function is its docstring and a raise; and no line of its body in the
    master (other than lines that other, shipped functions also contain, such as argument
    validation) appears anywhere in the release's solutions/."""
    shipped = "\n".join(p.read_text() for p in (student / "solutions").glob("*.py"))
    shipped_lines = {line.strip() for line in shipped.splitlines()}
    for rel, functions in release.STUBBED.items():
        source = (ROOT / rel).read_text()
        lines = source.splitlines()
        bodies, elsewhere = {}, set()
        stubbed_rows = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in functions:
                body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
                rows = range(body[0].lineno - 1, node.end_lineno)
                stubbed_rows |= set(rows)
                bodies[node.name] = [lines[i].strip() for i in rows]
        elsewhere = {line.strip() for i, line in enumerate(lines) if i not in stubbed_rows}
        assert set(bodies) == set(functions), rel
        for name, code in bodies.items():
            code = [c for c in code if c and not c.startswith("#") and len(c) > 3]
            own = [c for c in code if c not in elsewhere]
            assert own, name
            leaked = [c for c in own if c in shipped_lines]
            assert not leaked, (name, leaked)
        for node in ast.parse((student / rel).read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name in functions:
                kinds = [type(n).__name__ for n in node.body]
                assert kinds in (["Expr", "Raise"], ["Raise"]), (name, kinds)


def test_the_bundle_check_fails_when_the_reference_is_not_graded(tmp_path, monkeypatch):
    """`make gradescope` says "checked: it gives the reference full marks" only when it did:
    a results.json with no tests (no file it could grade) is not full marks."""
    unreadable = tmp_path / "reference.txt"  # a file the bundle does not grade
    unreadable.write_text(release.REFERENCE.read_text())
    monkeypatch.setattr(release, "REFERENCE", unreadable)
    with pytest.raises(SystemExit, match="gave the reference 0"):
        release.build_gradescope(tmp_path / "out")


def test_run_autograder_writes_results_even_when_python_cannot_start(bundle, tmp_path):
    """Gradescope's best practice: a results.json in every case. When the grader's Python
    dies before it can write one (here an interpreter that only fails), the script writes a
    zero with a message for the student and exits non-zero for the instructor."""
    source = tmp_path / "source"
    with zipfile.ZipFile(bundle) as z:
        z.extractall(source)
    (tmp_path / "submission").mkdir()
    (tmp_path / "submission" / "a.py").write_text("x = 1\n")
    broken = tmp_path / "python"
    broken.write_text("#!/bin/sh\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    broken.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AUTOGRADER_SOURCE": str(source),
           "AUTOGRADER_SUBMISSION": str(tmp_path / "submission"),
           "AUTOGRADER_RESULTS": str(tmp_path / "results"), "AUTOGRADER_PYTHON": str(broken)}
    done = subprocess.run(["bash", str(source / "run_autograder")], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1 and "Fatal Python error" in done.stderr
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["score"] == 0 and results["tests"] == []
    assert "Please tell your instructor" in results["output"]
