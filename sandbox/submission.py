"""Turn a submitted file into *units*: pieces of code the sandbox runs one after another.

* A notebook (``.ipynb``, or a Jupytext-paired MyST ``.md``) gives one unit per code cell.
  Stored outputs are ignored: the code is run again. Lines that only IPython understands
  (``%magic``, ``!shell``) become ``pass``; cells in another language (``%%bash``...) and the
  cells that set up the self-check (they import or look for ``grading``, which the
  sandbox does not have) are dropped. ``self_check(...)`` calls themselves do nothing in the
  sandbox (the worker defines it as a no-op).
* A ``.py`` file gives one unit per top-level statement (statements sharing a line stay
  together), executed in order in one namespace, exactly like importing the module, except
  that a statement that fails (``sys.exit(0)``, a ``NameError``, an infinite loop) costs only
  itself: the definitions after it still exist. This is the notebook rule, applied to
  statements, and it is what makes one broken exercise cost only that exercise. A file that
  does not parse has no units at all, and every exercise gets the syntax error as feedback.

Parsing happens in the grader, on text only: nothing here executes submitted code.
"""
from __future__ import annotations

import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from .textsafe import file_name, printable

SUFFIXES = (".ipynb", ".md", ".py")


def _cells(n: int) -> str:
    """``'1 cell'``, ``'3 cells'`` (written here: the grading engine imports nothing of
    ``solutions/``, which a student's copy may lack)."""
    return f"{n} cell" if n == 1 else f"{n} cells"


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


#: The most code a submission may hold: a ``.py`` or ``.md`` file, or a notebook's code cells.
MAX_BYTES = 20 * 1024 * 1024
#: The most a ``.ipynb`` file may weigh, stored outputs included: they are never run nor
#: counted toward :data:`MAX_BYTES` (a notebook that kept its figures is not too large), but
#: the file is read whole, so this bounds the grader's memory (about four times the file).
MAX_NOTEBOOK_BYTES = 100 * 1024 * 1024
#: Bounds on the grader's own parsing, checked before any parser runs, so that its memory
#: stays well under 1 GB for any file within MAX_BYTES. Python's AST costs about 0.5-1 KB of
#: memory per token, and a MyST file is parsed by a markdown parser that is slower still;
#: an exercise file has a few thousand tokens and lines.
MAX_LINES = 100_000
MAX_TOKENS = 250_000
MAX_MARKDOWN_BYTES = 2 * 1024 * 1024
#: Objects and lists in a notebook's JSON (counted as brackets, strings included, so an
#: over-estimate): each costs about 70 bytes once parsed; a notebook has a few thousand.
MAX_JSON_CONTAINERS = 500_000
#: A statement or cell longer than this is not run (the request carrying it to the sandbox
#: would be too large); the rest of the file is.
MAX_UNIT_CHARS = 2 * 1024 * 1024
#: More units than this are run in consecutive groups: each unit is a round trip to the
#: sandbox, and a file of 100,000 one-line statements must not take minutes to load.
MAX_UNITS = 500

def plumbing_pattern(packages, calls=(), extra: str = "") -> re.Pattern:
    r"""The one pattern that finds the self-check's set-up in a cell or statement: a line that
    imports one of ``packages`` (or a module inside one), a call of one of ``calls``, or
    ``extra`` (more alternatives). Linear in the text: ``[ \t]*``, not ``\s*``, after a line
    start, since at every line start ``\s*`` would run over all the blank lines below it, which
    is quadratic in their number (a 99,000-line file of blank lines took minutes)."""
    names = "|".join(re.escape(p) for p in packages)
    alternatives = [rf"^[ \t]*(?:from|import)[ \t]+(?:{names})(?:\.|\s|$)"]
    alternatives += [rf"\b{re.escape(c)}\(" for c in calls]
    return re.compile("|".join(alternatives + ([extra] if extra else [])), re.M)


#: Cells that import, or go looking for, the course's own packages (the self-check's setup,
#: a Colab bootstrap, which tests for the course's ``coursefig``): the sandbox has neither
#: the grading packages (``grading``, ``autograde``; ``tests.grading`` in notebooks released
#: before the move) nor ``solutions``.
COURSE_PLUMBING = plumbing_pattern(
    ("tests", "grading", "autograde", "solutions"),
    extra=r"find_spec\(\s*[\"'](?:tests|grading|autograde|solutions|coursefig)\b"
          r"|[\"']tests[\"']\s*/\s*[\"']grading[\"']")
