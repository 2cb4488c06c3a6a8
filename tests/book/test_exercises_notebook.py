"""The exercises notebook: its master (with solutions) and the student version generated from it.

* the student version has no solution code, only ``raise NotImplementedError`` stubs;
* run top to bottom, its check cells report "not implemented yet" instead of crashing;
* the master's solutions agree with the reference in ``solutions/`` on many inputs.
"""
from __future__ import annotations

import contextlib
import copy
import io
import random
import re
from pathlib import Path

import jupytext
import matplotlib
import numpy as np
import pytest

import solutions
from grading import EXERCISES
from instructor import student_notebook as sn

ROOT = Path(__file__).resolve().parents[2]
MASTER_PATH = ROOT / "chapters" / "09-exercises.md"
FUNCTIONS = tuple(e.function for e in EXERCISES)  # the registry: Exercise 4 has two parts
VALID_ARGS = {
    "chinchilla_loss": (70e9, 1.4e12),
    "compute_optimal": (1e22,),
    "memory_per_gpu": (7e9, "fsdp", 8),
    "communication_time_per_step": (7e9, 8, 4, 32, 4096, 1, 4096, 0.45),
    "communication_time_per_step_by_axis": (7e9, 16, 4, 2, 32, 4096, 2, 12, 4096, 450, 50),
}
# Lines that would give a solution away; none may appear in a student code cell.
FORMULA_FRAGMENTS = [
    "A / N**ALPHA", "B / D**BETA", "np.sqrt(C / (6 * r))", "best = (N, D, r, loss)",
    "BYTES_PER_PARAM * model_params", "full / num_gpus", "bandwidth_tb_s * 1e12",
    "2 * (2 * model_params)", "2 * (2 * batch_size * seq_len * d_model)", "np.diff(",
]


@pytest.fixture(scope="module")
def master():
    return jupytext.read(MASTER_PATH)


@pytest.fixture(scope="module")
def student(master):
    return sn.student_notebook(master)


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def solution_lines(master):
    lines = []
    for cell in code_cells(master):
        inside = False
        for line in cell.source.splitlines():
            if line.strip() == sn.BEGIN:
                inside = True
            elif line.strip() == sn.END:
                inside = False
            elif inside and line.strip() and not line.strip().startswith("#"):
                lines.append(line.strip())
    return lines


def test_master_has_a_solution_for_every_exercise(master):
    sources = [c.source for c in code_cells(master) if sn.BEGIN in c.source]
    for name in FUNCTIONS:
        assert any(f"def {name}(" in s for s in sources), name
    assert len(solution_lines(master)) >= 15


def test_student_version_has_no_solution_code(master, student):
    student_code = "\n".join(c.source for c in code_cells(student))
    assert sn.BEGIN not in student_code and sn.END not in student_code
    student_lines = {line.strip() for line in student_code.splitlines()}
    leaked = [line for line in solution_lines(master) if line in student_lines]
    assert not leaked, leaked
    for fragment in FORMULA_FRAGMENTS:
        assert fragment not in student_code, fragment
    assert not any(c.get("outputs") for c in code_cells(student))


def test_stubs_keep_the_indentation_and_name_the_function(student):
    stubs = [line for c in code_cells(student) for line in c.source.splitlines()
             if "raise NotImplementedError" in line]
    for name in FUNCTIONS:
        assert any(line.startswith("    raise NotImplementedError") and f"`{name}`" in line
                   for line in stubs), name
    assert any(line.startswith("raise NotImplementedError") for line in stubs)  # Exercise 1 (a), (b)


def run_cells_in_process(nb):
    """Execute the student notebook's code cells in order, like "Run all" honouring the
    raises-exception tag (the setup cell too: the course is importable here, so it clones
    nothing and only imports the figure style). Returns (namespace, printed output per cell)."""
    matplotlib.use("Agg")
    namespace: dict = {"__name__": "__student__"}
    outputs = []
    for cell in code_cells(nb):
        tags = cell.metadata.get("tags", [])
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            try:
                exec(compile(cell.source, "<cell>", "exec"), namespace)
            except NotImplementedError:
                assert "raises-exception" in tags, cell.source
        outputs.append(buffer.getvalue())
    return namespace, outputs


def test_every_stub_raises_and_the_checks_say_not_implemented(student):
    namespace, outputs = run_cells_in_process(student)
    for name in FUNCTIONS:
        with pytest.raises(NotImplementedError):
            namespace[name](*VALID_ARGS[name])
    checks = [out for cell, out in zip(code_cells(student), outputs) if "self_check(" in cell.source]
    assert len(checks) == len(EXERCISES)
    for out in checks:
        assert "not implemented yet" in out and "Total: 0 /" in out, out


