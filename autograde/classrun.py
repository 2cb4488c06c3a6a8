"""Grading a class: who submitted what, which file of theirs is graded, and one row each.

A class folder comes in one of the layouts an LMS produces, recognised file by file:

* **Canvas** "Download submissions": flat files ``name[_LATE]_userid_submissionid_file``
  (``abecarlos_LATE_100517_5899695_09-exercises-1.ipynb``; a ``-N`` before the suffix is
  Canvas's Nth resubmission). The student id is the Canvas user id, the ``ID`` column of
  Canvas's gradebook export.
* **Moodle** "Download all submissions": one folder per student,
  ``Full Name_participantid_assignsubmission_file_``, or, with the grading page's "Download
  submissions in folders" unticked, flat files ``Full Name_participantid_assignsubmission_file_name``
  (Moodle writes spaces for underscores in the name). The student id is the participant
  id, the ``Identifier`` ("Participant 2002041") of Moodle's grading worksheet.
* **One folder per student** (``class/alice/...``): the folder's name; any other file at
  the top: its name without suffix (``class/bob.py`` -> ``bob``).

Every student gets exactly one row (:func:`status`). One rule, :func:`pick`, chooses the
file graded, for the command line, the roster and Gradescope alike. Folders are walked
without recursion and only :data:`MAX_DEPTH` deep; a student's files are looked at, at most
:data:`MAX_CANDIDATES` of them (the newest), and one of them is graded.
"""
from __future__ import annotations

import ast
import csv
import hashlib
import inspect
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from pathlib import Path

from grading import EXERCISES
from sandbox import textsafe
from sandbox.results import Check, Part, Result, SubmissionReport
from sandbox.submission import SUFFIXES, read_submission

from .grade import grade_submission

#: Files that configure Python or pytest rather than answer exercises. They are never graded
#: and never run: the sandbox copies only the submission file itself.
NOT_SUBMISSIONS = {"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py"}
#: The exercises' file, by its stem (after an LMS's prefix and resubmission number).
EXERCISES_STEM = "09-exercises"
#: The functions a submission defines, one per exercise (the registry, grading.EXERCISES).
FUNCTIONS = tuple(e.function for e in EXERCISES)
MAX_DEPTH = 12  # folders deeper than this are not looked into (a class has two or three levels)
MAX_ENTRIES = 100_000  # directory entries looked at in a class folder, and under each student's folder
MAX_CANDIDATES = 12  # a student's gradable files parsed to pick one; the rest are listed

CANVAS_FILE = re.compile(r"^(?P<slug>[^_]+?)(?P<late>_LATE)?_(?P<uid>\d+)_(?P<sub>\d+)_(?P<file>.+)$")
MOODLE_FOLDER = re.compile(r"^(?P<name>.+)_(?P<pid>\d+)_assignsubmission_[a-z]+_?$")
MOODLE_FILE = re.compile(r"^(?P<name>[^_]+)_(?P<pid>\d+)_assignsubmission_[a-z]+_(?P<file>.+)$")
RESUBMISSION = re.compile(r"^(?P<stem>.*?)-(?P<n>\d{1,3})$")


@dataclass(frozen=True)
class FlatName:
    """A file name an LMS wrote at the top of its download: the student's id and name, and
    the name the student gave the file; ``canvas`` tells Canvas's (which numbers
    resubmissions) from Moodle's."""
    sid: str
    name: str
    file: str
    canvas: bool


def flat_name(name: str) -> FlatName | None:
    """``name`` read as Canvas's or Moodle's flat download names a file, or None."""
    canvas = CANVAS_FILE.match(name)
    if canvas:
        return FlatName(canvas.group("uid"), canvas.group("slug"), canvas.group("file"), True)
    moodle = MOODLE_FILE.match(name)
    return FlatName(moodle.group("pid"), moodle.group("name"), moodle.group("file"), False) if moodle else None


def display(name: str) -> str:
    """A file or folder name as text that can be written anywhere: bytes that are not UTF-8
    (a Latin-1 name from an old zip) shown as ``\\xe9``, control characters escaped
    (:func:`sandbox.textsafe.file_name`), never a lone surrogate that a UTF-8 file refuses."""
    return textsafe.file_name(name)


# ----------------------------------------------------------------------------- finding files

def is_notebook_markdown(path: Path) -> bool:
    """A ``.md`` file is a submission only if it is a Jupytext notebook (front matter); only
    its first 4,000 bytes are read."""
    try:
        with open(path, "rb") as f:
            head = f.read(4000).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.startswith("---") and "jupytext" in head.split("---", 2)[1]


