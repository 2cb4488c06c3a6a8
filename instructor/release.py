"""Build what instructors hand out: the student release and the Gradescope autograder.

    python -m instructor.release student --out _build/student-release
    python -m instructor.release gradescope --out _build/gradescope

``student`` writes a student's kit: the course (its git-tracked files) with its own README
and requirements (what its notebooks import, plus JupyterLab) and no Makefile, without the
hidden checks, the red-team suite, the project's own tests, ``tools/`` and the book's build,
with the exercises notebook replaced by its student version (``instructor/student_notebook.py``),
and with ``solutions/`` in which the four graded exercise functions (and the sweep that
exists only for Exercise 2) are stubs raising ``NotImplementedError`` that point at the
exercise, ``parametric_loss`` refuses Exercise 1's constants, and ``memory_breakdown`` and
``zero_memory_per_gpu`` refuse a count of 12 bytes per parameter (Exercise 3's): the chapters
and labs import ``solutions/``, so it ships, but not the answers (chapter and lab cells that
need one are tagged ``raises-exception``). It then checks, with the course folder
removed from ``sys.path``, that the release's self-check and grader run on the public tests:
a correct submission earns every public point, and the unsolved notebook earns zero with a
message per exercise.

``gradescope`` writes ``autograder.zip`` (``setup.sh`` and ``run_autograder`` at the top,
the grader, the checks with the hidden ones, and ``solutions/``), then unpacks it into a
temporary folder and runs its ``run_autograder`` on the reference submission, which must
earn full marks.
"""
from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from assignments import ASSIGNMENTS  # their notebooks ship as student versions only
from grading import EXERCISE_BY_ID, EXERCISES
from solutions._validate import terse_argparse_errors

ROOT = Path(__file__).resolve().parents[1]
BUNDLE = Path(__file__).with_name("bundle")
REFERENCE = ROOT / "tests" / "redteam" / "reference_submission.py"
EXERCISES_MASTER = "chapters/09-exercises.md"
#: The grading package's old name, for notebooks released before it moved out of ``tests/``
#: (``from tests.grading import ...``): shipped as they are (book/instructors.md says until when).
OLD_NAME_SHIMS = ("tests/grading/__init__.py", "tests/grading/selfcheck.py")

#: Never in the student release (prefixes of repository paths): the project's tests and
#: benchmarks, the instructor's material and tools (``tools/mutation.py`` quotes reference
#: lines of the graded functions), the book's build (its Sphinx extensions and site assets,
#: the development requirements and configuration), and the masters that ship as student
#: versions. The release writes its own README and requirements.
STUDENT_EXCLUDED = (
    "tests/", "benchmarks/", ".ci/", ".github/", "book/instructors.md", "Makefile",
    "instructor/",  # the release, the Gradescope bundle, the student notebook tool
    "autograde/similarity.py",  # the class report's copy check (copydetect)
    "autograde/gradescope.py", "grading/",  # its public checks come back (grading.STUDENT_RELEASE_FILES)
    "tools/", "book/_ext/", "book/_static/", "_config.yml", "book/_toc.yml",  # the book's build
    "pyproject.toml", "environment.yml",
    "requirements.in", "requirements.txt",
    "chapters/09-exercises.", "README.md", "CONTRIBUTING.md",
) + tuple(master[: -len(".md")] + "." for _, master in ASSIGNMENTS.values())

#: What the release's notebooks and modules import (tests/instructor/test_release_kit.py parses them and
#: checks this list covers every import), plus JupyterLab to open them: distribution names,
#: pinned to the course's own requirements.txt. No build or test package.
STUDENT_PACKAGES = (
    "torch", "numpy", "scipy", "threadpoolctl", "matplotlib", "matplotlib-inline", "cycler",
    "pillow", "ipython", "ipykernel", "jupytext",
)
#: JupyterLab is not part of the course's development environment: its pin lives here.
JUPYTERLAB = "jupyterlab==4.6.6"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: The book's glue (myst-nb) only fills the book's prose; the release's chapters use the
#: course's own stand-in, which computes the values and shows nothing (labs/notebook.py).
GLUE_IMPORT = ("from myst_nb import glue", "from labs.notebook import glue")
#: The graded functions of ``solutions/`` (and helpers that exist only for them), which the
#: student release ships as stubs: file -> {function: exercise number}, from the registry.
ONLY_FOR_AN_EXERCISE = {"compute_optimal_sweep": ("solutions/scaling.py", "ex2")}
STUBBED: dict = {}
for _exercise in EXERCISES:
    STUBBED.setdefault(_exercise.reference, {})[_exercise.function] = _exercise.number
