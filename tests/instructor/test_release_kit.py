"""The student's kit as a student meets it: the exercises notebook alone on Colab, Kaggle or
uploaded into an empty folder; the kit's own requirements; and what the kit must not hold
(no line of a reference solution, no route through the shipped library to a graded answer).

The only stand-in is for the network: git's ``url.<base>.insteadOf`` (set through
``GIT_CONFIG_*`` variables) points the course's address at a local bare repository holding
the student release at its version, and pip is given an empty local index. Everything else
(the notebook's own setup cell, git, a fresh virtual environment, the released library) is
the real thing.
"""
from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest
import yaml

from instructor import release

ROOT = Path(__file__).resolve().parents[2]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]
URL, VERSION = CONFIG["url"], str(CONFIG["branch"])
NOTEBOOK = "chapters/09-exercises.ipynb"


def _git(*args, cwd=None, env=None):
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """The student release, built (and verified) as `make student-release` builds it."""
    out = tmp_path_factory.mktemp("kit") / "student"
    release.build_student(out)
    return out


@pytest.fixture(scope="module")
def remote(kit, tmp_path_factory):
    """A bare repository holding the release, tagged with the configured version: what the
    course's public address serves. Returns (path, commit)."""
    base = tmp_path_factory.mktemp("remote")
    bare = base / "course.git"
    env = {**_hermetic_env(base), "GIT_AUTHOR_NAME": "course", "GIT_AUTHOR_EMAIL": "c@example.org",
           "GIT_COMMITTER_NAME": "course", "GIT_COMMITTER_EMAIL": "c@example.org"}
    _git("init", "--quiet", "--bare", str(bare), env=env)
    tree = ["--git-dir", str(bare), "--work-tree", str(kit)]
    _git(*tree, "add", "-A", env=env)
    _git(*tree, "commit", "--quiet", "-m", "student release", env=env)
    _git("--git-dir", str(bare), "tag", VERSION, env=env)
    return bare, _git("--git-dir", str(bare), "rev-parse", "HEAD", env=env)


def _hermetic_env(home: Path, **extra) -> dict:
    """No inherited Python or git settings: PATH (for git), a fresh HOME, no system or
    global git configuration."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, **extra}


def _network_double(remote: Path) -> dict:
    """git fetches the course's address from the local bare repository instead."""
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": f"url.file://{remote}.insteadOf",
            "GIT_CONFIG_VALUE_0": URL}


def _bare_python(where: Path, site: list[Path] = ()) -> Path:
    """A throwaway virtual environment without pip and without the course. ``site``: folders
    to add to its path (the third-party packages a platform such as Colab preinstalls)."""
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    if site:
        Path(purelib, "platform-packages.pth").write_text("".join(f"{p}\n" for p in site))
    return python


def _dev_site_packages() -> Path:
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"])


def _code_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def _alone(kit: Path, folder: Path) -> Path:
    """The exercises notebook, copied on its own into an empty folder (an upload)."""
    folder.mkdir()
    shutil.copy(kit / NOTEBOOK, folder / Path(NOTEBOOK).name)
    return folder / Path(NOTEBOOK).name


def test_the_released_notebook_has_the_master_s_setup_cell(kit):
    import jupytext

    master = [c.source for c in jupytext.read(ROOT / "chapters" / "09-exercises.md").cells
              if c.cell_type == "code"][0]
    student = _code_cells(kit / NOTEBOOK)[0]
    assert student == master and "git" in student and f'"{URL}", "{VERSION}"' in student