DEF_LINE = re.compile(r"^(?:async\s+)?def\s+([A-Za-z_]\w*)\s*\(", re.M)
#: Cell magics whose body is still Python: only the magic line goes.
PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}


@dataclass(frozen=True)
class Unit:
    index: int
    label: str  # "cell 7" or "line 12": how the student finds it
    filename: str  # the name compile() gives it, so tracebacks point at it
    source: str  # the code itself, not padded (padding costs the square of a file's lines)
    defines: frozenset = frozenset()
    line: int = 1  # the line of the student's file where ``source`` starts

    @property
    def first_line(self) -> str:
        """The unit's first non-blank line, shortened, with control characters escaped (it
        is printed in reports)."""
        for line in self.source[:4096].splitlines():
            if line.strip():
                line = printable(line.strip())
                return line if len(line) <= 60 else line[:57] + "..."
        return ""



@dataclass
class Submission:
    path: Path
    kind: str  # "py", "ipynb" or "md"
    units: list = field(default_factory=list)
    problem: str | None = None  # why nothing at all can run
    notes: list = field(default_factory=list)  # what was left out, for the report
    markdown_defs: set = field(default_factory=set)  # "def f(" seen in markdown cells

    def defining_units(self, name: str) -> list:
        return [u for u in self.units if name in u.defines]


# ----------------------------------------------------------------------------- names

def _bound_names(nodes) -> set:
    """Names bound at module level by these statements (not inside functions or classes)."""
    names: set = set()
    for node in nodes:
        if type(node) is ast.Assign and all(type(t) is ast.Name for t in node.targets):
            names.update(t.id for t in node.targets)  # the common case, without a walk
            continue
        if type(node) is ast.Expr:
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                names.add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            targets = getattr(node, "targets", None) or [
                getattr(node, "target", None)] + [i.optional_vars for i in getattr(node, "items", [])]
            for target in targets:
                if target is not None:
                    names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        for attr in ("body", "orelse", "finalbody", "handlers"):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names |= _bound_names(getattr(node, attr, []) or [])
    return names


def names_defined(source: str) -> frozenset:
    try:
        return frozenset(_bound_names(ast.parse(source).body))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return frozenset(DEF_LINE.findall(source))


# ----------------------------------------------------------------------------- text