def test_a_student_who_solves_exercise_1_gets_its_points(student):
    """Fill in only Exercise 1 in the student version: its check passes, the others do not."""
    nb = copy.deepcopy(student)
    for cell in code_cells(nb):
        if "def chinchilla_loss(" in cell.source:
            cell.source = cell.source.replace(
                'raise NotImplementedError("Implement `chinchilla_loss`: replace this line with your code.")',
                "return E + A * N**-ALPHA + B * D**-BETA")
    _, outputs = run_cells_in_process(nb)
    checks = [out for cell, out in zip(code_cells(nb), outputs) if "self_check(" in cell.source]
    assert "All public tests passed" in checks[0]
    assert all("not implemented yet" in out for out in checks[1:])


def test_student_markdown_is_plain(master, student):
    dropdowns = sum(c.source.count(":class: dropdown") for c in master.cells if c.cell_type == "markdown")
    text = "\n".join(c.source for c in student.cells if c.cell_type == "markdown")
    assert dropdowns >= 6 and text.count("<details>") == dropdowns
    for myst in (":::", "{cite}", "{doc}", "{ref}", ")=\n"):
        assert myst not in text, myst


def test_template_cells_are_visible_to_students_and_collapsed_in_the_book(master, student):
    for m, s in zip(code_cells(master), code_cells(student)):
        if sn.BEGIN in m.source and "def " in m.source:
            assert "hide-input" in m.metadata.get("tags", [])
            assert "hide-input" not in s.metadata.get("tags", [])


def test_command_line_writes_both_files(tmp_path):
    assert sn.main([str(MASTER_PATH), "--out", str(tmp_path)]) == 0
    ipynb, md = tmp_path / "09-exercises.ipynb", tmp_path / "09-exercises.md"
    assert ipynb.exists() and md.exists()
    assert sn.BEGIN not in ipynb.read_text() and sn.BEGIN not in md.read_text()
    assert "raise NotImplementedError" in md.read_text()


@pytest.mark.parametrize("source, message", [
    ("x = 1\n### BEGIN SOLUTION\ny = 2\n", "without"),
    ("### END SOLUTION\n", "without"),
    ("### BEGIN SOLUTION\n### BEGIN SOLUTION\n### END SOLUTION\n", "inside"),
    ("y = 1  ### BEGIN SOLUTION\n", "alone"),
])
def test_unbalanced_markers_are_refused(source, message):
    with pytest.raises(sn.MarkerError, match=message):
        sn.strip_solutions(source)


