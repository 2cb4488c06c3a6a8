"""Every stored figure of the book follows coursefig's house style, read back from the figure
files the notebooks store (no notebook is re-run):

* each figure was written by ``coursefig.render`` (it carries coursefig's record);
* one colour per concept: every legend entry whose label names a concept of the table
  (``coursefig.SERIES``: "forward", "FSDP over 8 GPUs", "Epoch AI refit", ...) is drawn in
  that concept's colour (``coursefig.COLORS``); and the figures that the table exists for do
  show those concepts (the three Chinchilla fits, a pipeline's forward and backward passes,
  data parallelism against the other strategies);
* the smallest text is at least ``coursefig.MIN_FONT_PT``, and the PNG figures carry it in the
  text chunk the site test turns into displayed pixels.
"""
from __future__ import annotations

import base64
import functools
import json
from pathlib import Path

import pytest

import coursefig
from tools.figure_text import PNG_KEY

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb")) + sorted((ROOT / "labs").glob("*.ipynb"))


@functools.lru_cache(maxsize=None)
def figures() -> tuple:
    """(notebook, figure name or cell index, kind, record, raw) for every stored figure."""
    found = []
    for nb_path in NOTEBOOKS:
        nb = json.loads(nb_path.read_text(encoding="utf-8"))
        for index, cell in enumerate(nb["cells"]):
            name = cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("name") or f"cell {index}"
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "image/svg+xml" in data:
                    raw = data["image/svg+xml"]
                    raw = "".join(raw) if isinstance(raw, list) else raw
                    found.append((nb_path.relative_to(ROOT).as_posix(), name, "svg", coursefig.record_of(raw), raw))
                elif "image/png" in data:
                    raw = base64.b64decode("".join(data["image/png"]))
                    found.append((nb_path.relative_to(ROOT).as_posix(), name, "png", coursefig.record_of(raw), raw))
    return tuple(found)


def concepts_of(label: str) -> list[str]:
    return [concept for concept, pattern in coursefig.SERIES.items() if pattern.search(label)]


def test_the_table_names_each_concept_once():
    assert set(coursefig.NAMES) <= set(coursefig.COLORS)
    for concept, name in coursefig.NAMES.items():
        assert coursefig.SERIES.get(concept, None) is None or coursefig.SERIES[concept].search(name), concept
    # the pattern test itself: a label names its concept, and not a look-alike
    assert concepts_of("FSDP over 8 GPUs (one server)") == ["fsdp"]
    assert concepts_of("data parallel (full replica)") == ["dp"]
    assert concepts_of("forward") == ["forward"] and concepts_of("forwarding") == []
    assert concepts_of("master weights (fp32)") == []
    assert concepts_of("gradient all-reduce (bandwidth term)") == []  # traffic, not the gradients held


def test_every_figure_is_drawn_by_coursefig():
    assert len(figures()) > 30, f"only {len(figures())} figures found"
    missing = [f"{nb}: {name}" for nb, name, _, record, _ in figures() if record is None]
    assert not missing, f"figures without coursefig's record (not drawn after coursefig.use()): {missing}"


def test_one_colour_per_concept():
    wrong = []
    for nb, name, _, record, _ in figures():
        for label, colour in (record or {}).get("series", []):
            for concept in concepts_of(label):
                if colour.upper() != coursefig.COLORS[concept].upper():
                    wrong.append(f"{nb} {name}: {label!r} is {colour}, "
                                 f"{concept} is {coursefig.COLORS[concept]}")
    assert not wrong, "\n".join(wrong)


# The figures the table was made for must show the concepts named (or the test above could
# pass because a figure stopped labelling them).
REQUIRED = {
    ("chapters/03-chinchilla.ipynb", "fig-s03-ratio"): {"hoffmann_rounded", "hoffmann_precise", "epoch_2024"},
    ("chapters/06-model-parallelism.ipynb", "fig-s06-pipeline"): {"forward", "backward"},
    ("chapters/06-model-parallelism.ipynb", "fig-s06-grid"): {"dp", "tp", "pp"},
    ("chapters/08-when-to-use-what.ipynb", "fig-s08-regimes"): {"dp", "fsdp", "3d"},
    ("labs/05-pipeline-parallel.ipynb", "fig-l05-timeline"): {"forward", "backward"},
    ("labs/03-fsdp.ipynb", "fig-l03-side-by-side"): {"weights", "gradients", "optimizer"},
}


@pytest.mark.parametrize("where", REQUIRED, ids=[name for _, name in REQUIRED])
def test_named_concepts_are_shown(where):
    shown = [(record or {}).get("series", []) for nb, name, _, record, _ in figures() if (nb, name) == where]
    assert shown, f"no figure {where[1]} in {where[0]}"
    concepts = {c for series in shown for label, _ in series for c in concepts_of(label)}
    assert REQUIRED[where] <= concepts, f"{where[1]} shows {sorted(concepts)}"


def test_smallest_font_is_recorded_and_large_enough():
    small = [f"{nb} {name}: {record['smallest_pt']} pt" for nb, name, _, record, _ in figures()
             if record and record["smallest_pt"] < coursefig.MIN_FONT_PT - 1e-6]
    assert not small, f"text under {coursefig.MIN_FONT_PT} pt:\n" + "\n".join(small)
    from io import BytesIO

    from PIL import Image

    for nb, name, kind, record, raw in figures():
        if kind == "png" and record:
            with Image.open(BytesIO(raw)) as image:
                assert float(image.info[PNG_KEY]) == pytest.approx(record["smallest_pt"], abs=0.01), (nb, name)
                assert image.info["dpi"][0] == pytest.approx(coursefig.PNG_DPI, rel=1e-3), (nb, name)


def test_explorers_take_colours_and_names_from_the_table():
    """The explorers' data (built by book/_ext/explore.py) carry the table's colours and names."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("course_explore", ROOT / "book" / "_ext" / "explore.py")
    explore = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(explore)
    for fit in explore.chinchilla_data()["sets"]:
        assert fit["colour"] == coursefig.COLORS[fit["key"]], fit["key"]
        assert fit["label"].startswith(coursefig.NAMES[fit["key"]]), fit["label"]
    colours = explore.pipeline_data()["colours"]  # the explorers' one table (explorer_colours)
    assert {k: colours[k] for k in ("forward", "backward")} == {k: coursefig.COLORS[k] for k in ("forward", "backward")}
    assert colours["fits"] == [coursefig.COLORS[fit["key"]] for fit in explore.chinchilla_data()["sets"]]
    for concept in ("weights", "gradients", "optimizer", "activations"):
        assert colours[concept] == coursefig.COLORS[concept], concept