for _helper, (_file, _id) in ONLY_FOR_AN_EXERCISE.items():
    STUBBED.setdefault(_file, {})[_helper] = EXERCISE_BY_ID[_id].number
#: Library routes to a graded answer that the chapters need for other inputs: in the release
#: each refuses the exercise's own inputs (file -> {function: (argument, exercise)}), with a
#: helper appended to the file that tells them (GUARD_HELPERS).
GUARDED = {
    "solutions/scaling.py": {"parametric_loss": ("constants", 1)},
    # Exercise 3 is the 12-byte count split by strategy: every route to it (the chapter's
    # stacked bars, ZeRO's stages, and through them the 3D and MoE sums) refuses that count.
    "solutions/memory.py": {"memory_breakdown": ("convention", 3), "zero_memory_per_gpu": ("convention", 3),
                            "_sharded_state": ("conv", 3)},
}
GUARD_HELPERS = {
    "solutions/scaling.py": '''

def _exercise_constants(constants) -> bool:
    """The student release: whether ``constants`` are Exercise 1's (to 0.05%, which still
    tells them from Hoffmann et al.'s 406.4 and 410.7)."""
    fields = ("E", "A", "B", "alpha", "beta")
    try:
        return all(abs(getattr(constants, f) / getattr(EXERCISE, f) - 1) < 5e-4 for f in fields)
    except (AttributeError, TypeError, ZeroDivisionError):
        return False
''',
    "solutions/memory.py": '''

def _exercise_convention(convention) -> bool:
    """The student release: whether ``convention`` counts Exercise 3's bytes per parameter
    (the course's 12, by name or as a :class:`ByteConvention` whose parts add up to 12)."""
    try:
        return abs(get_convention(convention).total - CHAPTER_BYTES_PER_PARAM) < 1e-9
    except (ValueError, TypeError, AttributeError):
        return False


_exercise_conv = _exercise_convention
''',
}
#: Calls that raise in the release: a chapter's cell that makes one is tagged
#: ``raises-exception``, so that "Run all" goes on past it (its stored output stays readable).
RAISING_CALL = re.compile(r"\b(" + "|".join(sorted(f for fs in STUBBED.values() for f in fs)) + r")\s*\("
                          r"|\bparametric_loss\([^)]*\bEXERCISE\)")

#: Exercise 3's routes: the memory functions that refuse a 12-byte count in the release
#: (directly or through the guarded ones), which a cell reaches with a 12-byte convention.
MEMORY_ROUTES = ("memory_breakdown", "zero_memory_per_gpu", "memory_per_gpu_3d", "moe_memory_breakdown",
                 "moe_memory_per_gpu", "_sharded_state")


def twelve_byte_conventions() -> set:
    """Names a cell may give a 12-byte convention by (Exercise 3's count): the keys of
    ``BYTE_CONVENTIONS`` and the module constants of ``solutions/`` that count 12 bytes per
    parameter (DeepSeek-V3's FP8 state also adds up to 12)."""
    import importlib
    import pkgutil

    import solutions
    from solutions.memory import BYTE_CONVENTIONS, CHAPTER_BYTES_PER_PARAM, ByteConvention

    names = {k for k, c in BYTE_CONVENTIONS.items() if c.total == CHAPTER_BYTES_PER_PARAM}
    for info in pkgutil.iter_modules(solutions.__path__):
        module = importlib.import_module(f"solutions.{info.name}")
        names |= {k for k, v in vars(module).items()
                  if isinstance(v, ByteConvention) and v.total == CHAPTER_BYTES_PER_PARAM}
    return names


def _reaches_exercise_3(tree: ast.AST, twelve: set, calls: re.Pattern) -> bool:
    """Whether code calls a memory route with a 12-byte convention: a name or string of
    ``twelve`` in the same code, or ``memory_breakdown`` with its default (the 12 bytes)."""
    source = ast.unparse(tree)
    if not calls.search(source):
        return False
    words = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    words |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    words |= {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    defaults = any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "memory_breakdown"
                   and len(n.args) < 4 and "convention" not in {k.arg for k in n.keywords}
                   for n in ast.walk(tree))
    return bool(words & twelve) or defaults