def _read_text(path: Path, limit: int = MAX_BYTES) -> tuple[str | None, str | None]:
    """(text, problem). Never reads more than ``limit`` bytes, whatever the file's size says
    (a sparse file, or one that grows while it is read)."""
    try:
        size = path.stat().st_size
        if size > limit:
            return None, f"the file is {size / 1e6:.0f} MB, larger than the {limit // 10**6} MB allowed"
        with open(path, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            return None, f"the file is larger than the {limit // 10**6} MB allowed"
    except OSError as exc:
        return None, f"the file could not be read ({exc.strerror or exc})"
    if b"\x00" in data:
        return None, "the file is binary, not text: submit the notebook (.ipynb) or a .py file"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, "the file is not UTF-8 text: submit the notebook (.ipynb) or a .py file"
    if not text.strip():
        return None, "the file is empty"
    return text, None


# ----------------------------------------------------------------------------- bounds

#: One match per token a parser would see, strings and comments counted as one: an upper
#: estimate of the AST's size that costs one pass of the regular-expression engine. Linear
#: in the text whatever it holds: string bodies are unrolled loops (no nested quantifiers),
#: an escape takes any character, a newline included (``[\s\S]``: ``.`` would stop a
#: backslash-newline and send the engine back), and a closing quote is optional, so an
#: unterminated string ends at the end of its line (or of the file) instead of failing and
#: being tried again from every quote after it (which was quadratic: 200 KB of ``'\'``
#: inside a docstring took minutes, holding the GIL).
TOKEN = re.compile(
    r"[rRbBuUfF]{0,2}(?:'''[^'\\]*(?:(?:\\[\s\S]|'(?!''))[^'\\]*)*(?:''')?"
    r'|"""[^"\\]*(?:(?:\\[\s\S]|"(?!""))[^"\\]*)*(?:""")?'
    r"""|'[^'\\\n]*(?:\\[\s\S][^'\\\n]*)*'?|"[^"\\\n]*(?:\\[\s\S][^"\\\n]*)*"?)"""
    r"|#[^\n]*|\w+|[^\s\w]")


#: A physical line of Python source as the tokenizer counts them: ended by a line feed, a
#: carriage return or both only (``str.splitlines`` also breaks at a form feed, ``\x85`` or
#: U+2028, which Python reads as whitespace or as part of a string; the line numbers of the AST
#: would then point at the wrong text).
PYTHON_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def python_lines(text: str) -> list:
    """``text`` cut into lines, ends kept, numbered as ``ast`` numbers them."""
    return PYTHON_LINE.findall(text)


def code_too_large(code: str) -> str | None:
    """Why ``code`` is too large to parse (lines, tokens), or None. Checked before parsing:
    the AST of 20 MB of dense code would take about 10 GB. Lines as Python counts them (a
    carriage return alone ends one too)."""
    lines = code.count("\n") + code.count("\r") - code.count("\r\n") + 1
    if lines > MAX_LINES:
        return f"it has {lines:,} lines, more than the {MAX_LINES:,} the grader reads"
    tokens = TOKEN.subn("", code, count=MAX_TOKENS + 1)[1]
    if tokens > MAX_TOKENS:
        return f"it has more than {MAX_TOKENS:,} tokens of code, more than the grader reads"
    return None


#: YAML anchors and aliases, which let a few hundred bytes of front matter expand to
#: gigabytes (and jupytext and nbformat expand them). No notebook needs them.
YAML_ANCHOR = re.compile(r"(?:^|[\s\[{,:-])&([^\s,\[\]{}]+)")
YAML_ALIAS = re.compile(r"(?:^|[\s\[{,:-])\*([^\s,\[\]{}]+)")


def yaml_aliases(text: str) -> bool:
    """Whether ``text`` defines a YAML anchor that it also refers to (``&a`` ... ``*a``)."""
    anchors = set(YAML_ANCHOR.findall(text))
    return bool(anchors) and not anchors.isdisjoint(YAML_ALIAS.findall(text))


# ----------------------------------------------------------------------------- .py

def units_from_python(text: str, filename: str, assignment: bool = False) -> tuple[list, str | None]:
    """One unit per top-level statement (statements sharing a line stay together). With
    ``assignment``, the statements that set up or run an assignment's self-check are left
    out as well (:func:`is_self_check_statement`)."""
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError as exc:
        where = f"line {exc.lineno}: " if exc.lineno else ""
        return [], f"it has a syntax error ({where}{exc.msg}), so none of it could run"
    except (ValueError, RecursionError, MemoryError) as exc:
        return [], f"it could not be parsed as Python ({type(exc).__name__})"
    lines = python_lines(text)
    units = []
    for start, end, nodes in statement_spans(tree):
        if any(_imports_tests(n) for n in nodes):
            continue  # the self-check of an exported notebook
        if assignment and all(is_self_check_statement(n) for n in nodes):
            continue
        units.append(Unit(len(units), f"line {start}", filename, "".join(lines[start - 1:end]),
                          frozenset(_bound_names(nodes)), line=start))
    return units, None


def statement_spans(tree) -> list:
    """``[first line, last line, [statements]]`` per top-level statement of ``tree``;
    statements that share a line share a span."""
    spans: list = []
    for node in tree.body:
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        end = node.end_lineno or node.lineno
        if spans and start <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
            spans[-1][2].append(node)
        else:
            spans.append([start, end, [node]])
    return spans


def split_imports(code: str) -> list:
    """A cell as ``[(first line, source, names bound)]``: each top-level import statement
    on its own, the statements between them together, so that an import that fails (an
    unused ``import scipy``) costs that statement, as it does in a ``.py``, and not the
    functions defined in the same cell. A cell that does not parse, or has a
    ``from __future__`` import (which must stay at the top of the code it governs), stays
    whole."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return [(1, code, names_defined(code))]
    imports = (ast.Import, ast.ImportFrom)
    if not any(isinstance(n, imports) for n in tree.body) or any(
            isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body):
        return [(1, code, frozenset(_bound_names(tree.body)))]
    lines = python_lines(code)
    pieces: list = []  # [first, last, [statements], is an import]
    for start, end, nodes in statement_spans(tree):
        alone = all(isinstance(n, imports) for n in nodes)
        if pieces and not alone and not pieces[-1][3]:
            pieces[-1][1], pieces[-1][2] = end, pieces[-1][2] + nodes
        else:
            pieces.append([start, end, nodes, alone])
    return [(start, "".join(lines[start - 1:end]), frozenset(_bound_names(nodes)))
            for start, end, nodes, _ in pieces]


#: The packages whose import marks a statement as the self-check's set-up (not the answer).
SELF_CHECK_PACKAGES = ("tests", "grading", "autograde")
#: An assignment's notebook imports its self-check from its grader's package too.
ASSIGNMENT_SELF_CHECK_PACKAGES = SELF_CHECK_PACKAGES + ("assignments",)


def is_self_check_statement(node) -> bool:
    """Whether a top-level statement of an assignment's submission only sets up or runs the
    self-check: an import of :data:`ASSIGNMENT_SELF_CHECK_PACKAGES`, a statement that calls
    ``self_check(...)``, or the notebook's bootstrap (an ``if`` whose test is one of
    :data:`COURSE_PLUMBING`'s ``find_spec`` probes). Statement by statement, never a whole
    cell: a solution cell that also imports ``solutions`` or ``labs`` keeps its functions
    (those imports then fail in the ranks, which have neither, costing only themselves)."""
    if isinstance(node, ast.Import):
        return any(a.name.split(".")[0] in ASSIGNMENT_SELF_CHECK_PACKAGES for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and bool(node.module) and node.module.split(".")[0] in ASSIGNMENT_SELF_CHECK_PACKAGES
    if isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign, ast.AugAssign)):
        value = node.value
        return (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)
                and value.func.id == "self_check")
    if isinstance(node, ast.If):
        try:
            test = ast.unparse(node.test)
        except (ValueError, RecursionError):
            return False
        return "find_spec" in test and COURSE_PLUMBING.search(test) is not None
    return False


def strip_self_check(code: str) -> tuple[str, bool]:
    """``code`` (a cell) with the statements that set up or run an assignment's self-check
    (:func:`is_self_check_statement`) blanked, line for line, so that the line numbers of
    the rest hold; and whether any was. Code that does not parse stays as it is (it fails
    in the ranks, costing only itself)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return code, False
    lines = code.split("\n")
    dropped = False
    for start, end, nodes in statement_spans(tree):
        if all(is_self_check_statement(n) for n in nodes):
            lines[start - 1:end] = [""] * (end - start + 1)
            dropped = True
    return "\n".join(lines), dropped


def _imports_tests(node) -> bool:
    def ours(name) -> bool:
        return bool(name) and name.split(".")[0] in SELF_CHECK_PACKAGES

    if isinstance(node, ast.Import):
        return any(ours(a.name) for a in node.names)
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and ours(node.module)
    return False


#: What a student's answer may import in the sandbox: numpy and the standard library.
_SANDBOX_IMPORTS = frozenset(sys.stdlib_module_names) | {"numpy"}


def _an_answer(node) -> bool:
    """Whether a statement of a cell that also sets up the self-check is the student's answer
    rather than the set-up: a function or class, an import of numpy or the standard library,
    or a name given a literal value (``E, A = 1.69, 406.0``)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        tops = _imported_packages(node)
        return bool(tops) and tops <= _SANDBOX_IMPORTS
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        try:
            ast.literal_eval(node.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True
    return False


def answers_only(code: str) -> str | None:
    """A cell that sets up the self-check (:data:`COURSE_PLUMBING`) with only the student's
    answer left (:func:`_an_answer`; the rest blanked line for line, so that line numbers
    hold), or None where the cell does not parse or holds no answer (no function, class or
    numpy import: the hand-out's own set-up cells go whole): a student who wrote a function
    in the same cell as the self-check's import keeps the function."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    lines = code.split("\n")
    answer = False  # a function, a class or numpy: what only a student's answer brings here
    for start, end, nodes in statement_spans(tree):
        if all(_an_answer(n) for n in nodes):
            answer = answer or any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                                   or _imports_numpy(n) for n in nodes)
        else:
            lines[start - 1:end] = [""] * (end - start + 1)
    return "\n".join(lines) if answer else None


def _imported_packages(node) -> set:
    """The top-level packages an import statement names (none for a relative import)."""
    if isinstance(node, ast.Import):
        return {a.name.split(".")[0] for a in node.names}
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return {node.module.split(".")[0]}
    return set()


def _imports_numpy(node) -> bool:
    return "numpy" in _imported_packages(node)


def bounded(units: list) -> list:
    """At most :data:`MAX_UNITS` units: consecutive ones merged into equal groups. Lines of
    a ``.py`` keep their numbers; merged cells are labelled "cells 5-9"."""
    if len(units) <= MAX_UNITS:
        return units
    size = -(-len(units) // MAX_UNITS)
    merged = []
    for first in range(0, len(units), size):
        group = units[first:first + size]
        if all(u.filename == group[0].filename for u in group):  # statements of one file
            pieces, line = [], group[0].line  # the line the next piece starts on
            for unit in group:
                pieces.append("\n" * (unit.line - line))  # blank lines between statements
                pieces.append(unit.source if unit.source.endswith("\n") else unit.source + "\n")
                line = unit.line + unit.source.count("\n") + (not unit.source.endswith("\n"))
            source = "".join(pieces)
            label, filename, first = group[0].label, group[0].filename, group[0].line
        else:
            source = "\n".join(u.source for u in group)
            label = filename = f"cells {group[0].label.split()[-1]}-{group[-1].label.split()[-1]}"
            first = 1
        merged.append(Unit(len(merged), label, filename, source,
                           frozenset().union(*(u.defines for u in group)), line=first))
    return merged


# ----------------------------------------------------------------------------- notebooks

def clean_cell(source: str) -> tuple[str | None, bool]:
    """(Python source, whether IPython-only lines were removed); None drops the cell. A line
    is IPython's (``%magic``, ``!shell``) only where it starts a logical line, as IPython
    reads it: not inside brackets, a string or after a backslash, so that ``!= 0)``
    continuing a condition stays Python (:func:`logical_line_starts`)."""
    lines = source.split("\n")
    first = lines[0].strip() if lines else ""
    changed = False
    if first.startswith("%%"):
        magic = first[2:].split()[0] if first[2:].split() else ""
        if magic not in PYTHON_CELL_MAGICS:
            return None, True
        lines[0], changed = "", True
    for i in logical_line_starts(lines, escapes=("%", "!")):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(("%", "!")):
            indent = line[: len(line) - len(stripped)]
            lines[i] = indent + "pass" if indent else ""
            changed = True
    return "\n".join(lines), changed


def logical_line_starts(lines: list, escapes: tuple = ()) -> list:
    """Indices of the ``lines`` that begin a logical line of Python: outside brackets,
    strings and backslash continuations. One pass over the text, character by character. A
    line that begins a logical line with one of ``escapes`` (IPython's) is not scanned:
    IPython replaces it whole."""
    starts, depth, quote, continued = [], 0, "", False
    for i, line in enumerate(lines):
        if depth == 0 and not quote and not continued:
            starts.append(i)
            if escapes and line.lstrip().startswith(escapes):
                continue
        continued, j, n = False, 0, len(line)
        while j < n:
            c = line[j]
            if quote:
                if c == "\\":
                    j += 2  # an escaped character, or a newline when the backslash ends the line
                    continue
                if line.startswith(quote, j):
                    j, quote = j + len(quote), ""
                    continue
            elif c == "#":
                break
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(0, depth - 1)
            elif c in "'\"":
                quote = line[j:j + 3] if line[j:j + 3] in ("'''", '"""') else c
                j += len(quote)
                continue
            elif c == "\\" and j == n - 1:
                continued = True
            j += 1
        if len(quote) == 1 and j <= n:  # a one-quote string ends with its line, unless escaped there
            quote = ""
    return starts


def units_from_cells(cells, label_prefix: str = "cell", assignment: bool = False) -> tuple[list, list, set]:
    """Units of a notebook's code cells. The exercises drop the statements of a cell that
    sets up the self-check (:data:`COURSE_PLUMBING`) except the student's answer written in it
    (:func:`answers_only`); an assignment (``assignment``) drops only its self-check
    statements (:func:`strip_self_check`)."""
    units, notes, markdown_defs = [], [], set()
    dropped_checks = dropped_other = cleaned = kept_answers = 0
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            continue
        source = cell.get("source", "")
        if isinstance(source, list):
            source = "".join(s for s in source if isinstance(s, str))
        if not isinstance(source, str):
            continue
        if cell.get("cell_type") != "code":
            markdown_defs |= set(DEF_LINE.findall(source))
            continue
        plumbing = not assignment and COURSE_PLUMBING.search(source) is not None
        code, changed = clean_cell(source)
        if code is None:
            dropped_other += 1
            continue
        if plumbing:  # the self-check's set-up goes; an answer written in the same cell stays
            dropped_checks += 1
            code = answers_only(code)
            if code is None:
                continue
            kept_answers += bool(DEF_LINE.search(code))
        if assignment:
            code, stripped = strip_self_check(code)
            dropped_checks += stripped
        cleaned += changed
        if not code.strip():
            continue
        label = f"{label_prefix} {number}"
        for line, piece, defines in split_imports(code):
            units.append(Unit(len(units), label, label, piece, defines, line=line))
    if dropped_checks:
        notes.append(f"{_cells(dropped_checks)} that set up the self-check {_were(dropped_checks)} skipped "
                     "(the grader runs its own checks)"
                     + (f"; the functions defined in {_cells(kept_answers)} of them were kept"
                        if kept_answers else ""))
    if dropped_other:
        notes.append(f"{_cells(dropped_other)} in another language (%%bash, ...) {_were(dropped_other)} skipped")
    if cleaned:
        notes.append(f"IPython-only lines (%magic, !shell) were skipped in {_cells(cleaned)}")
    return units, notes, markdown_defs


def _notebook_cells(text: str, kind: str):
    """(cells, problem)."""
    if kind == "md":
        if len(text) > MAX_MARKDOWN_BYTES:
            return None, (f"the MyST notebook is {len(text) / 1e6:.1f} MB, larger than the "
                          f"{MAX_MARKDOWN_BYTES / 1e6:.0f} MB the grader reads: submit the .ipynb")
        if yaml_aliases(text):
            return None, ("it uses YAML anchors and aliases (&name ... *name), which the grader "
                          "does not expand: submit the .ipynb")
        too_large = code_too_large(text)
        if too_large:
            return None, too_large
        try:
            import jupytext  # only needed for the paired MyST form
            notebook = jupytext.reads(text, fmt="md:myst")
        except Exception as exc:  # a malformed file is the student's problem, not a crash
            return None, f"it could not be read as a MyST notebook ({type(exc).__name__})"
        return [dict(c) for c in notebook.cells], None
    containers = text.count("{") + text.count("[")
    if containers > MAX_JSON_CONTAINERS:
        return None, (f"the notebook's JSON holds {containers:,} brackets, more than the "
                      f"{MAX_JSON_CONTAINERS:,} the grader reads")
    try:
        notebook = json.loads(text)
    except (ValueError, RecursionError):
        return None, "it is not a valid notebook (the .ipynb file is not JSON)"
    if not isinstance(notebook, dict) or not isinstance(notebook.get("cells"), list):
        return None, "it is not a valid notebook (no list of cells)"
    return notebook["cells"], None


def read_submission(path, assignment: bool = False) -> Submission:
    """The units of one file, or the reason why none can run. Never raises for anything in
    the file: a parser's surprise becomes that file's problem, not the end of a class run.
    ``assignment``: the file answers an assignment, whose self-check is left out statement
    by statement (see :func:`units_from_cells`)."""
    path = Path(path)
    try:
        return _read_submission(path, assignment)
    except Exception as exc:
        return Submission(path=path, kind=path.suffix.lower().lstrip("."),
                          problem=f"the grader could not read it ({type(exc).__name__})")


def _read_submission(path: Path, assignment: bool = False) -> Submission:
    kind = path.suffix.lower().lstrip(".")
    submission = Submission(path=path, kind=kind)
    name = file_name(path.name)
    if path.suffix.lower() not in SUFFIXES:
        submission.problem = f"{name} is not a notebook (.ipynb, .md) or a .py file"
        return submission
    text, problem = _read_text(path, MAX_NOTEBOOK_BYTES if kind == "ipynb" else MAX_BYTES)
    if problem:
        submission.problem = problem
        return submission
    if kind == "py":
        submission.problem = code_too_large(text)
        if submission.problem:
            return submission
        units, submission.problem = units_from_python(text, name, assignment)
        submission.units = bounded(units)
        return submission
    cells, problem = _notebook_cells(text, kind)
    if problem:
        submission.problem = problem
        return submission
    code = "\n".join(c["source"] if isinstance(c.get("source"), str) else
                     "".join(x for x in c.get("source", ()) if isinstance(x, str))
                     for c in cells if isinstance(c, dict) and c.get("cell_type") == "code")
    if len(code) > MAX_BYTES:
        submission.problem = (f"its code cells hold {len(code) / 1e6:.0f} MB of code, more than "
                              f"the {MAX_BYTES // 10**6} MB allowed")
        return submission
    submission.problem = code_too_large(code)
    if submission.problem:
        return submission
    units, submission.notes, submission.markdown_defs = units_from_cells(cells, assignment=assignment)
    submission.units = bounded(units)
    if not submission.units:
        submission.problem = "it has no code cells to run"
    return submission