def test_alone_on_a_platform_python_the_setup_cell_clones_the_release_and_the_notebook_runs(
        kit, remote, tmp_path):
    """Colab or Kaggle: numpy and matplotlib preinstalled, no course. The setup cell clones the
    release at its version next to the notebook; the next cells (the grading package's table
    of exercises) then run. Run again (a restarted kernel), it clones nothing."""
    bare, commit = remote
    notebook = _alone(kit, tmp_path / "upload")
    python = _bare_python(tmp_path / "platform-python", site=[_dev_site_packages()])
    probe = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('coursefig'), u.find_spec('numpy') is not None)"],
                           capture_output=True, text=True, cwd=notebook.parent)
    assert probe.stdout.split() == ["None", "True"], probe  # the course is out of reach
    cells = _code_cells(notebook)
    # setup, imports, the exercises and their points (a table the kernel would display: printed)
    script = "\n".join(cells[:3]) + "\nprint('\\n'.join(rows))"
    env = _hermetic_env(tmp_path, MPLBACKEND="Agg", **_network_double(bare))
    done = subprocess.run([str(python), "-c", script], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    clone = notebook.parent / "course"
    assert _git("rev-parse", "HEAD", cwd=clone, env=env) == commit
    assert sorted(p.name for p in notebook.parent.iterdir()) == ["09-exercises.ipynb", "course"]
    for title in ("Exercise 1", "Exercise 2", "Exercise 3", "Exercise 4"):
        assert title in done.stdout, done.stdout
    # A restarted kernel: the clone is found, the network is not needed.
    offline = _hermetic_env(tmp_path, MPLBACKEND="Agg")
    again = subprocess.run([str(python), "-c", cells[0] + "\nprint(coursefig.__file__)"],
                           cwd=notebook.parent, env=offline, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr[-2000:]
    assert Path(again.stdout.strip()).resolve().is_relative_to(clone.resolve())


def test_alone_on_a_bare_python_the_setup_cell_passes_its_clone_step(kit, remote, tmp_path):
    """A Python with none of the course's packages (no numpy, no matplotlib): the clone step
    needs none of them and completes; the cell then asks pip for exactly what is missing (here
    pip's index is an empty local folder, so that request is the end of the run)."""
    bare, commit = remote
    notebook = _alone(kit, tmp_path / "upload")
    only_pip = tmp_path / "only-pip"
    only_pip.mkdir()
    (only_pip / "pip").symlink_to(_dev_site_packages() / "pip")
    python = _bare_python(tmp_path / "bare-python", site=[only_pip])
    wheels = tmp_path / "no-wheels"
    wheels.mkdir()
    env = _hermetic_env(tmp_path, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels),
                        PIP_DISABLE_PIP_VERSION_CHECK="1", **_network_double(bare))
    setup = _code_cells(notebook)[0]
    done = subprocess.run([str(python), "-c", setup], cwd=notebook.parent, env=env,
                          capture_output=True, text=True, timeout=120)
    clone = notebook.parent / "course"
    assert _git("rev-parse", "HEAD", cwd=clone, env=env) == commit, done.stderr[-2000:]
    assert (clone / "coursefig").is_dir() and (clone / "tests" / "grading").is_dir()
    assert done.returncode != 0
    assert "No matching distribution found for numpy" in done.stderr, done.stderr[-2000:]
    assert "CalledProcessError" in done.stderr and "'matplotlib']" in done.stderr


# ----------------------------------------------------------------------------- requirements

#: Packages of the book's build and of the project's tests: never in the kit's requirements.
BUILD_AND_TEST = re.compile(r"^(jupyter-book|sphinx.*|myst-.*|pytest.*|nbval|hypothesis|playwright|"
                            r"coverage|django-static-mathjax|copydetect|nbclient|ruff|mypy)$")


def _requirement_names(path: Path) -> set[str]:
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            names.add(re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0].lower().replace("_", "-"))
    return names


def _optional(node: ast.AST, parents: dict) -> bool:
    """An import inside ``try: ... except ImportError`` (or ModuleNotFoundError)."""
    while node in parents:
        parent = parents[node]
        if isinstance(parent, ast.Try) and node in parent.body:
            caught = {ast.unparse(h.type) for h in parent.handlers if h.type is not None}
            if caught & {"ImportError", "ModuleNotFoundError", "(ImportError, ModuleNotFoundError)"}:
                return True
        node = parent
    return False


def _imports(source: str) -> set[str]:
    """Top-level module names a source imports, optional imports left out."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    tree = ast.parse("\n".join(lines))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if not _optional(node, parents):
            found |= {n.split(".")[0] for n in names}
    return found


def _kit_imports(kit: Path) -> dict[str, set[str]]:
    """Third-party module -> the kit's files importing it (its .py files and the code cells
    of its notebooks; the standard library and the kit's own modules left out)."""
    own = {p.stem for p in kit.iterdir() if p.is_dir() or p.suffix == ".py"}
    found: dict[str, set[str]] = {}
    sources = [(p, p.read_text()) for p in kit.rglob("*.py")]
    sources += [(p, c) for p in kit.rglob("*.ipynb") for c in _code_cells(p)]
    for path, source in sources:
        siblings = {q.stem for q in path.parent.iterdir()}  # e.g. sandbox/worker.py: confined
        for name in _imports(source) - own - siblings - set(sys.stdlib_module_names) - {"__future__"}:
            found.setdefault(name, set()).add(path.relative_to(kit).as_posix())
    return found


