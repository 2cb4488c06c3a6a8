"""Grading a class: finding each student's submission in a class folder or from a roster,
and grading them all."""
from __future__ import annotations

from pathlib import Path

from .grade import grade_submission
from .submission import SUFFIXES


def grade_many(paths, checks, *, jobs: int = 1, progress=None, labels=None, **options) -> list:
    """Grade every path (in parallel with ``jobs`` threads, each driving its own worker
    process); reports come back in the order of ``paths``."""
    labels = labels or [str(p) for p in paths]

    def one(item):
        path, label = item
        report = grade_submission(path, checks, label=label, **options)
        if progress:
            progress(report)
        return report

    if jobs <= 1:
        return [one(item) for item in zip(paths, labels)]
    from concurrent.futures import ThreadPoolExecutor  # with its logging: only for classes

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, zip(paths, labels)))


# ----------------------------------------------------------------------------- finding files

#: Files that configure Python or pytest rather than answer exercises. They are never graded
#: and never run: the sandbox copies only the submission file itself.
NOT_SUBMISSIONS = {"conftest.py", "sitecustomize.py", "usercustomize.py", "setup.py"}


def is_notebook_markdown(path: Path) -> bool:
    """A ``.md`` file is a submission only if it is a Jupytext notebook (front matter)."""
    try:
        head = path.read_text(encoding="utf-8", errors="replace")[:4000]
    except OSError:
        return False
    return head.startswith("---") and "jupytext" in head.split("---", 2)[1]


def find_submissions(folder: Path) -> list:
    """Every submission in a class folder (recursively, e.g. one sub-folder per student).

    Symbolic links, hidden folders, ``__pycache__``, ``.ipynb_checkpoints`` and Python's configuration
    files (:data:`NOT_SUBMISSIONS`, which a student may ship hoping they run) are skipped; of a paired
    ``x.ipynb`` / ``x.md``, only the notebook is graded; a ``.md`` file counts only if it is
    a Jupytext notebook.
    """
    found = []
    for path in sorted(folder.rglob("*")):
        parts = path.relative_to(folder).parts
        if any(p.startswith(".") or p in ("__pycache__",) for p in parts):
            continue
        if path.is_symlink() or not path.is_file() or path.suffix.lower() not in SUFFIXES:
            continue  # a student's symbolic link could point at the solutions
        if path.name in NOT_SUBMISSIONS:
            continue
        if path.suffix.lower() == ".md":
            if path.with_suffix(".ipynb").exists() or not is_notebook_markdown(path):
                continue
        found.append(path)
    return found


# ----------------------------------------------------------------------------- a class

def student_id_for(path: Path, folder: Path | None) -> str:
    """Who submitted ``path``: in a class folder with one sub-folder per student
    (``class/alice/09-exercises.ipynb``), the sub-folder's name; otherwise the file's name
    without its suffix (``class/alice.ipynb`` -> ``alice``)."""
    if folder is not None:
        parts = Path(path).relative_to(folder).parts
        if len(parts) > 1:
            return parts[0]
    return Path(path).stem


def read_roster(path) -> list:
    """``[(student_id, name, file_or_folder)]`` from a roster CSV with the columns
    ``student_id``, ``name`` and ``file`` (a submission file, or a student's folder; relative
    to the roster's own folder). Raises ValueError naming what is wrong."""
    import csv

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise ValueError(f"roster: cannot read {path}: {exc.strerror}") from None
    rows = list(csv.DictReader(text.splitlines()))
    columns = {c.strip().lower() for c in (csv.DictReader(text.splitlines()).fieldnames or [])}
    if not {"student_id", "file"} <= columns:
        raise ValueError(f"roster: {path} must have the columns student_id, name, file "
                         f"(found: {', '.join(sorted(columns)) or 'none'})")
    out, seen = [], set()
    for number, row in enumerate(rows, start=2):
        row = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
        sid = row.get("student_id", "")
        if not sid:
            raise ValueError(f"roster: {path}, line {number}: empty student_id")
        if sid in seen:
            raise ValueError(f"roster: {path}, line {number}: student_id {sid!r} appears twice")
        seen.add(sid)
        target = (path.parent / row["file"]) if row.get("file") else None
        out.append((sid, row.get("name", ""), target))
    return out


def pick_from_folder(folder: Path):
    """A student's folder: their exercises notebook, else their only submission."""
    found = find_submissions(folder)
    for preferred in ("09-exercises.ipynb", "09-exercises.md", "09-exercises.py"):
        for path in found:
            if path.name == preferred:
                return path
    return found[0] if found else None