def walk(folder: Path, max_depth: int = MAX_DEPTH, cut: list | None = None):
    """Every regular file under ``folder`` (not following links; hidden entries,
    ``__pycache__`` and ``.ipynb_checkpoints`` skipped), in name order, with a stack instead
    of recursion, at most ``max_depth`` folders deep. At most :data:`MAX_ENTRIES` entries are
    looked at in ``folder`` itself and as many under each folder in it (each student's, in a
    class folder): one student's virtual environment costs that student, not the classmates
    after them. A folder's files come before its subfolders'. ``cut``, a list if given,
    receives the folders whose budget ran out (``folder`` itself where its own did)."""
    root = Path(folder)
    stack = [(root, 0, root)]  # (folder, depth, whose budget: root, or the folder in it)
    seen: dict = {}
    stopped: set = set()
    found = []
    while stack:
        here, depth, budget = stack.pop()
        if budget in stopped:
            continue
        try:
            with os.scandir(here) as entries:
                items = sorted(entries, key=lambda e: e.name)
        except OSError:
            continue  # unreadable, or a name too long: nothing a student can be graded on
        folders = []
        for entry in items:
            seen[budget] = seen.get(budget, 0) + 1
            if seen[budget] > MAX_ENTRIES:
                stopped.add(budget)
                if cut is not None:
                    cut.append(budget)
                break
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if depth + 1 < max_depth:
                    folders.append(Path(entry.path))
            elif stat.S_ISREG(mode):  # a symbolic link could point at the solutions
                found.append(Path(entry.path))
        stack += [(f, depth + 1, f if budget == root else budget) for f in reversed(folders)]
    return sorted(found)


def gradable(path: Path) -> bool:
    """A file the grader can grade: a notebook, a Jupytext ``.md`` or a ``.py`` that is not
    Python's or pytest's configuration (:data:`NOT_SUBMISSIONS`)."""
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES or path.name in NOT_SUBMISSIONS:
        return False
    return suffix != ".md" or is_notebook_markdown(path)


def find_submissions(folder: Path) -> list:
    """Every gradable file in a class folder (:func:`walk`, :func:`gradable`); of a paired
    ``x.ipynb`` / ``x.md``, only the notebook."""
    files = walk(folder)
    names = set(files)
    return [p for p in files if gradable(p)
            and not (p.suffix.lower() == ".md" and p.with_suffix(".ipynb") in names)]


# ----------------------------------------------------------------------------- students

@dataclass
class Student:
    """One student of a class and everything they sent."""

    student_id: str
    name: str = ""
    files: list = field(default_factory=list)  # [(path, shown as)] of every file they sent
    lms: dict = field(default_factory=dict)  # columns of the LMS's roster (for its grades file)
    on_roster: bool = False
    #: set by :func:`pick`:
    chosen: Path | None = None
    shown: str = ""  # the chosen file as reports show it (never an absolute path)
    reason: str = ""
    others: list = field(default_factory=list)  # the other files, as shown
    #: their folder holds more than :data:`MAX_ENTRIES` entries: the rest were not looked at
    cut_short: bool = False

    @property
    def sent_anything(self) -> bool:
        return bool(self.files)


def student_id_for(path: Path, folder: Path | None) -> str:
    """Who submitted ``path`` (see this module's docstring for the layouts)."""
    path = Path(path)
    if folder is not None:
        parts = path.relative_to(folder).parts
        if len(parts) > 1:
            moodle = MOODLE_FOLDER.match(display(parts[0]))
            return moodle.group("pid") if moodle else display(parts[0])
    flat = flat_name(display(path.name))
    return flat.sid if flat else display(path.stem)