def test_the_import_parser_finds_imports_and_leaves_out_optional_ones():
    source = textwrap.dedent("""
        import numpy as np, os.path
        from matplotlib import pyplot
        %matplotlib inline
        def f():
            from scipy.optimize import minimize
        try:
            from myst_nb import glue
        except ImportError:
            glue = None
        from . import sibling
    """)
    assert _imports(source) == {"numpy", "os", "matplotlib", "scipy"}


def test_the_kit_requirements_cover_its_imports_and_hold_no_build_or_test_package(kit):
    import importlib.metadata

    names = _requirement_names(kit / "requirements.txt")
    assert "jupyterlab" in names
    forbidden = sorted(n for n in names if BUILD_AND_TEST.match(n))
    assert not forbidden, f"build or test packages in the kit's requirements: {forbidden}"
    distributions = importlib.metadata.packages_distributions()
    imports = _kit_imports(kit)
    assert {"numpy", "torch", "matplotlib"} <= set(imports), imports  # the parser sees them
    uncovered = {}
    for module, files in sorted(imports.items()):
        provided_by = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if not provided_by & names:
            uncovered[module] = (sorted(provided_by), sorted(files)[:3])
    assert not uncovered, f"imported by the kit, not in its requirements.txt: {uncovered}"
    pins = {line.split("==")[0]: line for line in (ROOT / "requirements.txt").read_text().split()
            if "==" in line}
    for line in (kit / "requirements.txt").read_text().split("\n"):
        if "==" in line and not line.startswith("#") and not line.startswith("jupyterlab=="):
            assert pins.get(line.split("==")[0]) == line, f"{line}: not the course's pin"


def test_the_kit_readme_says_how_to_get_torch_s_cpu_build_and_start_jupyterlab(kit):
    readme = (kit / "README.md").read_text()
    torch = next(line for line in (kit / "requirements.txt").read_text().splitlines()
                 if line.startswith("torch=="))
    assert f"pip install {torch} --index-url https://download.pytorch.org/whl/cpu" in readme
    assert "pip install -r requirements.txt" in readme and "\njupyter lab\n" in readme
    assert "myst_nb" not in "".join(p.read_text() for p in (kit / "chapters").glob("*.md"))


def test_the_kit_readme_s_assignment_command_names_a_real_assignment_and_notebook(kit):
    import re

    from assignments import ASSIGNMENTS

    readme = (kit / "README.md").read_text()
    found = re.findall(r"python -m autograde --assignment (a\d) (assignments/\S+\.ipynb)", readme)
    assert found, "the kit's README no longer says how to grade an assignment"
    for assignment, notebook in found:
        assert assignment in ASSIGNMENTS and (kit / notebook).is_file(), (assignment, notebook)
        assert Path(ASSIGNMENTS[assignment][1]).stem == Path(notebook).stem


