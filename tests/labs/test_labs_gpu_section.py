"""Labs 1-3's "On a GPU" section: text that says what a GPU run shows and how to start it, and
the cells that show a recorded run once a summary sits under labs/reference/.

The section's cells are taken from each lab's MyST source and run twice, with
``labs.notebook.REFERENCE_DIR`` pointed at a temporary folder: empty (the sentence glued into
the prose says that no run is recorded, and nothing is printed), then holding a fake summary
of the GPU check (the sentence says the runs are listed, and the run is printed). No lab is run.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import jupytext
import pytest

import labs.notebook

ROOT = Path(__file__).resolve().parents[2]
LABS = {"01-collectives": ("collectives", "l01"), "02-ddp": ("ddp", "l02"), "03-fsdp": ("fsdp", "l03")}


def gpu_section(stem: str):
    """(markdown of the section from '## On a GPU' to the next heading, its cells that look for
    recorded runs)."""
    nb = jupytext.read(ROOT / "labs" / f"{stem}.md")
    text, code, inside = [], [], False
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("## "):
                    inside = line.startswith("## On a GPU")
                if inside:
                    text.append(line)
        elif inside and "reference_runs(" in cell.source:  # the cells about recorded runs
            code.append(cell.source)
    assert text, f"{stem}: no '## On a GPU' section"
    return "\n".join(text), code


def run_cells(cells, capsys):
    glued = {}
    namespace = {"glue": lambda name, value, display=True: glued.__setitem__(name, value),
                 "reference_runs": labs.notebook.reference_runs, "show_reference": labs.notebook.show_reference}
    for source in cells:
        exec(compile(source, "<lab cell>", "exec"), namespace)  # noqa: S102 (the course's own cells)
    return glued, capsys.readouterr().out


@pytest.mark.parametrize("stem", sorted(LABS))
def test_gpu_section_says_what_a_gpu_shows_and_shows_recorded_runs(stem, tmp_path, monkeypatch, capsys):
    lab, tag = LABS[stem]
    text, cells = gpu_section(stem)
    # How to run it, as text: the lab on two GPUs and the course's GPU check for its rows.
    assert f"python -m labs.{lab} --nproc 2" in text
    only = re.search(r"python -m labs\.gpu_check --only ([\w\- ]+)`", text)
    assert only, f"{stem}: no gpu_check command"
    from labs.gpu_check import LABS as ROWS
    rows = {r.label: r.lab for r in ROWS}
    assert all(rows.get(label) == lab for label in only.group(1).split()), only.group(1)
    assert "labs/reference/README.md" in text and "backend: nccl" in text
    assert f"{{glue:text}}`{tag}_gpu_recorded`" in text

    monkeypatch.setattr(labs.notebook, "REFERENCE_DIR", tmp_path)
    glued, out = run_cells(cells, capsys)
    assert glued[f"{tag}_gpu_recorded"].startswith("No GPU run of this lab has been recorded")
    assert out == ""  # nothing but the prose while no run is recorded

    device = tmp_path / "NVIDIA-H100-80GB-HBM3"
    device.mkdir()
    summary = {"environment": {"device": "NVIDIA H100 80GB HBM3"},
               "runs": [{"lab": lab, "label": lab, "world_size": 2, "dtype": "bf16",
                         "checks": [{"ok": True}, {"ok": True}], "figures": [{"what": "", "tokens_per_s": 5000.0}]}]}
    (device / "summary.json").write_text(json.dumps(summary))
    glued, out = run_cells(cells, capsys)
    assert glued[f"{tag}_gpu_recorded"].startswith("The runs recorded with the course")
    assert "NVIDIA H100 80GB HBM3, 2 ranks, bf16: 2 of 2 checks pass" in out
    assert "5,000 tokens/s" in out