def students_in(folder: Path) -> dict:
    """``{student id: Student}`` of a class folder, in any of the layouts above."""
    folder = Path(folder)
    students: dict = {}
    try:  # a student's empty folder: they are in the class, and sent nothing
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir(follow_symlinks=False) and not entry.name.startswith(".") \
                        and entry.name != "__pycache__":
                    sid = student_id_for(Path(entry.path) / "-", folder)
                    moodle = MOODLE_FOLDER.match(display(entry.name))
                    students[sid] = Student(sid, moodle.group("name") if moodle else "")
    except OSError:
        pass
    cut: list = []
    files = walk(folder, cut=cut)
    if folder in cut:
        raise ValueError(f"{display(str(folder))} has more than {MAX_ENTRIES:,} entries at its top: "
                         "split the class into smaller folders")
    for top in cut:  # a student's folder: what was found is graded, and their status says the rest was not looked at
        sid = student_id_for(top / "-", folder)
        students.setdefault(sid, Student(sid)).cut_short = True
    for path in files:
        parts = path.relative_to(folder).parts
        sid = student_id_for(path, folder)
        student = students.setdefault(sid, Student(sid))
        if len(parts) > 1:
            moodle = MOODLE_FOLDER.match(display(parts[0]))
            if moodle and not student.name:
                student.name = moodle.group("name")
            shown = "/".join(display(p) for p in parts)
        else:
            flat = flat_name(display(path.name))
            shown = flat.file if flat else display(path.name)
            if flat and not student.name:
                student.name = flat.name
        student.files.append((path, shown))
    return students


def submitted_name(path: Path) -> str:
    """The name the student gave the file: without Canvas's prefix and resubmission number."""
    flat = flat_name(display(Path(path).name))
    name = flat.file if flat else display(Path(path).name)
    stem, dot, suffix = name.rpartition(".")
    again = RESUBMISSION.match(stem) if dot else None
    return (again.group("stem") + "." + suffix) if again and flat and flat.canvas else name


def _resubmission(path: Path) -> int:
    name = display(Path(path).name)
    canvas = CANVAS_FILE.match(name)
    if not canvas:
        return 0
    again = RESUBMISSION.match(canvas.group("file").rpartition(".")[0])
    return int(again.group("n")) if again else 0


# ----------------------------------------------------------------------------- picking

@dataclass(frozen=True)
class Wanted:
    """What the graded file must define, to pick it among a student's files: ``names``
    (functions or classes), the ``stem`` of the hand-out's notebook (a tie goes to it) and
    ``words`` (how the pick's reason names them)."""

    names: tuple
    stem: str
    words: str


#: The exercises: the functions of the registry, in the exercises notebook.
EXERCISES_WANTED = Wanted(FUNCTIONS, EXERCISES_STEM, "the exercises' functions")


def wanted_for(assignment: str | None) -> Wanted:
    """What the graded file of ``assignment`` defines (the exercises' when None): its grader's
    function or class names, its notebook's stem."""
    if not assignment:
        return EXERCISES_WANTED
    from assignments import ASSIGNMENTS
    from assignments.common import grader

    module = grader(assignment)
    names = tuple(getattr(module, "FUNCTIONS", None) or
                  [n for n in (getattr(module, "FUNCTION", None), getattr(module, "CLASS", None)) if n])
    return Wanted(names, Path(ASSIGNMENTS[assignment][1]).stem, "`" + "`, `".join(names) + "`")


def implemented(path: Path, names=FUNCTIONS) -> int:
    """How many of ``names`` (functions or classes) the file defines with a body that is not
    a stub (``raise NotImplementedError``, ``pass``, ``...``; a class is a stub when every
    method is); read as text, nothing runs; -1 if the file cannot be read at all."""
    try:
        submission = read_submission(path)
    except Exception:
        return -1
    if submission.problem:
        return -1
    done = set()
    for unit in submission.units:
        wanted = set(names) & set(unit.defines)
        if not wanted:
            continue
        try:
            tree = ast.parse(unit.source)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name in wanted:
                (done.add if not _is_stub(node) else done.discard)(node.name)
    return len(done)