def _make_targets() -> list[str]:
    """The master Makefile's targets (its ``.PHONY`` line)."""
    line = next(line for line in (ROOT / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    return line.split(":", 1)[1].split()


def test_the_kit_sends_no_one_to_a_make_target_or_a_page_it_leaves_out(kit):
    """The kit has no Makefile, no book build and no instructors' guide: nothing in it may tell
    a student to run ``make gpu-check`` or to read ``book/instructors.md``."""
    targets = _make_targets()
    assert "gpu-check" in targets and "book" in targets  # the parse found the real list
    make = re.compile(r"\bmake (" + "|".join(map(re.escape, targets)) + r")\b")
    assert not (kit / "Makefile").exists() and not (kit / "book" / "instructors.md").exists()
    assert not (kit / "_config.yml").exists() and not (kit / "book" / "_toc.yml").exists()
    found = []
    for path in sorted(kit.rglob("*")):
        if path.suffix not in {".md", ".py", ".ipynb", ".yml", ".toml", ".txt", ".cfg", ".json"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if make.search(line) or "book/instructors.md" in line:
                found.append(f"{path.relative_to(kit)}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
    # the check itself: a master page that names one is found
    assert make.search((ROOT / "README.md").read_text())


# ----------------------------------------------------------------------------- no reference

def _reference_lines() -> dict[str, str]:
    """Each non-trivial line of the reference solutions' graded code -> where it comes from:
    the master notebook's solution regions, the graded functions of solutions/, the reference
    submission and the grader's independent implementation (function bodies, docstrings left
    out). Trivial: comments, lines under 16 characters (``return total``, ``else:``), lines with
    neither arithmetic nor a call (``if strategy == "dp":``), and lines the course states in public anyway: the exercises page outside its solution regions (the
    templates and their text) and solutions/ outside the graded functions (argument checks
    such as ``n = positive_integer("num_gpus", num_gpus)``)."""
    import jupytext

    from instructor.student_notebook import BEGIN, END

    lines: dict[str, str] = {}
    public: set[str] = set()

    def keep(text: str, where: str):
        for line in text.splitlines():
            line = line.strip()
            if len(line) >= 16 and not line.startswith("#") and re.search(r"[*/+-]|\w\(", line):
                lines.setdefault(line, where)

    region = re.compile(rf"{BEGIN}\n(.*?)\n[ \t]*{END}", re.S)
    for cell in jupytext.read(ROOT / "chapters" / "09-exercises.md").cells:
        for solution in region.findall(cell.source):
            keep(solution, "chapters/09-exercises.md")
        public |= {line.strip() for line in region.sub("", cell.source).splitlines()}
    graded = {"chinchilla_loss", "compute_optimal", "memory_per_gpu", "communication_time_per_step"}
    sources = {rel: set(functions) for rel, functions in release.STUBBED.items()}
    sources["tests/redteam/reference_submission.py"] = graded
    sources["grading/independent.py"] = graded
    for rel, functions in sources.items():
        source = (ROOT / rel).read_text()
        rows = set()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name in functions:
                body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
                mine = range(body[0].lineno - 1, node.end_lineno)
                rows |= set(mine)
                keep("\n".join(source.splitlines()[i] for i in mine), f"{rel}:{node.name}")
        if rel.startswith("solutions/"):
            public |= {line.strip() for i, line in enumerate(source.splitlines()) if i not in rows}
    for path in (ROOT / "solutions").glob("*.py"):
        if f"solutions/{path.name}" not in release.STUBBED:
            public |= {line.strip() for line in path.read_text().splitlines()}
    return {line: where for line, where in lines.items() if line not in public}


def test_the_reference_lines_are_found():
    lines = _reference_lines()
    origins = {where.split(":")[0] for where in lines.values()}
    assert {"chapters/09-exercises.md", "tests/redteam/reference_submission.py",
            "grading/independent.py", "solutions/memory.py"} <= origins
    assert len(lines) >= 40


def test_no_file_of_the_kit_holds_a_line_of_a_reference_solution(kit):
    """tools/mutation.py (which quotes the graded functions' lines, as strings, to mutate
    them) and every other file that would hold such a line stay out of the kit."""
    assert not (kit / "tools").exists()
    reference = _reference_lines()
    leaks = []
    for path in kit.rglob("*"):
        if not path.is_file() or ".git" in path.parts or "__pycache__" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if path.suffix == ".ipynb":
            text = "\n".join(_code_cells(path))
        for line in (line for line in reference if line in text):  # also inside a string
            leaks.append(f"{path.relative_to(kit)}: {line!r} (from {reference[line]})")
    assert not leaks, "\n".join(sorted(leaks))


# ----------------------------------------------------------------------------- no route

ROUTES = r"""
import json, os, sys
kit, course = sys.argv[1:3]
sys.path[:] = [kit] + [p for p in sys.path if os.path.realpath(p or ".") != course]
from solutions import communication, memory, scaling
from grading import grade_callable, load_checks
from grading.report import score
assert scaling.__file__.startswith(kit)
X = scaling.EXERCISE
mine = scaling.ChinchillaConstants(1.69, 406.0, 410.0, 0.34, 0.28, "mine", "x")
ROUTES = {  # a student's attempts to answer an exercise with the released library
    "ex1 parametric_loss(EXERCISE)": ("chinchilla_loss", lambda N, D: scaling.parametric_loss(N, D, X)),
    "ex1 parametric_loss(own constants)": ("chinchilla_loss", lambda N, D: scaling.parametric_loss(N, D, mine)),
    "ex2 compute_optimal_sweep(EXERCISE)": ("compute_optimal", lambda C, ratios=None: scaling.compute_optimal_sweep(C, X, ratios)),
    "ex2 compute_optimal_closed_form(EXERCISE)": ("compute_optimal", lambda C, ratios=None: scaling.compute_optimal_closed_form(C, X)),
    "ex3 memory_breakdown": ("memory_per_gpu", lambda P, s, n: sum(memory.memory_breakdown(P, s, n).values())),
    "ex3 zero_memory_per_gpu": ("memory_per_gpu", lambda P, s, n:
        memory.zero_memory_per_gpu(P, 0 if s == "dp" else 3, 1 if s == "dp" else n, "chapter_12")),
    "ex3 memory_per_gpu_3d": ("memory_per_gpu", lambda P, s, n:
        memory.memory_per_gpu_3d(P, 1 if s == "dp" else n, 1, 1, 0, "chapter_12")),
    "ex3 own 12-byte convention": ("memory_per_gpu", lambda P, s, n: sum(memory.memory_breakdown(
        P, s, n, memory.ByteConvention("mine", 4, 4, 4, "x", "x")).values())),
    "ex4 communication_breakdown": ("communication_time_per_step", lambda P, dp, tp, L, s, b, h, bw:
        communication.communication_breakdown(P, dp, tp, 1, L, s, b, 1, h, intra_node_bw=bw * 1e12,
                                              inter_node_bw=bw * 1e12)["total"]["seconds"]),
}
checks = load_checks(include_hidden=False)
out = {}
for name, (function, route) in ROUTES.items():
    results = grade_callable(lambda _, route=route: route, [c for c in checks if c.function == function])
    out[name] = score(results)
out["other constants"] = scaling.parametric_loss(70e9, 1.4e12, scaling.HOFFMANN_ROUNDED)
out["zero_16 zero3"] = memory.zero_memory_per_gpu(7e9, 3, 8, "zero_16")
out["zero_16 breakdown"] = sum(memory.memory_breakdown(7e9, "dp", 8, "zero_16").values())
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def routes(kit):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", ROUTES, str(kit), str(ROOT)], capture_output=True,
                          text=True, env=env, cwd=kit, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("route", ["ex1 parametric_loss(EXERCISE)", "ex1 parametric_loss(own constants)",
                                   "ex2 compute_optimal_sweep(EXERCISE)",
                                   "ex2 compute_optimal_closed_form(EXERCISE)", "ex4 communication_breakdown"])
def test_the_released_library_answers_no_exercise(routes, route):
    earned, possible = routes[route]
    assert possible > 0 and earned == 0, (route, earned, possible)


@pytest.mark.parametrize("route", ["ex3 memory_breakdown", "ex3 zero_memory_per_gpu",
                                   "ex3 memory_per_gpu_3d", "ex3 own 12-byte convention"])
def test_the_released_library_does_not_answer_exercise_3(routes, route):
    """Exercise 3's answer is the 12-byte count split by strategy: the release's memory
    functions refuse that count, named or built by the student."""
    earned, possible = routes[route]
    assert possible > 0 and earned == 0, (route, earned, possible)


def test_the_memory_guard_leaves_the_other_conventions_alone(routes):
    # ZeRO-3 shards all of ZeRO's 16 bytes per parameter: 16 * 7e9 / 8 bytes per GPU.
    assert routes["zero_16 zero3"] == pytest.approx(16 * 7e9 / 8, rel=1e-12)
    assert routes["zero_16 breakdown"] == pytest.approx(16 * 7e9, rel=1e-12)


def test_the_guard_leaves_the_library_s_other_constants_alone(routes):
    # Hoffmann et al.'s rounded fit at Chinchilla's 70B parameters and 1.4T tokens: 1.937
    assert routes["other constants"] == pytest.approx(1.69 + 406.4 / 70e9**0.34 + 410.7 / 1.4e12**0.28, rel=1e-12)


def test_the_grader_leaves_the_setup_cell_out(kit):
    """The setup cell is course plumbing: graded in the sandbox (no git, no coursefig) it
    would only add notes telling the student to remove the course's import."""
    from sandbox.submission import read_submission

    submission = read_submission(kit / NOTEBOOK)
    assert not [u for u in submission.units if "COURSE_URL" in u.source or "coursefig.use()" in u.source]


# ----------------------------------------------------------------------------- chapters run

@pytest.mark.parametrize("chapter", ["chapters/01-single-gpu.ipynb", "chapters/07-fsdp.ipynb",
                                     "chapters/10-beyond-3d.ipynb"])
def test_a_kit_chapter_runs_raising_in_its_tagged_cells_only(kit, chapter, tmp_path):
    """Run all, with the course out of reach: the cells that reach Exercise 3's count (12
    bytes per parameter: the course's convention, ``practice.s01_state``, DeepSeek-V3's FP8
    state) raise and are tagged ``raises-exception``; every other cell runs."""
    import nbformat
    from nbclient import NotebookClient

    spec = tmp_path / "kernels" / "kit"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({"display_name": "kit", "language": "python", "argv": [
        sys.executable, "-c", f"import os, sys; sys.path[:] = [p for p in sys.path if os.path.realpath(p or '.') "
        f"!= {str(ROOT)!r}]; from ipykernel import kernelapp; kernelapp.launch_new_instance()",
        "-f", "{connection_file}"]}))
    nb = nbformat.read(kit / chapter, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell("import solutions; print(solutions.__file__)"))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(tmp_path)
    try:
        NotebookClient(nb, timeout=300, kernel_name="kit", allow_errors=True,
                       resources={"metadata": {"path": str((kit / chapter).parent)}}).execute()
    finally:
        os.environ.pop("JUPYTER_PATH") if old is None else os.environ.update(JUPYTER_PATH=old)
    assert nb.cells[-1].outputs[0]["text"].strip().startswith(str(kit)), nb.cells[-1].outputs
    code = [(i, c) for i, c in enumerate(nb.cells[:-1]) if c.cell_type == "code"]
    raised = {i: next(o for o in c.outputs if o.output_type == "error") for i, c in code
              if any(o.output_type == "error" for o in c.outputs)}
    tagged = {i for i, c in code if "raises-exception" in c.metadata.get("tags", [])}
    assert raised and set(raised) == tagged, ({i: raised[i]["evalue"][:120] for i in set(raised) - tagged},
                                               tagged - set(raised))
    first = raised[min(raised)]
    assert first["ename"] == "NotImplementedError" and "Exercise 3" in first["evalue"], first["evalue"]


def test_before_assignment_1_a_lab_falls_back_to_the_built_in_all_reduce(kit):
    """In the kit ``ring_all_reduce`` is the stub until Assignment 1 is written: the grid lab
    (data x tensor parallel, whose default is the ring) says in one line that it uses the
    built-in all-reduce, reports its ring byte counts as skipped, and passes; asking for the
    ring explicitly is a one-line error (exit 2), before any rank starts."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wrapper = ("import os, runpy, sys; sys.path[:] = [os.getcwd()] + [p for p in sys.path if "
               f"os.path.realpath(p or '.') != {str(ROOT)!r}]; sys.argv = sys.argv[1:]; "
               "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
    small = ["--nproc", "2", "--n-layer", "1", "--d-model", "32", "--n-head", "2", "--block-size", "8",
             "--batch", "1", "--report", str(kit.parent / "grid.json")]
    done = subprocess.run([sys.executable, "-c", wrapper, "labs.grid3d", *small], cwd=kit, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    note = "Assignment 1's ring_all_reduce is not written yet: using the built-in all-reduce"
    assert done.stdout.count(note) == 1, done.stdout
    report = json.loads((kit.parent / "grid.json").read_text())
    skipped = [c["name"] for c in report["checks"] if c.get("skipped")]
    assert len(skipped) == 2 and all("bytes each rank sends" in name for name in skipped), report["checks"]
    assert any(c["rule"] == "at most" and c["ok"] for c in report["checks"]), report["checks"]

    ring = subprocess.run([sys.executable, "-c", wrapper, "labs.ddp", "--nproc", "2", "--allreduce", "ring"],
                          cwd=kit, env=env, capture_output=True, text=True, timeout=60)
    lines = ring.stderr.strip().splitlines()
    assert ring.returncode == 2 and len(lines) == 1 and "not written yet" in lines[0], ring.stderr


def test_the_kit_s_grader_refuses_the_copy_check_it_leaves_out_in_one_line(kit, tmp_path):
    """``--similarity`` is in the kit's ``python -m autograde --help``, but the copy check
    (``autograde/similarity.py``) is not in the kit: asking for it is one line and exit 2,
    before anything is graded, not a traceback after the whole class has been graded."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    wrapper = ("import os, runpy, sys; sys.path[:] = [os.getcwd()] + [p for p in sys.path if "
               f"os.path.realpath(p or '.') != {str(ROOT)!r}]; sys.argv = sys.argv[1:]; "
               "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")
    assert not (kit / "autograde" / "similarity.py").exists()
    for sid in ("ann", "bob"):
        (tmp_path / "class" / sid).mkdir(parents=True)
        shutil.copy(kit / NOTEBOOK, tmp_path / "class" / sid)
    done = subprocess.run([sys.executable, "-c", wrapper, "autograde", str(tmp_path / "class"),
                           "--class-report", str(tmp_path / "r.html"), "--similarity"],
                          cwd=kit, env=env, capture_output=True, text=True, timeout=120)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and "--similarity" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == "" and not (tmp_path / "r.html").exists()