def _stored(node: ast.AST) -> set:
    """The names a statement binds."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _loaded(node: ast.AST) -> set:
    """The names a statement reads from outside it (loop, comprehension and argument names
    that it binds itself left out, and in a compound statement every name it binds: a loop
    that sets ``c`` and then reads it does not need an earlier ``c``)."""
    own = {name.id for loop in ast.walk(node) if isinstance(loop, (ast.comprehension, ast.For))
           for name in ast.walk(loop.target) if isinstance(name, ast.Name)}
    own |= {a.arg for args in ast.walk(node) if isinstance(args, ast.arguments)
            for a in args.posonlyargs + args.args + args.kwonlyargs + [args.vararg, args.kwarg] if a is not None}
    if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr)):
        own |= _stored(node)
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - own


def _bind_twelve_byte_names(statement: ast.AST, twelve: set) -> None:
    """Add to ``twelve`` the names ``statement`` binds to a 12-byte convention (an assignment
    whose value names one and calls no memory route: ``chapter = BYTE_CONVENTIONS["chapter_12"]``,
    ``CONVENTIONS = {"chapter_12": ...}``)."""
    for node in ast.walk(statement):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        value = node.value
        words = ({n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
                 | {n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)}
                 | {n.value for n in ast.walk(value) if isinstance(n, ast.Constant) and isinstance(n.value, str)})
        if words & twelve and not any(isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(
                n.func, "id", "")) in MEMORY_ROUTES for n in ast.walk(value)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            twelve |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def exercise_3_routes(out: Path) -> tuple[set, re.Pattern, re.Pattern]:
    """The 12-byte names (twelve_byte_conventions), a pattern of the calls that reach a
    memory route (raising with a 12-byte convention), and one of the calls that always raise
    in the release: the functions of its ``solutions/`` (outside memory.py) that call a memory
    route with a 12-byte convention (``practice.s01_state``)."""
    twelve = twelve_byte_conventions()
    routes = set(MEMORY_ROUTES)
    while True:
        calls = re.compile(r"\b(" + "|".join(sorted(routes)) + r")\s*\(")
        found = {node.name for path in sorted((Path(out) / "solutions").glob("*.py")) if path.name != "memory.py"
                 for node in ast.parse(path.read_text(encoding="utf-8")).body
                 if isinstance(node, ast.FunctionDef) and _reaches_exercise_3(node, twelve, calls)}
        if found <= routes:
            always = sorted(routes - set(MEMORY_ROUTES)) or ["(?!)"]
            return twelve, calls, re.compile(r"\b(" + "|".join(always) + r")\s*\(")
        routes |= found


#: Gradescope needs only what grading imports: numpy, and jupytext for .md submissions.
GRADESCOPE_PACKAGES = ("numpy", "jupytext")

#: The commands a student is told to run, from the release's top folder. A test runs each
#: one in a fresh release (tests/instructor/test_autograde_release.py).
STUDENT_COMMANDS = (
    "python -m autograde chapters/09-exercises.ipynb",
    "python -m autograde chapters/09-exercises.ipynb --json my-report.json",
)

STUDENT_README = """# Scaling laws & distributed training: the student's kit

The course's notebooks, labs and exercises. The four graded exercises are in
`chapters/09-exercises.ipynb` (its MyST twin is `chapters/09-exercises.md`): every place to
write code raises `NotImplementedError` until you replace it.

## Setting up

Python 3.11 to 3.13. From this folder, in a virtual environment:

```sh
python3 -m venv .venv && . .venv/bin/activate        # Windows: py -m venv .venv, then .venv\\Scripts\\activate
pip install {torch_pin} --index-url {cpu_index}    # torch's CPU build (see below)
pip install -r requirements.txt
jupyter lab
```

`jupyter lab` opens JupyterLab in your browser, in this folder: open
`chapters/09-exercises.ipynb` from its file browser.

The second line installs torch's CPU-only build (about 0.2 GB to download). Without it, pip on
Linux takes PyPI's torch with its CUDA libraries (several GB): skip that line only on a machine
with an NVIDIA GPU on which you want the labs to use NCCL. The labs run on CPU processes either
way. `requirements.txt` holds only what the notebooks import and JupyterLab.

On Colab or Kaggle, or with a notebook downloaded on its own, you need none of this: the
notebook's first cell fetches this kit next to it and installs only what is missing.

## Working on the exercises

- Open `chapters/09-exercises.ipynb` in JupyterLab and work top to bottom. Hints come first;
  run each exercise's check cell as you go. It runs the public tests in the same sandbox as
  the grader (only numpy and the Python standard library can be imported, with a time limit
  per test) and explains what is wrong. The grader adds hidden tests with random inputs
  ({hidden_points} of the {total_points} points); the check cells name them.
- To see the whole report the grader will print, save the notebook and run, from this folder
  (the one with this README):