def _is_stub(node) -> bool:
    if isinstance(node, ast.ClassDef):
        methods = [n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        return all(_is_stub(m) for m in methods)
    body = list(node.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
        body = body[1:]  # the docstring
    for statement in body:
        if isinstance(statement, ast.Pass):
            continue
        if isinstance(statement, ast.Expr) and getattr(statement.value, "value", None) is Ellipsis:
            continue
        if isinstance(statement, ast.Raise) and "NotImplementedError" in ast.dump(statement):
            continue
        return False
    return True


def guess_assignment(path: Path) -> str | None:
    """The assignment whose work ``path`` holds when it holds none of the exercises' (its
    notebook's name, or a non-stub definition of its function or class); None otherwise.
    What ``python -m autograde`` without ``--assignment`` uses to say that one is missing."""
    from assignments import ASSIGNMENTS

    if implemented(path) > 0:
        return None
    stem = submitted_name(path).rpartition(".")[0].lower()
    for assignment in sorted(ASSIGNMENTS):
        wanted = wanted_for(assignment)
        if stem.startswith(wanted.stem.lower()) or implemented(path, wanted.names) > 0:
            return assignment
    return None


def unreadable_kind(name: str) -> str:
    """What an ungradable file is, for its row: ``.pdf``, ``.ipynb.txt``, ``.md that is not
    a Jupytext notebook``."""
    suffixes = [s.lower() for s in Path(name).suffixes]
    if not suffixes:
        return "a file without a suffix"
    if len(suffixes) > 1 and suffixes[-2] in SUFFIXES:
        return "a " + "".join(suffixes[-2:])
    if suffixes[-1] == ".md":
        return "a .md that is not a Jupytext notebook"
    if Path(name).name in NOT_SUBMISSIONS:
        return f"only {Path(name).name}"
    return "a " + suffixes[-1]


def pick(student: Student, wanted: Wanted = EXERCISES_WANTED) -> Student:
    """Choose the file to grade, the same way everywhere: of the gradable files (the
    :data:`MAX_CANDIDATES` newest, and those named as the hand-out), the one that
    defines the most of what is ``wanted`` (the exercises' functions, or an assignment's; not
    as stubs); ties go to the hand-out's notebook by name (``09-exercises``,
    ``a1-ring-allreduce``), then to the latest resubmission, then to the newest file.
    A notebook and its paired ``.md`` count once (the notebook)."""
    names = {p for p, _ in student.files}
    candidates = [(p, s) for p, s in student.files if gradable(p)
                  and not (p.suffix.lower() == ".md" and p.with_suffix(".ipynb") in names)]
    student.chosen, student.shown, student.reason, student.others = None, "", "", []
    if not candidates:
        return student

    def mtime(p):
        try:
            return p.stat().st_mtime_ns
        except OSError:
            return 0

    newest_first = sorted(candidates, key=lambda c: (-mtime(c[0]), c[1]))
    # the newest, and the hand-out's own file however old (twelve scratch files sent after it
    # must not hide it)
    looked = newest_first[:MAX_CANDIDATES]
    looked += [c for c in newest_first[MAX_CANDIDATES:]
               if submitted_name(c[0]).rpartition(".")[0].lower() == wanted.stem.lower()][:MAX_CANDIDATES]
    if len(looked) == 1:
        student.chosen, student.shown = looked[0]
        student.others = _others(student)
        return student

    def key(c):
        p, shown = c
        stem = submitted_name(p).rpartition(".")[0].lower()
        return (max(0, implemented(p, wanted.names)), stem == wanted.stem.lower(), _resubmission(p), mtime(p),
                p.suffix.lower() == ".ipynb", shown)

    ranked = sorted(((key(c), c) for c in looked), reverse=True)
    (best, (path, shown)), (second, _) = ranked[0], ranked[1]
    kind = "notebook" if path.suffix.lower() in (".ipynb", ".md") else "script"
    if best[0] > second[0]:
        reason = f"the {kind} that defines the most of {wanted.words}"
    elif best[1] and not second[1]:
        reason = "the exercises notebook" if wanted is EXERCISES_WANTED else "the assignment's notebook"
    elif best[2] > second[2]:
        reason = "the latest resubmission"
    else:
        reason = f"the newest {kind}"
    student.chosen, student.shown, student.reason = path, shown, reason
    student.others = _others(student)
    return student


def _others(student: Student) -> list:
    """The files sent besides the one graded (Python's configuration files aside: they are
    never graded nor run)."""
    return [s for p, s in student.files if s != student.shown and p.name not in NOT_SUBMISSIONS]


def several_files(student: Student, limit: int = 5) -> str:
    """``graded final.ipynb (the newest notebook); also sent scratch.py``."""
    others = student.others[:limit]
    more = len(student.others) - len(others)
    also = ", ".join(others) + (f" and {more} more" if more else "")
    reason = f" ({student.reason})" if student.reason else ""
    return f"graded {student.shown}{reason}; also sent {also}"


def pick_from_folder(folder: Path, wanted: Wanted = EXERCISES_WANTED):
    """The file :func:`pick` grades among everything in ``folder`` (None if none)."""
    folder = Path(folder)
    student = Student("", files=[(p, "/".join(display(x) for x in p.relative_to(folder).parts))
                                 for p in walk(folder)])
    return pick(student, wanted).chosen


# ----------------------------------------------------------------------------- status

def status(report, student: Student | None = None) -> str:
    """What happened to one student, in a few words (the row's ``status``): ``graded``,
    ``missing``, ``unreadable: ...``, ``several files: ...``, ``too large``, ``timed out``,
    ``not attempted (still the stub)``, ``empty (nothing to grade)``, ``not run (syntax
    error)``, ``not run`` (nothing in the file could run) or ``grader error``."""
    if report.grader_errors:
        return "grader error"
    said = _status(report, student)
    if student is not None and student.cut_short:
        said += f" (their folder holds more than {MAX_ENTRIES:,} entries: only the first were looked at)"
    return said


def _status(report, student: Student | None) -> str:
    if student is not None and student.chosen is None:
        if not student.sent_anything:
            return "missing"
        kinds = sorted({unreadable_kind(s) for _, s in student.files})
        return (f"unreadable: submitted {', '.join(kinds)} (a .ipynb, .py or .md is graded)")
    if report.missing:
        return "missing"
    problems = " ".join(report.problems)
    if "larger than" in problems or "more than the" in problems:
        return "too large"
    failed = [r for _, r in report.results if not r.passed]
    if report.score == 0 and failed and all("took too long" in r.feedback for r in failed):
        return "timed out"
    if student is not None and student.others:
        return "several files: " + several_files(student)
    from .reports import STUB_STATUS, is_stub, nothing_ran

    if is_stub(report):  # it ran: every function still raises NotImplementedError
        return STUB_STATUS
    return nothing_ran(report) or "graded"


# ----------------------------------------------------------------------------- rosters

def _rows(path: Path):
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        text = Path(path).read_text(encoding="latin-1")
    except OSError as exc:
        raise ValueError(f"roster: cannot read {display(str(path))}: {exc.strerror}") from None
    reader = csv.DictReader(text.splitlines())
    columns = [c.strip() for c in (reader.fieldnames or []) if c]
    rows = [{(k or "").strip(): (v or "").strip() for k, v in row.items() if isinstance(v, str)}
            for row in reader]
    return columns, rows


def read_roster(path) -> list:
    """The students of a roster CSV, as :class:`Student` objects (their files not yet
    found), from any of these (told apart by their columns):

    * Canvas's gradebook export (Grades > Export): ``Student``, ``ID``, ``SIS User ID``,
      ``SIS Login ID``, ``Section``...; the id is ``ID``; its "Points Possible" row and the
      test student are skipped;
    * Moodle's grading worksheet (Assignment > Download grading worksheet):
      ``Identifier`` ("Participant 2002041"), ``Full name``, ``Email address``...; the id is
      the participant number;
    * Moodle's participants or grades export: ``First name``, ``Last name`` (or
      ``Surname``), ``Email address``, optionally ``ID number``; the id is the email address
      (matched to Moodle's submission folders by full name);
    * the course's own: ``student_id``, ``name``, ``file`` (a submission file or a student's
      folder, relative to the roster's folder).

    Raises ValueError naming what is wrong."""
    path = Path(path)
    columns, rows = _rows(path)
    kind = roster_kind(columns)
    if kind is None:
        raise ValueError(f"roster: {display(str(path))} must be Canvas's gradebook export, "
                         "Moodle's grading worksheet or participants export, or have the "
                         "columns student_id, name, file (found: "
                         f"{', '.join(sorted(c.lower() for c in columns)) or 'none'})")
    out, seen = [], set()

    def add(number, student):
        if not student.student_id:
            raise ValueError(f"roster: {display(str(path))}, line {number}: empty student id")
        if student.student_id in seen:
            raise ValueError(f"roster: {display(str(path))}, line {number}: student id "
                             f"{student.student_id!r} appears twice")
        seen.add(student.student_id)
        student.on_roster = True
        out.append(student)

    for number, row in enumerate(rows, start=2):
        if kind == "canvas":
            if row.get("Student", "").strip().lower() in ("points possible", "student, test") \
                    or not row.get("ID"):
                continue
            add(number, Student(row["ID"], row.get("Student", ""),
                                lms={k: row.get(k, "") for k in CANVAS_ID_COLUMNS}))
        elif kind == "moodle worksheet":
            match = re.search(r"(\d+)", row.get("Identifier", ""))
            add(number, Student(match.group(1) if match else "", row.get("Full name", ""),
                                lms={"Identifier": row.get("Identifier", ""),
                                     "Email address": row.get("Email address", ""),
                                     "Last modified (grade)": row.get("Last modified (grade)", "")}))
        elif kind == "moodle participants":
            last = row.get("Last name", row.get("Surname", ""))
            name = f"{row.get('First name', '')} {last}".strip()
            add(number, Student(row.get("Email address", ""), name,
                                lms={"Email address": row.get("Email address", ""),
                                     "ID number": row.get("ID number", "")}))
        else:  # the course's own
            student = Student(row.get("student_id", ""), row.get("name", ""))
            target = (path.parent / row["file"]) if row.get("file") else None
            if target is not None and target.is_dir():
                cut: list = []
                student.files = [(p, "/".join(display(x) for x in p.relative_to(target).parts))
                                 for p in walk(target, cut=cut)]
                student.cut_short = bool(cut)
            elif target is not None and target.is_file():
                student.files = [(target, display(target.name))]
            student.lms["file"] = row.get("file", "")
            add(number, student)
    return out


def roster_kind(columns) -> str | None:
    """Which roster a CSV's header says it is: "canvas" (the gradebook export), "moodle
    worksheet" (the grading worksheet), "moodle participants" (the participants or grades
    export), "course" (the course's own student_id, name, file), or None."""
    lower = {c.lower() for c in columns}
    if {"student", "id", "section"} <= lower:
        return "canvas"
    if "identifier" in lower:
        return "moodle worksheet"
    if "email address" in lower:
        return "moodle participants"
    if {"student_id", "file"} <= lower:
        return "course"
    return None


#: Canvas's identifier columns, in the order of its gradebook export.
CANVAS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")


def _number(text: str) -> float | None:
    """A number as an LMS's export writes it in the teacher's locale (``100``, ``100.00``,
    ``100,00``, ``1,000`` or ``1,000.50`` with a thousands separator); None for anything else (a
    scale, ``(read only)``, empty). A comma followed by one or two digits is a decimal comma,
    by three a thousands separator."""
    text = text.strip().replace("\u00a0", "").replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    if re.fullmatch(r"\d+,\d{1,2}", text):
        return float(text.replace(",", "."))
    if re.fullmatch(r"\d{1,3}(,\d{3})+(\.\d+)?", text):
        return float(text.replace(",", ""))
    return None


def roster_maximum(path, column: str | None = None) -> float | None:
    """What the LMS says the assignment is worth, from the roster it exported: in Canvas's
    gradebook export, the "Points Possible" row's cell under ``column`` (found by its header,
    or by the assignment id in ``Name (12345)``, which Canvas matches by); in Moodle's grading
    worksheet, ``Maximum Grade``. None where the roster does not say (another kind of roster,
    a column it lacks, a grade on a scale)."""
    columns, rows = _rows(Path(path))
    kind = roster_kind(columns)
    if kind == "canvas" and column:
        wanted = re.search(r"\((\d+)\)\s*$", column)
        header = next((c for c in columns if c == column.strip()), None) or next(
            (c for c in columns if wanted and re.search(rf"\({wanted.group(1)}\)\s*$", c)), None)
        possible = next((r for r in rows if r.get("Student", "").strip().lower() == "points possible"), None)
        return _number(possible.get(header, "")) if header and possible else None
    if kind == "moodle worksheet" and "maximum grade" in {c.lower() for c in columns}:
        return next((x for x in (_number(r.get("Maximum Grade", "")) for r in rows) if x is not None), None)
    return None


def roster_has_files(path) -> bool:
    columns, _ = _rows(Path(path))
    return roster_kind(columns) == "course"


def match_roster(roster: list, found: dict) -> tuple[list, list]:
    """(the roster's students with their files, the students found who are not on it).
    A Moodle folder matches by participant id, or by full name for a roster keyed by email."""
    by_name = {}
    for sid, student in found.items():
        if student.name:
            by_name.setdefault(student.name.casefold(), []).append(sid)
    used = set()
    for student in roster:
        sid = student.student_id
        if sid in found:
            student.files = found[sid].files
            used.add(sid)
        elif len(by_name.get(student.name.casefold(), [])) == 1:
            other = by_name[student.name.casefold()][0]
            student.files = found[other].files
            used.add(other)
    return roster, [s for sid, s in found.items() if sid not in used]


# ----------------------------------------------------------------------------- grading

def content_hash(path: Path, *parts) -> str:
    """What a resumed run compares: the graded file's bytes and the grading options."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(repr(part).encode() + b"\0")
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _takes_student() -> bool:
    """Whether grade_submission derives per-student hidden inputs (its ``student`` keyword)."""
    try:
        return "student" in inspect.signature(grade_submission).parameters
    except (TypeError, ValueError):
        return False


def grade_student(path, checks, student_id: str = "", label: str | None = None, **options):
    """grade_submission, with the student's id where it takes one."""
    if student_id and _takes_student():
        options["student"] = student_id
    return grade_submission(path, checks, label=label, **options)


def grade_many(paths, checks, *, jobs: int = 1, progress=None, labels=None, **options) -> list:
    """Grade every path (in parallel with ``jobs`` threads, each driving its own worker
    process); reports come back in the order of ``paths``."""
    labels = labels or [str(p) for p in paths]
    items = list(zip(paths, labels))
    reports: list = [None] * len(items)
    lock = threading.Lock()
    queue = list(range(len(items)))[::-1]

    def work():
        while True:
            with lock:
                if not queue:
                    return
                i = queue.pop()
            path, label = items[i]
            reports[i] = grade_submission(path, checks, label=label, **options)
            if progress:
                progress(reports[i])

    threads = [threading.Thread(target=work, daemon=True) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reports


# ----------------------------------------------------------------------------- the journal

JOURNAL_VERSION = 2  # 2: every line signed (HMAC-SHA256)


def report_record(report) -> dict:
    """Everything needed to write a report again: what :func:`report_from_record` reads."""
    return {"submission": report.submission, "problems": list(report.problems),
            "notes": list(report.notes), "isolation": report.isolation,
            "problem_causes": dict(report.problem_causes),
            "seconds": round(report.seconds, 3), "grader_errors": list(report.grader_errors),
            "results": [[c.name, bool(r.passed), r.feedback, bool(r.not_implemented),
                         r.got, r.mistake, r.condition] for c, r in report.results]}


def report_from_record(record: dict, checks, parts=EXERCISES):
    """The :class:`~sandbox.results.SubmissionReport` a journal line holds, with ``checks``
    (the same checks: the journal's header says which seed) and ``parts``; None if they differ."""
    by_name = {c.name: c for c in checks}
    results = record.get("results", [])
    if [r[0] for r in results] != [c.name for c in checks]:
        return None
    report = SubmissionReport(submission=record.get("submission", ""), parts=list(parts))
    report.results = [(by_name[r[0]], Result(*r[1:7])) for r in results]  # got, mistake, condition: 4-6
    report.problems = list(record.get("problems", []))
    report.notes = list(record.get("notes", []))
    report.problem_causes = dict(record.get("problem_causes", {}))
    report.isolation = record.get("isolation")
    report.seconds = float(record.get("seconds", 0.0))
    report.grader_errors = list(record.get("grader_errors", []))
    return report


def journal_key(path, fresh: bool) -> bytes | None:
    """The run's secret for signing its journal, in ``<journal>.key`` (mode 600, the grader's
    own): made anew for a fresh journal, read back for ``--resume``; None if it cannot be read
    (then no line of the journal is trusted)."""
    key_path = Path(str(path) + ".key")
    if fresh:
        key = os.urandom(32)
        key_path.unlink(missing_ok=True)
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(key.hex() + "\n")  # text, like every file the grader writes
        return key
    try:
        key = bytes.fromhex(key_path.read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return None
    return key if len(key) == 32 else None


def _signed(key: bytes, entry: dict) -> str:
    """One journal line: ``entry`` and its HMAC-SHA256 under the run's key (RFC 2104), so that
    ``--resume`` trusts only lines this grader wrote, whatever else writes to the file."""
    import hmac
    import json

    body = json.dumps(entry, allow_nan=False, sort_keys=True)
    return json.dumps({"entry": entry, "mac": hmac.new(key, body.encode(), hashlib.sha256).hexdigest()},
                      allow_nan=False)


def _verified(key: bytes | None, line: str):
    """The entry of a journal line whose signature holds under ``key``; None otherwise."""
    import hmac
    import json

    try:
        item = json.loads(line)
        entry, mac = item["entry"], item["mac"]
        body = json.dumps(entry, allow_nan=False, sort_keys=True)
    except (ValueError, TypeError, KeyError):
        return None
    if key is None or not isinstance(mac, str) or not isinstance(entry, dict):
        return None
    return entry if hmac.compare_digest(hmac.new(key, body.encode(), hashlib.sha256).hexdigest(), mac) else None


class Journal:
    """The run's results, one signed JSON line per finished student, appended and flushed at
    once, so that a run killed at any moment keeps every finished row (``--resume``). Each line
    carries an HMAC under a key kept in ``<journal>.key``: a line that anything else wrote (a
    forged full mark) fails it and is graded again."""

    def __init__(self, path, header: dict, keep: dict | None = None):
        self.path = Path(path)
        self.lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fresh = keep is None or not self.path.exists()
        self.key = journal_key(self.path, fresh)
        if self.key is None:  # resuming without the key: start the journal again
            fresh, self.key = True, journal_key(self.path, True)
        torn = not fresh and not self.path.read_bytes().endswith(b"\n")  # killed mid-line
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if fresh else os.O_APPEND)
        self.file = os.fdopen(os.open(self.path, flags, 0o600), "w", encoding="utf-8")
        if torn:
            self._write("")
        if fresh:
            self._write(_signed(self.key, {"journal": JOURNAL_VERSION, **header}))

    def _write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()

    def add(self, student_id: str, digest: str, report) -> None:
        line = _signed(self.key, {"student_id": student_id, "hash": digest, "report": report_record(report)})
        with self.lock:
            self._write(line)

    def close(self) -> None:
        self.file.close()


def read_journal(path) -> tuple[dict, dict]:
    """(header, {student id: (hash, record)}) of a journal: only lines signed with the run's key
    (``<journal>.key``), so a line that the grader did not write is graded again; a torn last
    line (the run was killed while writing it) is ignored. Raises ValueError if it is not a
    journal of this grader."""
    header, done = None, {}
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--resume: cannot read the journal {display(str(path))} ({exc})") from None
    key = journal_key(path, fresh=False)
    if key is None:
        raise ValueError(f"--resume: the journal's key {display(str(path) + '.key')} is missing: "
                         "grade again without --resume")
    for line in lines:
        item = _verified(key, line)
        if item is None:
            continue
        if header is None:
            if item.get("journal") != JOURNAL_VERSION:
                raise ValueError(f"--resume: {display(str(path))} is not a grading journal of this version")
            header = item
        elif "student_id" in item:
            done[item["student_id"]] = (item.get("hash"), item.get("report", {}))
    if header is None:
        raise ValueError(f"--resume: the journal {display(str(path))} has no header this grader signed")
    return header, done


# ----------------------------------------------------------------------------- assignments

def graded_names(module) -> str:
    """What an assignment's grader loads from the submission, as the report names it:
    ``ring_all_reduce``, or ``one_f_one_b`, `pipeline_step`` (shown inside backticks)."""
    names = getattr(module, "FUNCTIONS", None) or [
        n for n in (getattr(module, "FUNCTION", None), getattr(module, "CLASS", None)) if n]
    return "`, `".join(names) or module.NAME


def assignment_part(assignment: str) -> Part:
    """An assignment as the reports read a part: its id (the CSV's column), its title, what
    the student writes, its points."""
    from assignments.common import grader, max_points

    module = grader(assignment)
    return Part(assignment, module.NAME, graded_names(module), max_points(assignment))


def assignment_checks(assignment: str) -> list:
    """The one row a student with nothing gradable gets for an assignment: 0 of its points."""
    part = assignment_part(assignment)
    return [Check(part.id, part.title, part.max_points, False, part.function)]


def grade_assignment(path, assignment: str, label: str | None = None) -> SubmissionReport:
    """Grade one file as ``assignment`` (its grader's ``grade_file``) and return the class
    run's report; never raises for anything the submission does (a grader failure is this
    file's "grader error")."""
    import time

    from assignments.common import grader

    started = time.monotonic()
    module = grader(assignment)
    part = assignment_part(assignment)
    report = SubmissionReport(submission=textsafe.file_name(label or str(path)), parts=[part],
                              known_mistakes=dict(getattr(module, "MISTAKES", {})))
    try:
        problem = read_submission(Path(path)).problem  # text only: nothing runs here
    except Exception:
        problem = None
    if problem:  # as the exercises' grader says it (empty, syntax error, not text...)
        report.problems.append(f"{textsafe.file_name(Path(path).name)}: {problem}.")
    try:
        graded = module.grade_file(Path(path))
        report.results = graded.results(part)
        report.isolation = getattr(graded, "isolation", None) or "not run"
    except Exception as exc:  # the grader's fault, not the student's: this row says so
        report.grader_errors.append(f"{type(exc).__name__}: {textsafe.printable(exc)}")
        report.results = [(c, Result(False, "Not graded: the grader failed on this file. Please "
                                            "tell your instructor.")) for c in assignment_checks(assignment)]
    report.seconds = time.monotonic() - started
    return report
