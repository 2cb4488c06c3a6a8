"""The book build is strict: warnings are errors, so a missing citation key, a broken
cross-reference or a notebook seen twice fails `make book` with a message that says why.

Each test builds a two-page copy of the book (the real _config.yml, site extension and
references.bib) in a temporary folder, breaks one thing, and reads the build's output.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
JUPYTER_BOOK = Path(sys.executable).parent / "jupyter-book"

PAGE = """# A page

Chinchilla {cite}`hoffmann2022chinchilla` and the {doc}`other` page.

$$ L(N, D) = E + A / N^\\alpha + B / D^\\beta $$ (eq-test)

See {eq}`eq-test`.
"""

NOTEBOOK_MD = """---
jupytext:
  formats: ipynb,md:myst
  text_representation: {extension: .md, format_name: myst}
kernelspec: {display_name: Python 3, language: python, name: python3}
---
# Other

```{code-cell} ipython3
1 + 1
```
"""


@pytest.fixture
def mini_book(tmp_path: Path) -> Path:
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["execute"]["execute_notebooks"] = "off"
    (tmp_path / "_config.yml").write_text(yaml.safe_dump(config))
    shutil.copytree(ROOT / "book" / "_ext", tmp_path / "book" / "_ext")
    shutil.copytree(ROOT / "book" / "_static", tmp_path / "book" / "_static")
    shutil.copy(ROOT / "book" / "references.bib", tmp_path / "book" / "references.bib")
    (tmp_path / "book" / "_toc.yml").write_text(
        "format: jb-book\nroot: book/index\nchapters:\n  - file: chapters/other\n"
        "  - file: book/bibliography\n"
    )
    shutil.copy(ROOT / "book" / "bibliography.md", tmp_path / "book" / "bibliography.md")
    (tmp_path / "chapters").mkdir()
    (tmp_path / "chapters" / "other.md").write_text(NOTEBOOK_MD)
    (tmp_path / "book" / "index.md").write_text(PAGE.replace("{doc}`other`", "{doc}`../chapters/other`"))
    return tmp_path


def build(book: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(JUPYTER_BOOK), "build", str(book), "--toc", str(book / "book" / "_toc.yml"),
         "--config", str(book / "_config.yml"), "--warningiserror", "--keep-going"],
        capture_output=True, text=True, timeout=300, cwd=book,
    )


def test_intact_mini_book_builds(mini_book):
    result = build(mini_book)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert (mini_book / "_build" / "html" / "book" / "index.html").exists()


def test_missing_citation_key_fails(mini_book):
    bib = mini_book / "book" / "references.bib"
    text = bib.read_text()
    start = text.index("@inproceedings{hoffmann2022chinchilla")
    end = text.index("\n}\n", start) + 3
    bib.write_text(text[:start] + text[end:])
    result = build(mini_book)
    assert result.returncode != 0
    assert "hoffmann2022chinchilla" in result.stdout + result.stderr


def test_broken_cross_reference_fails(mini_book):
    index = mini_book / "book" / "index.md"
    index.write_text(index.read_text().replace("{eq}`eq-test`", "{eq}`eq-missing`"))
    result = build(mini_book)
    assert result.returncode != 0
    assert "eq-missing" in result.stdout + result.stderr


def test_broken_document_link_fails(mini_book):
    index = mini_book / "book" / "index.md"
    index.write_text(index.read_text().replace("../chapters/other", "../chapters/nowhere"))
    result = build(mini_book)
    assert result.returncode != 0
    assert "nowhere" in result.stdout + result.stderr


def test_generated_ipynb_is_not_a_second_document(mini_book):
    """The .ipynb half of a pair sits beside its .md source; the book must see one document."""
    import jupytext

    source = mini_book / "chapters" / "other.md"
    jupytext.write(jupytext.read(source), source.with_suffix(".ipynb"))
    result = build(mini_book)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