```sh
python -m autograde chapters/09-exercises.ipynb
python -m autograde chapters/09-exercises.ipynb --json my-report.json
```

  The first prints the report; the second also writes it to `my-report.json`.

## The chapters and labs

Every chapter and lab runs from here: they import the course's package `solutions/`. In this
kit its graded functions ({graded_functions}) are stubs that raise `NotImplementedError` naming the
exercise, `parametric_loss` refuses Exercise 1's constants, and the memory functions
(`memory_breakdown`, `zero_memory_per_gpu` and those built on them) refuse a convention of 12
bytes per parameter, Exercise 3's count, while computing every other. The chapters use the
library's own functions, except where a figure is an exercise's result: the grid-search
figures of *The Chinchilla correction* (Exercise 2), and the model state at 12 bytes per
parameter in *Introduction*, *The setup*, *Why distribute*, *Data parallelism*, *FSDP* and
*Beyond 3D* (Exercise 3; DeepSeek-V3's FP8 state also counts 12 bytes). Those cells raise instead: they are tagged so that "Run all" goes on past
them, and the book's outputs are kept for reading. The labs run whole.

## The assignments

`assignments/` holds one notebook per assignment, in which you write distributed training
code that runs on real processes (torch's gloo backend, on the CPU). Each has a self-check
cell that runs the grader's own checks; your instructor says how to hand it in. To see the
grader's whole report on a saved assignment notebook, run from this folder, for Assignment 1:

```sh
python -m autograde --assignment a1 assignments/a1-ring-allreduce.ipynb
```

(`a2` to `a6` for the others). It runs the checks with three seeds, the self-check with one
(Assignment 6's with all three).
Assignment 1's `ring_all_reduce` is also the ring the labs run: in this kit,
`labs/collectives.py` holds a stub in its place, which your answer can replace. Until then
the labs say so in one line and use torch's built-in all-reduce instead (Labs 2 and 4, and
the data x tensor parallel grid of Lab 5), their ring checks reported as skipped; asking for
the ring explicitly (`--allreduce ring`, `--comm ring`) is an error until it is written.
"""


def git_files(root: Path = ROOT) -> list:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=root, check=True,
                             capture_output=True).stdout
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SystemExit(f"release: the course must be a git checkout ({exc})") from None
    return [p for p in out.decode().split("\0") if p and (root / p).is_file()]


def without_hidden_checks(source: str) -> str:
    """A check module with the body of ``hidden_checks`` replaced by ``return []``."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "hidden_checks":
            start = node.body[0].lineno - 1
            indent = " " * node.body[0].col_offset
            lines[start:node.end_lineno] = [
                f'{indent}"""Hidden checks are not part of the student release."""\n',
                f"{indent}return []\n"]
            return "".join(lines)
    return source


def stub_functions(source: str, functions: dict, where: str) -> str:
    """``source`` with each top-level function of ``functions`` (name -> exercise number)
    reduced to its signature, its docstring and a ``raise NotImplementedError`` naming the
    exercise. Raises ValueError if a function is missing (the release would leak it)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in functions:
            found[node.name] = node
    missing = set(functions) - set(found)
    if missing:
        raise ValueError(f"{where}: no top-level function {sorted(missing)} to stub")
    for node in sorted(found.values(), key=lambda n: n.lineno, reverse=True):
        body = node.body
        has_doc = (isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                   and isinstance(body[0].value.value, str))
        start = body[0].lineno - 1
        indent = " " * body[0].col_offset
        number = functions[node.name]
        # Only the docstring's first paragraph: the rest may spell the answer out as code.
        summary = first_paragraph(body[0].value.value) if has_doc else ""
        lines[start:node.end_lineno] = ([f'{indent}"""{summary}"""\n'] if summary else []) + [
            f'{indent}raise NotImplementedError(\n'
            f'{indent}    "`{node.name}` is Exercise {number}: write it in chapters/09-exercises.ipynb. "\n'
            f'{indent}    "The course\'s reference solution is not part of the student release.")\n']
    return "".join(lines)


def guard_functions(source: str, functions: dict, where: str) -> str:
    """``source`` with each function of ``functions`` (name -> (argument, exercise)) refusing,
    right after its docstring, the exercise's inputs (``_exercise_<argument>`` tells them)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    found = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in functions}
    if set(functions) - set(found):
        raise ValueError(f"{where}: no top-level function {sorted(set(functions) - set(found))} to guard")
    for name, node in sorted(found.items(), key=lambda item: item[1].lineno, reverse=True):
        argument, number = functions[name]
        body = node.body
        has_doc = isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant)
        at = body[0].end_lineno if has_doc else body[0].lineno - 1
        indent = " " * body[0].col_offset
        lines[at:at] = [
            f"{indent}if _exercise_{argument}({argument}):\n",
            f"{indent}    raise NotImplementedError(\n",
            f'{indent}        "`{name}` with the exercise\'s {argument} is Exercise {number}: write it in "\n',
            f'{indent}        "chapters/09-exercises.ipynb. The student release computes it for any other {argument}.")\n']
    return "".join(lines)


def tag_raising_cells(notebook: Path, exercise_3: tuple | None = None) -> int:
    """Tag ``raises-exception`` the code cells of a shipped chapter that call a stubbed or
    guarded route (``exercise_3``: exercise_3_routes of the release, for the memory routes);
    write the notebook and its MyST twin; return how many were tagged."""
    import jupytext
    import nbformat

    nb = nbformat.read(notebook, as_version=4)
    tagged = 0
    lost: set = set()  # names that only a raising cell defines: later cells using them raise too
    twelve, memory_calls, raising_calls = exercise_3 or (set(), re.compile(r"(?!)"), re.compile(r"(?!)"))
    twelve = set(twelve)  # and the names a cell binds to a 12-byte convention
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse("\n".join(l for l in cell.source.splitlines()
                                       if not l.lstrip().startswith(("%", "!"))))
        except SyntaxError:
            continue
        raising = None  # the first top-level statement that raises: names stored before it stay
        for at, statement in enumerate(tree.body):
            _bind_twelve_byte_names(statement, twelve)
            code = ast.unparse(statement)  # without comments, which may name a stub
            used = _loaded(statement)
            reaches = (RAISING_CALL.search(code) or used & lost or raising_calls.search(code)
                       or _reaches_exercise_3(statement, twelve, memory_calls))
            if reaches and isinstance(statement, (ast.FunctionDef, ast.ClassDef)):
                lost.add(statement.name)  # defining it raises nothing; calling it does
            elif reaches:
                raising = at
                break
            else:
                lost -= _stored(statement) | ({statement.name} if isinstance(
                    statement, (ast.FunctionDef, ast.ClassDef)) else set())
        if raising is not None:
            lost |= set().union(*(_stored(st) for st in tree.body[raising:]))
            tags = cell.metadata.setdefault("tags", [])
            if "raises-exception" not in tags:
                tags.append("raises-exception")
                tagged += 1
    if tagged:
        nbformat.write(nb, notebook)
        jupytext.write(nb, notebook.with_suffix(".md"), fmt="md:myst")
    return tagged


def first_paragraph(docstring: str) -> str:
    """A docstring's first paragraph, on one line (no quotes or backslashes to escape)."""
    text = " ".join(docstring.strip().split("\n\n", 1)[0].split())
    text = text.replace("\\", "").replace('"""', "'")
    return text[:-1] + "." if text.endswith(":") else text


def brief_module_docstring(source: str, where: str) -> str:
    """``source`` with its module docstring cut to the first paragraph: the grading modules'
    docstrings state each exercise's answer, as code for Exercise 4."""
    tree = ast.parse(source)
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        return source
    lines = source.splitlines(keepends=True)
    summary = first_paragraph(first.value.value)
    lines[first.lineno - 1:first.end_lineno] = [f'"""{summary} (Public checks of the student release.)"""\n']
    return "".join(lines)


def student_requirements(pins: Path = ROOT / "requirements.txt") -> list:
    """``name==version`` for STUDENT_PACKAGES (torch first) from the course's pins, then
    JupyterLab's pin. Raises ValueError naming a package the pins lack."""
    pinned = {}
    for line in pins.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name = line.split("==", 1)[0].strip().lower().replace("_", "-")
            pinned[name] = line.split(";", 1)[0].strip()
    missing = [name for name in STUDENT_PACKAGES if name not in pinned]
    if missing:
        raise ValueError(f"{pins.name}: no pin for {', '.join(missing)} (the student release needs them)")
    return [pinned[name] for name in STUDENT_PACKAGES] + [JUPYTERLAB]


def hidden_and_total_points() -> tuple[float, float]:
    from grading import load_checks

    hidden = sum(c.points for c in load_checks(include_hidden=True, seed=0) if c.hidden)
    return hidden, sum(e.max_points for e in EXERCISES)


# ----------------------------------------------------------------------------- student

def build_student(out: Path) -> None:
    from grading import STUDENT_RELEASE_FILES

    out = Path(out).resolve()
    if out.exists():
        shutil.rmtree(out)
    keep_grading = tuple(f"grading/{name}" for name in STUDENT_RELEASE_FILES)
    for rel in git_files():
        if rel.startswith(STUDENT_EXCLUDED) and rel not in keep_grading + OLD_NAME_SHIMS:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, target)
    strip_marked_modules(out)  # assignments' answers inside the course's modules
    for rel, functions in STUBBED.items():
        target = out / rel
        source = stub_functions((ROOT / rel).read_text(encoding="utf-8"), functions, rel)
        if rel in GUARDED:
            source = guard_functions(source, GUARDED[rel], rel) + GUARD_HELPERS[rel]
        target.write_text(source, encoding="utf-8")
    for rel in sorted(keep_grading):  # also those not committed yet (e.g. regenerated JSON)
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        source = (ROOT / rel).read_text(encoding="utf-8")
        if rel.endswith(".py"):
            source = brief_module_docstring(without_hidden_checks(source), rel)
        target.write_text(source, encoding="utf-8")
    hidden, total = hidden_and_total_points()
    requirements = student_requirements()
    (out / "README.md").write_text(STUDENT_README.format(
        graded_functions=", ".join(f"`{e.function}`" for e in EXERCISES),
        hidden_points=f"{hidden:g}", total_points=f"{total:g}", cpu_index=TORCH_CPU_INDEX,
        torch_pin=next(r for r in requirements if r.startswith("torch=="))), encoding="utf-8")
    (out / "requirements.txt").write_text(
        "# The student's kit: what its notebooks import, and JupyterLab (README.md).\n"
        "# For torch's CPU build (no NVIDIA GPU needed; a far smaller download), first run\n"
        f"#   pip install {requirements[0]} --index-url {TORCH_CPU_INDEX}\n"
        + "".join(line + "\n" for line in requirements), encoding="utf-8")
    for notebook in sorted(p for folder in ("chapters", "labs", "assignments") for suffix in ("md", "ipynb")
                           for p in out.glob(f"{folder}/*.{suffix}")):
        text = notebook.read_text(encoding="utf-8")
        if GLUE_IMPORT[0] in text:
            notebook.write_text(text.replace(*GLUE_IMPORT), encoding="utf-8")
    exercise_3 = exercise_3_routes(out)
    for notebook in sorted(out.glob("chapters/*.ipynb")) + sorted(out.glob("labs/*.ipynb")):
        if notebook.name != Path(EXERCISES_MASTER).with_suffix(".ipynb").name:
            tag_raising_cells(notebook, exercise_3)
    subprocess.run([sys.executable, str(ROOT / "instructor" / "student_notebook.py"),
                    str(ROOT / EXERCISES_MASTER), "--out", str(out / "chapters")],
                   check=True, capture_output=True, cwd=ROOT)
    for _, master in ASSIGNMENTS.values():
        subprocess.run([sys.executable, str(ROOT / "instructor" / "student_notebook.py"),
                        str(ROOT / master), "--out", str(out / Path(master).parent)],
                       check=True, capture_output=True, cwd=ROOT)
    verify_student(out)