@pytest.mark.slow
def test_student_notebook_runs_in_a_kernel(student, tmp_path):
    """The real "Run all": a Jupyter kernel in a folder outside the repository."""
    from nbclient import NotebookClient

    nb = copy.deepcopy(student)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    texts = ["".join(o.get("text", "") for o in c.get("outputs", []) if o.get("output_type") == "stream")
             for c in code_cells(nb) if "self_check(" in c.source]
    assert len(texts) == len(EXERCISES) and all("not implemented yet" in t for t in texts), texts
    errors = [o for c in code_cells(nb) for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert errors and all(o["ename"] == "NotImplementedError" for o in errors)


# --------------------------------------------------------------------------- master vs reference

@pytest.fixture(scope="module")
def master_functions(master):
    matplotlib.use("Agg")
    namespace: dict = {"np": np, "__name__": "__master__"}
    for cell in code_cells(master):
        if sn.BEGIN in cell.source and "def " in cell.source:
            exec(compile(cell.source, "<master>", "exec"), namespace)
    return namespace


def close(a, b, rel=1e-12):
    return np.allclose(np.asarray(a, dtype=float), np.asarray(b, dtype=float), rtol=rel, atol=0)


def test_master_chinchilla_loss_agrees(master_functions):
    f = master_functions["chinchilla_loss"]
    rng = random.Random(0)
    for _ in range(300):
        N, D = 10 ** rng.uniform(5, 14), 10 ** rng.uniform(6, 15)
        assert close(f(N, D), solutions.chinchilla_loss(N, D))
    N, D = np.logspace(6, 13, 40), np.logspace(8, 15, 40)
    assert close(f(N, D), solutions.chinchilla_loss(N, D))
    assert abs(f(175e9, 300e9) - 2.002) < 5e-4 and abs(f(70e9, 1.4e12) - 1.936) < 5e-4  # the quoted values


def test_master_compute_optimal_agrees(master_functions):
    f = master_functions["compute_optimal"]
    rng = random.Random(1)
    for _ in range(40):
        C = 10 ** rng.uniform(17, 27)
        assert close(f(C), solutions.compute_optimal(C), 1e-9)
        ratios = np.array([10 ** rng.uniform(-1, 3.5) for _ in range(rng.randint(1, 30))])
        assert close(f(C, ratios), solutions.compute_optimal(C, ratios), 1e-9)


def test_master_memory_per_gpu_agrees(master_functions):
    f = master_functions["memory_per_gpu"]
    rng = random.Random(2)
    for _ in range(300):
        g = rng.choice([1, 2, 3, 4, 8, 16, 64, 512, 1024])
        N = float(g * rng.randint(10**5, 10**12 // g))
        s = rng.choice(["dp", "tp", "pp", "fsdp"])
        assert close(f(N, s, g), solutions.memory_per_gpu(N, s, g))
    for bad in ("zero", "DDP", "", "fdsp"):
        with pytest.raises(ValueError):
            f(7e9, bad, 8)
        with pytest.raises(ValueError):
            solutions.memory_per_gpu(7e9, bad, 8)


def test_master_communication_time_agrees(master_functions):
    f = master_functions["communication_time_per_step"]
    rng = random.Random(3)
    for _ in range(300):
        args = (10 ** rng.uniform(6, 12), rng.randint(1, 1024), rng.choice([1, 2, 4, 8]),
                rng.randint(1, 128), rng.choice([128, 2048, 8192]), rng.randint(1, 64),
                64 * rng.randint(1, 256), rng.uniform(0.01, 2.0))
        assert close(f(*args), solutions.communication_time_per_step(*args))


def test_master_communication_time_by_axis_agrees(master_functions):
    f = master_functions["communication_time_per_step_by_axis"]
    rng = random.Random(4)
    for _ in range(300):
        pp = rng.choice([1, 2, 3, 4, 8, 16])
        args = (10 ** rng.uniform(6, 12), rng.randint(1, 1024), rng.choice([1, 2, 4, 8]), pp,
                pp * rng.randint(1, 16), rng.choice([128, 2048, 8192]), rng.randint(1, 8),
                rng.randint(1, 64), 64 * rng.randint(1, 256), rng.uniform(50, 2000), rng.uniform(5, 400))
        mine, reference = f(*args), solutions.communication_time_per_step_by_axis(*args)
        assert len(mine) == 3 and all(close(a, b) or a == b == 0 for a, b in zip(mine, reference))


def test_stored_notebook_shows_the_exercise_numbers():
    import nbformat

    nb = nbformat.read(MASTER_PATH.with_suffix(".ipynb"), as_version=4)
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                   for o in c.get("outputs", []))
    assert re.search(r"GPT-3 .* loss 2\.002", text) and re.search(r"Chinchilla .* loss 1\.936", text)
    assert text.count("All public tests passed") == len(EXERCISES) == 5
    # The stored check cells ran in the grader's sandbox and name the hidden points.
    assert "not in the grader's sandbox" not in text and text.count("(hidden)") >= 4


def test_the_page_states_the_rules_first_hints_before_templates_and_labels_solutions(master):
    cells = master.cells
    first_code = next(i for i, c in enumerate(cells) if c.cell_type == "code"
                      and "remove-cell" not in c.metadata.get("tags", []))
    intro = "\n".join(c.source for c in cells[:first_code] if c.cell_type == "markdown")
    assert "only numpy and" in intro and "standard library" in intro
    assert "python -m autograde chapters/09-exercises.ipynb" in intro
    assert "instructor/student_notebook.py" not in "\n".join(c.source for c in cells)
    assert "entropy of text" not in "\n".join(c.source for c in cells)
    for index, cell in enumerate(cells):
        if cell.cell_type == "code" and sn.BEGIN in cell.source:
            assert "Solution" in cell.metadata.get("mystnb", {}).get("code_prompt_show", "")
            if "def " in cell.source:  # every hint of the exercise comes before its template
                before = "\n".join(c.source for c in cells[max(0, index - 4):index])
                after = cells[index + 1].source if index + 1 < len(cells) else ""
                assert "Hint" in before and "Hint" not in after, cell.source[:60]


@pytest.mark.slow
def test_the_autograder_grades_master_and_student_versions(tmp_path):
    """Through the sandbox: the master earns every point, the student version none, and
    every test of the student version says "not implemented yet"."""
    sandbox = pytest.importorskip("sandbox.handle")
    from grading import grade_callable, load_checks
    from grading.report import score

    ipynb, _ = sn.write_student_version(MASTER_PATH, tmp_path)
    for path, full in ((MASTER_PATH.with_suffix(".ipynb"), True), (ipynb, False)):
        with sandbox.Sandbox(str(path), timeout=20) as box:
            results = grade_callable(lambda name: (lambda *args: box.call(name, *args)),
                                     load_checks(seed=11))
        earned, possible = score(results)
        if full:
            assert earned == possible == 100, [r.feedback for _, r in results if not r.passed]
        else:
            assert earned == 0 and all(r.not_implemented for _, r in results), \
                [r.feedback for _, r in results if not r.not_implemented]


def test_the_student_setup_cell_fetches_the_course_from_repository_url(student):
    import yaml

    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    setup = [c.source for c in code_cells(student) if "git" in c.source and "clone" in c.source]
    assert len(setup) == 1 and f'"{url}"' in setup[0]
