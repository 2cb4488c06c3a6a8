"""Regenerate the .ipynb half of every paired notebook from its MyST markdown source.

The .md file is the source of truth. With ``--execute`` the generated notebook is executed
(in its own folder, like the book's build) and its outputs are stored, so that Colab, Binder
and nbval see a notebook with outputs. Volatile metadata (execution timestamps) is dropped so
a rebuild with nothing changed produces identical files.

    python tools/sync_notebooks.py [--execute] [PATH.md ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
PAIRED_DIRS = ("chapters", "labs", "assignments")


def is_notebook_source(path: Path) -> bool:
    """A MyST markdown file is a notebook source when its front matter declares jupytext."""
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---"):
        return False
    front_matter = text.split("---", 2)[1]
    return "jupytext:" in front_matter and "kernelspec:" in front_matter


def paired_sources(root: Path = ROOT) -> list[Path]:
    return sorted(
        p for d in PAIRED_DIRS for p in (root / d).glob("*.md") if is_notebook_source(p)
    )


def _strip_volatile(nb: nbformat.NotebookNode) -> None:
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                output.get("metadata", {}).pop("execution", None)
    nb.metadata.pop("widgets", None)


def _keep_cell_ids(nb: nbformat.NotebookNode, target: Path) -> None:
    """Reuse the previous .ipynb's cell ids, position by position, so that regenerating a
    notebook does not rewrite every cell's random id (noisy diffs)."""
    if not target.exists():
        return
    previous = nbformat.read(target, as_version=4).cells
    for cell, old in zip(nb.cells, previous):
        if cell.cell_type == old.cell_type and "id" in old:
            cell["id"] = old["id"]


def build(source: Path, execute: bool, timeout: int = 300) -> Path:
    nb = jupytext.read(source)
    target = source.with_suffix(".ipynb")
    _keep_cell_ids(nb, target)
    if execute:
        client = NotebookClient(
            nb, timeout=timeout, kernel_name="python3",
            resources={"metadata": {"path": str(source.parent)}},
        )
        client.execute()
    _strip_volatile(nb)
    nbformat.write(nb, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", type=Path, help="sources (default: all pairs)")
    parser.add_argument("--execute", action="store_true", help="execute and store outputs")
    args = parser.parse_args(argv)
    sources = [p.resolve() for p in args.paths] or paired_sources()
    for source in sources:
        target = build(source, args.execute)
        print(f"wrote {target.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