def strip_marked_modules(out: Path) -> list:
    """In every ``.py`` of the release, replace each worked solution between the markers
    (an assignment's reference answer that a lab runs: Lab 1's ``ring_all_reduce`` is
    Assignment 1's) by a ``raise NotImplementedError``, as the student notebooks are made
    (``instructor/student_notebook.strip_solutions``). Returns the files changed."""
    from instructor.student_notebook import BEGIN, strip_solutions

    changed = []
    for path in sorted(Path(out).rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if any(line.strip() == BEGIN for line in text.splitlines()):
            stub, _, _ = strip_solutions(text, path.relative_to(out).as_posix())
            path.write_text(stub + "\n", encoding="utf-8")
            changed.append(path.relative_to(out).as_posix())
    return changed


VERIFY_STUDENT = r"""
import io, json, runpy, sys, contextlib
release, course, reference = sys.argv[1:4]
sys.path[:] = [release] + [p for p in sys.path if p not in ("", ".", course)]
import solutions
assert solutions.__file__.startswith(release), solutions.__file__
import inspect
import grading
assert grading.__file__.startswith(release), grading.__file__
from grading import EXERCISES, load_checks
for name in [e.function for e in EXERCISES]:
    function = getattr(solutions, name)
    required = [p for p in inspect.signature(function).parameters.values() if p.default is p.empty]
    try:
        function(*[1.0] * len(required))  # a stub raises whatever the arguments
        sys.exit(f"solutions.{name} answers in the release")
    except NotImplementedError:
        pass
    except Exception as exc:
        sys.exit(f"solutions.{name} is not a stub in the release: {type(exc).__name__}")
from autograde.selfcheck import self_check
checks = load_checks(include_hidden=True, seed=1)
assert checks and not any(c.hidden for c in checks), "hidden checks in the release"
functions = runpy.run_path(reference)
out = {}
for exercise in EXERCISES:
    with contextlib.redirect_stdout(io.StringIO()):
        earned = self_check(exercise.id, functions[exercise.function])
    public = sum(c.points for c in checks if c.exercise == exercise.id)
    out[exercise.id] = [earned, public]
from autograde.cli import main
with contextlib.redirect_stdout(io.StringIO()) as text:
    code = main([release + "/chapters/09-exercises.ipynb", "--json", release + "/.verify.json"])
report = json.load(open(release + "/.verify.json"))
out["cli"] = [code, report["score"], text.getvalue().count("not implemented yet"),
              f"worth {sum(h['points'] for e in json.load(open(release + '/grading/public_expected.json'))['hidden'].values() for h in e):g} more points" in text.getvalue()]
print(json.dumps(out))
"""


def verify_student(out: Path) -> dict:
    """Run the release's self-check and grader with the course out of reach."""
    out = Path(out).resolve()
    done = subprocess.run([sys.executable, "-c", VERIFY_STUDENT, str(out), str(ROOT),
                           str(REFERENCE)], capture_output=True, text=True, cwd=out, timeout=300)
    (out / ".verify.json").unlink(missing_ok=True)
    if done.returncode != 0:
        raise SystemExit(f"release: the student release does not work:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    for exercise, (earned, public) in ((k, v) for k, v in result.items() if k != "cli"):
        if earned != public:
            raise SystemExit(f"release: the reference earns {earned}/{public} public points "
                             f"for {exercise} in the student release")
    code, score, messages, hidden = result["cli"]
    exercises = len(EXERCISES)
    if code != 0 or score != 0 or messages != exercises or not hidden:
        raise SystemExit(f"release: grading the student notebook gave exit {code}, score "
                         f"{score}, {messages} 'not implemented' messages, hidden points "
                         f"{'named' if hidden else 'not named'} (want 0, 0, {exercises}, named)")
    return result


# ----------------------------------------------------------------------------- gradescope

def pinned_requirements(names=GRADESCOPE_PACKAGES) -> list:
    """``name==version`` for the packages and everything they need, as installed here."""
    from packaging.requirements import Requirement

    seen: dict = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        dist = importlib.metadata.distribution(name)
        seen[key] = f"{dist.metadata['Name']}=={dist.version}"
        for text in dist.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return sorted(seen.values(), key=str.lower)


def gradescope_files() -> list:
    """Repository paths that go into the autograder, besides the bundle's scripts."""
    files = [p.relative_to(ROOT).as_posix() for folder in ("autograde", "sandbox", "grading", "solutions")
             for p in (ROOT / folder).rglob("*.py") if "__pycache__" not in p.parts]
    files += ["grading/public_expected.json"]
    files += [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "solutions" / "data").glob("*"))
              if p.is_file()]  # the tables solutions/ reads (the GPUs')
    return sorted(set(files))


