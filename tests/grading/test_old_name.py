"""A notebook released before the grader moved out of ``tests/`` (its check cells import
``tests.grading`` and ``tests.grading.selfcheck``) still runs as a student runs it, and
still grades, through the two shims in ``tests/grading`` (book/instructors.md, "Where the
grader lives")."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
OLD = ROOT / "tests" / "assets" / "released-before-the-move.ipynb"


def test_the_old_notebook_imports_the_old_name():
    sources = "".join(c.source for c in nbformat.read(OLD, as_version=4).cells if c.cell_type == "code")
    assert "from tests.grading.selfcheck import self_check" in sources
    assert "from grading" not in sources and "autograde" not in sources


def test_a_notebook_released_before_the_move_grades_in_full(tmp_path):
    out = tmp_path / "report.json"
    done = subprocess.run([sys.executable, "-m", "autograde", str(OLD), "--json", str(out), "-q"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    # Every exercise the old notebook has earns full marks. Exercise 4(b) came after its
    # release: the notebook does not define its function, so that part alone earns nothing.
    by_id = {e["id"]: (e["score"], e["max_score"]) for e in report["exercises"]}
    assert by_id.pop("ex4b") == (0, 25)
    assert all(score == most for score, most in by_id.values()), by_id
    assert report["max_score"] == 100 and report["score"] == 75
    assert not report["problems"]


def test_its_check_cells_run_in_a_kernel_through_the_shims(tmp_path):
    notebook = tmp_path / OLD.name
    shutil.copy(OLD, notebook)
    nb = nbformat.read(notebook, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = ["".join(o.get("text", "") for o in c.get("outputs", []) if o.get("output_type") == "stream")
               for c in nb.cells if c.cell_type == "code" and "self_check(" in c.source]
    assert len(printed) == 4
    for text in printed:
        total = re.search(r"Total: (\S+) / (\S+) public points", text)
        assert total and total.group(1) == total.group(2), text[-800:]
        assert "All public tests passed" in text and "Traceback" not in text, text[-800:]
