"""An assignment's statement is read in Jupyter as often as in the book, and Jupyter renders
no MyST role: a statement prints its computed figures from a cell instead of gluing them
into the prose ({glue:text} shows raw there)."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import ASSIGNMENTS

ROOT = Path(__file__).resolve().parents[2]
STATEMENTS = sorted(Path(ROOT / notebook).with_suffix(".md") for _, notebook in ASSIGNMENTS.values())


@pytest.mark.parametrize("statement", STATEMENTS, ids=lambda p: p.stem)
def test_a_statement_glues_nothing_into_its_prose(statement):
    text = statement.read_text()
    assert "{glue" not in text, f"{statement.name}: a {{glue:...}} role shows raw in Jupyter"
    assert "import glue" not in text and "glue(" not in text


def test_every_assignment_has_a_statement():
    assert len(STATEMENTS) == len(ASSIGNMENTS) and all(p.exists() for p in STATEMENTS)
