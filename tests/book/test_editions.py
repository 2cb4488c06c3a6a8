"""The two editions of the book, built from one source.

* The public (student) edition, which ``make book`` builds and the site publishes, must hold no
  line of a worked solution: neither of the exercises notebook's solution blocks (the lines
  between ``### BEGIN SOLUTION`` and ``### END SOLUTION``) nor of the reference
  implementations in ``solutions/``, and no marker.
* The instructor edition (``make book-instructor``) must hold every line of the notebook's
  solution blocks, labelled "Solution".
* No page of either edition speaks of "the brief" or of a chapter, section or lab that the
  book does not have.

The editions of the exercises page are built here, in a temporary two-page book that shares
the real execution cache (so nothing is re-executed after ``make book``); the whole public
site in ``_build/html`` is checked as well when it has been built (under CI it must be).
"""
from __future__ import annotations

import ast
import html
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jupytext
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "_build" / "html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"
EXERCISES = ROOT / "chapters" / "09-exercises.md"
sys.path.insert(0, str(ROOT))
from instructor.student_notebook import BEGIN, END  # noqa: E402
from tools.browser import toc_pages  # noqa: E402

MIN_LINE = 16  # shorter lines ("return full", "D = r * N") could occur in any code


def _significant(line: str) -> str | None:
    code = line.split("#", 1)[0].strip() if not line.strip().startswith(("'", '"')) else ""
    code = re.sub(r"\s+", " ", code)
    if code.endswith(("(", "[", "{", ",")):  # the first line of a longer statement
        return None
    return code if len(code) >= MIN_LINE else None


def notebook_solution_lines() -> set[str]:
    """Every significant line inside a solution region of the exercises notebook."""
    lines, inside = set(), False
    for cell in jupytext.read(EXERCISES).cells:
        if cell.cell_type != "code":
            continue
        for line in cell.source.splitlines():
            if line.strip() == BEGIN:
                inside = True
            elif line.strip() == END:
                inside = False
            elif inside and _significant(line):
                lines.add(_significant(line))
    return lines


def reference_lines() -> set[str]:
    """Significant body lines of the four exercise functions in ``solutions/`` and of the
    module-level functions they delegate to (docstrings and comments left out)."""
    import solutions

    lines = set()
    for name in ("chinchilla_loss", "compute_optimal", "memory_per_gpu", "communication_time_per_step"):
        func = getattr(solutions, name)
        module = sys.modules[func.__module__]
        todo = [func]
        for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(func)))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                callee = getattr(module, node.func.id, None)
                if inspect.isfunction(callee) and callee.__module__ == module.__name__:
                    todo.append(callee)
        for f in todo:
            source = textwrap.dedent(inspect.getsource(f))
            body = ast.parse(source).body[0].body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            text = source.splitlines()[body[0].lineno - 1:] if body else []
            lines |= {s for s in map(_significant, text) if s}
    return lines


def page_text(path: Path) -> str:
    """A built page as text: tags dropped (code is split into highlighted spans), entities
    decoded, runs of white space made one space per line."""
    raw = path.read_text(encoding="utf-8")
    raw = re.sub(r"<(script|style)\b.*?</\1>", "", raw, flags=re.DOTALL)
    text = html.unescape(re.sub(r"<[^>]+>", "", raw))
    return "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines())


def article_text(path: Path) -> str:
    """The page's own content (the article), without the navigation around it."""
    raw = path.read_text(encoding="utf-8")
    match = re.search(r"<article\b.*?</article>", raw, flags=re.DOTALL)
    tmp = raw if match is None else match.group(0)
    tmp = re.sub(r"<(script|style)\b.*?</\1>", "", tmp, flags=re.DOTALL)
    return html.unescape(re.sub(r"<[^>]+>", " ", tmp))


