"""Every notebook exists twice: MyST markdown (the source) and .ipynb (generated, with
outputs). These tests fail, naming the pair, when the two halves drift apart."""
from __future__ import annotations

from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

from tools.sync_notebooks import ROOT, PAIRED_DIRS, is_notebook_source, paired_sources

SOURCES = paired_sources()


def _cells(nb):
    """What must agree between the halves: cell kind, source and tags."""
    return [
        (cell.cell_type, cell.source.strip(), tuple(cell.metadata.get("tags", ())))
        for cell in nb.cells
    ]


def test_there_are_paired_notebooks():
    assert len(SOURCES) >= 10, [str(p) for p in SOURCES]


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_pair_is_in_sync(source: Path):
    twin = source.with_suffix(".ipynb")
    pair = f"{source.relative_to(ROOT)} <-> {twin.relative_to(ROOT)}"
    assert twin.exists(), f"{pair}: the .ipynb is missing; run `make notebooks`"
    from_md = _cells(jupytext.read(source))
    from_ipynb = _cells(nbformat.read(twin, as_version=4))
    if from_md != from_ipynb:
        first = next(
            (i for i, (a, b) in enumerate(zip(from_md, from_ipynb)) if a != b),
            min(len(from_md), len(from_ipynb)),
        )
        pytest.fail(
            f"{pair} are out of sync (first difference at cell {first}; "
            f"{len(from_md)} cells in the .md, {len(from_ipynb)} in the .ipynb). "
            "Edit the .md and run `make notebooks` to regenerate the .ipynb."
        )


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_generated_notebook_has_outputs(source: Path):
    """Colab, Binder and nbval need the stored outputs of every code cell."""
    nb = nbformat.read(source.with_suffix(".ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    unexecuted = [i for i, c in enumerate(code) if c.execution_count is None]
    assert not unexecuted, f"{source.with_suffix('.ipynb').name}: code cells {unexecuted} were never executed"


def test_no_orphan_notebooks():
    """An .ipynb without its .md source would silently become the only copy."""
    orphans = [
        str(p.relative_to(ROOT))
        for d in PAIRED_DIRS
        for p in (ROOT / d).glob("*.ipynb")
        if not (p.with_suffix(".md").exists() and is_notebook_source(p.with_suffix(".md")))
    ]
    assert not orphans, f"notebooks without a MyST source: {orphans}"


def test_book_sees_each_pair_once():
    """The book builds the .md half; the .ipynb half must be excluded, or Sphinx finds two
    documents of one name."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    excluded = set(config["exclude_patterns"])
    for d in PAIRED_DIRS:
        assert f"{d}/*.ipynb" in excluded, f"{d}/*.ipynb must be in exclude_patterns"


def test_every_toc_entry_exists():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text())
    files = [toc["root"]] + [ch["file"] for part in toc["parts"] for ch in part["chapters"]]
    missing = [f for f in files if not any((ROOT / f).with_suffix(s).exists() for s in (".md", ".ipynb"))]
    assert not missing, missing