def build_gradescope(out: Path, verify: bool = True, assignment: str | None = None) -> Path:
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    archive = out / "autograder.zip"
    requirements = "".join(line + "\n" for line in pinned_requirements())
    extra = assignment_bundle(assignment) if assignment else {}
    if extra:
        requirements = extra.pop("requirements-autograder.txt")
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as z:
        for name in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            z.writestr(info, (BUNDLE / name).read_bytes(), zipfile.ZIP_DEFLATED)
        z.writestr(zipfile.ZipInfo("requirements-autograder.txt", (2024, 1, 1, 0, 0, 0)),
                   requirements, zipfile.ZIP_DEFLATED)
        for rel in gradescope_files() + sorted(extra):
            info = zipfile.ZipInfo(rel, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = 0o100644 << 16
            z.writestr(info, extra[rel] if rel in extra else (ROOT / rel).read_bytes(),
                       zipfile.ZIP_DEFLATED)
    if verify and assignment:
        verify_assignment_bundle(archive, assignment)
    elif verify:
        results = run_bundle(archive, REFERENCE)
        full = sum(e.max_points for e in EXERCISES)  # every test of every exercise, hidden ones too
        if not results["tests"] or sum(t["max_score"] for t in results["tests"]) != full \
                or results["score"] != full:
            raise SystemExit(f"release: the bundle gave the reference {results['score']}/{full} "
                             f"over {len(results['tests'])} tests")
    return archive


# ----------------------------------------------------------------------------- an assignment's bundle

#: What grading an assignment imports besides the exercises' grader: torch (its CPU build,
#: installed by setup.sh from PyTorch's index) and the course's packages below.
ASSIGNMENT_FOLDERS = ("assignments", "labs")


def assignment_bundle(assignment: str) -> dict:
    """The files an assignment's bundle adds, ``{path in the zip: bytes}``: the grader's
    packages (``.py`` only: no master notebook), ``assignment`` (its id, which
    ``run_autograder`` passes on), ``torch-version`` (the pin ``setup.sh`` installs from
    PyTorch's CPU index) and the requirements with torch's own dependencies pinned."""
    from assignments.common import grader

    grader(assignment)  # an unknown id: a clear error before anything is written
    files = {p.relative_to(ROOT).as_posix(): p.read_bytes() for folder in ASSIGNMENT_FOLDERS
             for p in sorted((ROOT / folder).glob("*.py"))}
    torch_pin = importlib.metadata.version("torch").split("+")[0]  # 2.13.0+cpu -> 2.13.0
    pins = [p for p in pinned_requirements(GRADESCOPE_PACKAGES + ("torch",))
            if not p.lower().startswith("torch==")]
    files.update({"assignment": assignment.encode() + b"\n",
                  "torch-version": torch_pin.encode() + b"\n",
                  "requirements-autograder.txt": "".join(p + "\n" for p in pins)})
    return files


def verify_assignment_bundle(archive: Path, assignment: str) -> dict:
    """The bundle, run as Gradescope runs it, gives the reference full marks and the
    student's untouched notebook zero."""
    from assignments import ASSIGNMENTS
    from assignments.common import reference_submission

    from instructor.student_notebook import write_student_version

    with tempfile.TemporaryDirectory(prefix="autograder-ref-") as tmp:
        reference = reference_submission(assignment, Path(tmp))
        good = run_bundle(archive, reference)
        stub, _ = write_student_version(ROOT / ASSIGNMENTS[assignment][1], Path(tmp) / "stub")
        bad = run_bundle(archive, stub)
    full = sum(t["max_score"] for t in good["tests"])
    if not good["tests"] or good["score"] != full:
        raise SystemExit(f"release: the {assignment} bundle gave the reference {good['score']}/{full}")
    if bad["score"] != 0:
        raise SystemExit(f"release: the {assignment} bundle gave the untouched notebook {bad['score']}")
    return {"reference": good, "stub": bad}


def run_bundle(archive: Path, submission: Path, python: str = sys.executable) -> dict:
    """Unpack the autograder as Gradescope would and run ``run_autograder`` on one file;
    return the results.json it wrote."""
    with tempfile.TemporaryDirectory(prefix="autograder-") as tmp:
        tmp = Path(tmp)
        source, uploads, results = tmp / "source", tmp / "submission", tmp / "results"
        with zipfile.ZipFile(archive) as z:
            z.extractall(source)
        for name in ("run_autograder", "setup.sh"):
            os.chmod(source / name, 0o755)
        uploads.mkdir()
        shutil.copy(submission, uploads / submission.name)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "AUTOGRADER_SOURCE": str(source),
               "AUTOGRADER_SUBMISSION": str(uploads), "AUTOGRADER_RESULTS": str(results),
               "AUTOGRADER_PYTHON": python}
        done = subprocess.run(["bash", str(source / "run_autograder")], env=env,
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise SystemExit(f"release: run_autograder failed:\n{done.stderr[-3000:]}")
        return json.loads((results / "results.json").read_text())


def main(argv=None) -> int:
    parser = terse_argparse_errors(argparse.ArgumentParser(prog="python -m instructor",
                                     description=__doc__.splitlines()[0]))
    parser.add_argument("what", choices=("student", "gradescope"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--no-verify", action="store_true",
                        help="gradescope: skip running the bundle on the reference")
    parser.add_argument("--assignment", metavar="ID", default=None,
                        help="gradescope: a bundle that grades this assignment (a1, ...) "
                             "instead of the exercises")
    args = parser.parse_args(argv)
    if args.what == "student":
        build_student(args.out)
        print(f"Student release written to {args.out} (checked: public tests and grader run "
              "there; solutions/ holds stubs for the graded functions).")
    else:
        archive = build_gradescope(args.out, verify=not args.no_verify, assignment=args.assignment)
        print(f"Gradescope autograder written to {archive}"
              + ("" if args.no_verify else " (checked: it gives the reference full marks)."))
    return 0


if __name__ == "__main__":
    sys.exit(main())