def _build_exercises(tmp: Path, edition: str) -> Path:
    """Build the exercises page alone, in the given edition; return its HTML file."""
    book = tmp / edition
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["cache"] = str(ROOT / "_build" / ".jupyter_cache")
    (book / "book").mkdir(parents=True)
    (book / "_config.yml").write_text(yaml.safe_dump(config))
    for folder in ("_ext", "_static"):
        shutil.copytree(ROOT / "book" / folder, book / "book" / folder)
    shutil.copy(ROOT / "book" / "references.bib", book / "book" / "references.bib")
    (book / "book" / "index.md").write_text("# Exercises only\n")
    (book / "book" / "_toc.yml").write_text(
        "format: jb-book\nroot: book/index\nchapters:\n  - file: chapters/09-exercises\n")
    (book / "chapters").mkdir()
    shutil.copy(EXERCISES, book / "chapters" / EXERCISES.name)
    env = dict(os.environ, COURSE_EDITION=edition, PYTHONPATH=str(ROOT))
    # Without --warningiserror: links to the chapters left out of this small book are expected.
    result = subprocess.run(
        [str(JUPYTER_BOOK), "build", str(book), "--toc", str(book / "book" / "_toc.yml"),
         "--config", str(book / "_config.yml")],
        capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    page = book / "_build" / "html" / "chapters" / "09-exercises.html"
    assert result.returncode == 0 and page.exists(), result.stdout[-3000:] + result.stderr[-3000:]
    return page


@pytest.fixture(scope="module")
def editions(tmp_path_factory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("editions")
    return {edition: page_text(_build_exercises(tmp, edition)) for edition in ("public", "instructor")}


def test_the_solution_lines_are_found():
    """The sets compared below are not empty (a test that compares nothing cannot fail)."""
    assert len(notebook_solution_lines()) >= 10
    assert len(reference_lines()) >= 10


def test_public_edition_holds_no_solution(editions, tmp_path_factory):
    public = editions["public"]
    site = next(tmp_path_factory.getbasetemp().glob("editions*/public/_build/html"))
    assert not leaks(site), f"the public edition's files hold solution lines: {leaks(site)}"
    assert BEGIN not in public and END not in public
    leaked = sorted(line for line in notebook_solution_lines() | reference_lines() if line in public)
    assert not leaked, f"the public exercises page shows solution lines: {leaked}"
    assert "NotImplementedError" in public, "the public edition should show the students' stubs"


def test_instructor_edition_holds_every_solution(editions):
    instructor = editions["instructor"]
    missing = sorted(line for line in notebook_solution_lines() if line not in instructor)
    assert not missing, f"the instructor edition lacks solution lines: {missing}"
    assert "Solution" in instructor


def _public_site_pages() -> list[Path]:
    if not (SITE / "index.html").exists():
        if IN_CI:
            pytest.fail(f"no built site at {SITE.relative_to(ROOT)} (required under CI)")
        pytest.skip(f"no built site at {SITE.relative_to(ROOT)}: run `make book` first")
    return [SITE / page for page in toc_pages()]


def site_files(site: Path) -> list[Path]:
    """Every file a reader can fetch that could hold text from the notebooks: pages, the
    downloadable sources, the search index (the theme's own assets are left out)."""
    return [f for f in site.rglob("*") if f.is_file() and "_static" not in f.relative_to(site).parts
            and f.suffix in {".html", ".md", ".ipynb", ".txt", ".js", ".json", ".py"}]


def leaks(site: Path) -> dict[str, list[str]]:
    forbidden = notebook_solution_lines() | reference_lines()
    found = {}
    for path in site_files(site):
        text = page_text(path) if path.suffix == ".html" else path.read_text(encoding="utf-8", errors="replace")
        text = "\n".join(re.sub(r"[ \t]+", " ", line).strip() for line in text.splitlines())
        bad = sorted(line for line in forbidden if line in text) + ([BEGIN] if BEGIN in text else [])
        if bad:
            found[str(path.relative_to(site))] = bad
    return found


def test_published_site_holds_no_solution():
    _public_site_pages()  # skips (or fails under CI) when the site is not built
    found = leaks(SITE)
    assert not found, f"the public site holds solution lines: {found}"


def _numbered_documents() -> list[str]:
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    return [c["file"] for part in toc.get("parts", []) if part.get("numbered")
            for c in part["chapters"]]


def stray_references(text: str) -> list[str]:
    """Words a standalone book must not contain: "brief", "Chapter N" (the book has sections,
    not numbered chapters), "Section N" or "Lab N" beyond what the table of contents holds."""
    found = [m.group(0) for m in re.finditer(r"\bbriefs?\b", text, flags=re.IGNORECASE)]
    found += [m.group(0) for m in re.finditer(r"\bChapters?\s+\d+", text)]
    sections = len(_numbered_documents())
    found += [m.group(0) for m in re.finditer(r"\bSections?\s+(\d+)\b", text) if int(m.group(1)) > sections]
    labs = {int(m.group(1)) for p in toc_pages() if (m := re.match(r"labs/(\d+)-", p))}
    found += [m.group(0) for m in re.finditer(r"\bLab\s+(\d+)\b", text) if int(m.group(1)) not in labs]
    return found


def test_stray_references_are_detected():
    assert stray_references("as the brief says; see Chapter 8 and Section 99 and Lab 42") == [
        "brief", "Chapter 8", "Section 99", "Lab 42"]
    assert stray_references("a brief-ly worded Section 2, Lab 1") == ["brief"]  # word match
    assert stray_references("Section 2 and Lab 1 in briefing") == []


def test_no_page_speaks_of_a_brief_or_a_missing_chapter(editions):
    problems = {}
    for page in _public_site_pages():
        found = stray_references(article_text(page))
        if found:
            problems[str(page.relative_to(SITE))] = found
    for edition, text in editions.items():
        found = stray_references(text)
        if found:
            problems[f"exercises ({edition} edition)"] = found
    assert not problems, f"pages that refer to a brief or to a missing chapter: {problems}"
