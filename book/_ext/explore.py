"""Interactive explorers for the book: the numbers come from ``solutions/`` at build time.

The ``explorer`` directive (``{explorer} chinchilla``, ``memory`` or ``pipeline`` in a MyST
page) calls the course's tested functions over a grid of inputs and writes the results into
the page as JSON. A small script, ``book/_static/explore/explore.js``, draws the controls and
*looks values up* in that table: it computes no formula of its own, so what the reader sees
is exactly what the tests check. The script and its style sheet are copied into the built
site, so the explorers work offline and without a server (no CDN, no request at view time).
"""
from __future__ import annotations

import functools
import json
import math
import shutil
from pathlib import Path

import numpy as np
from docutils import nodes
from sphinx.util.docutils import SphinxDirective

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
ASSETS = HERE.parent / "_static" / "explore"
GB = 1e9


def _sig(x, digits=6):
    """A float rounded to ``digits`` significant digits (keeps the JSON small)."""
    return float(f"{float(x):.{digits}g}")


# --------------------------------------------------------------------------
# Chinchilla: compute-optimal N, D, D/N and loss under three constant sets
# --------------------------------------------------------------------------

#: log10 of the compute budgets on the slider, from 1e18 to 1e27 FLOPs in tenths of a decade.
CHINCHILLA_LOG10_C = np.round(np.arange(180, 271) / 10, 1)


def chinchilla_data() -> dict:
    import coursefig
    from solutions import scaling

    budgets = 10.0 ** CHINCHILLA_LOG10_C
    sets = []
    # names and colours from coursefig's one table, as in the Chinchilla section's figures
    for key, label, short in (
        ("hoffmann_rounded", f"{coursefig.NAMES['hoffmann_rounded']} (2022, as printed)", "Hoffmann, rounded"),
        ("hoffmann_precise", f"{coursefig.NAMES['hoffmann_precise']} (2022, TeX source)", "Hoffmann, unrounded"),
        ("epoch_2024", f"{coursefig.NAMES['epoch_2024']} (2024 replication)", coursefig.NAMES["epoch_2024"]),
    ):
        colour = coursefig.COLORS[key]
        c = scaling.CONSTANT_SETS[key]
        N, D, ratio, loss = scaling.compute_optimal_closed_form(budgets, c)
        sets.append({
            "key": key, "label": label, "short": short, "colour": colour, "cite": c.cite,
            "constants": {f: getattr(c, f) for f in ("E", "A", "B", "alpha", "beta")},
            "a": _sig(scaling.allocation_exponent(c)),
            "N": [_sig(x) for x in N], "D": [_sig(x) for x in D],
            "ratio": [_sig(x) for x in ratio], "loss": [_sig(x) for x in loss],
        })
    return {"log10C": [float(x) for x in CHINCHILLA_LOG10_C], "C": [_sig(x) for x in budgets],
            "default": int(np.argmin(np.abs(CHINCHILLA_LOG10_C - 23.0))), "sets": sets}


# --------------------------------------------------------------------------
# Memory: model state and activations per GPU under TP x PP x DP with ZeRO
# --------------------------------------------------------------------------

MEMORY_GPUS = (1, 2, 4, 8, 16, 24, 64, 256, 1024, 4096, 16384)
MEMORY_TP = (1, 2, 4, 8)
MEMORY_PP = (1, 2, 4, 8, 16)
#: Activation options: (key, label, keyword arguments of activation_memory_per_layer).
RECOMPUTE = (
    ("none", "none: store every activation", {}),
    ("selective", "selective: recompute attention scores", {"selective_recompute": True}),
    ("full", "full: store only each layer's input", {"full_recompute": True}),
)
#: ZeRO stage -> the strategy name that memory_breakdown gives it.
ZERO_STRATEGY = {0: "dp", 1: "zero1", 2: "zero2", 3: "zero3"}


def stage0_activation_bytes(arch, tp, pp, sequence_parallel, recompute_kwargs) -> float:
    """Activation bytes on the busiest GPU (pipeline stage 0) for micro-batches of one sequence.

    Per layer: Korthikanti et al.'s count (``solutions.memory.activation_memory_per_layer``);
    stage 0 holds ``ceil(layers / pp)`` layers and, under 1F1B with at least ``pp``
    micro-batches, the activations of ``peak_in_flight`` micro-batches (``pp`` of them).
    """
    from solutions import memory

    per_layer = memory.activation_memory_per_layer(
        arch.seq_len, 1, arch.d_model, arch.heads, tp=tp, sequence_parallel=sequence_parallel,
        **recompute_kwargs)
    return per_layer * math.ceil(arch.layers / pp) * _stage0_in_flight(pp)


@functools.lru_cache(maxsize=None)
def _stage0_in_flight(pp) -> int:
    """Micro-batches whose activations stage 0 holds at once under 1F1B (m = 2 pp)."""
    from solutions import pipeline

    return pipeline.peak_in_flight(pipeline.pipeline_schedule(pp, 2 * pp, "1f1b"), 0)


def memory_data() -> dict:
    import coursefig
    from solutions import facts, memory

    models = list(facts.ARCHITECTURES.values())
    conventions = list(memory.BYTE_CONVENTIONS.values())
    pairs, layouts = [], {}
    for g in MEMORY_GPUS:
        for tp in MEMORY_TP:
            for pp in MEMORY_PP:
                if g % (tp * pp):
                    continue  # no whole data-parallel degree: the page says so
                pair = (tp * pp, g // (tp * pp))
                if pair not in pairs:
                    pairs.append(pair)
                layouts[f"{g},{tp},{pp}"] = [pairs.index(pair), pair[1]]
    state = [[[[[_sig(v / GB, 5) for v in memory.memory_breakdown(
                    m.params / k, ZERO_STRATEGY[z], dp, conv.name).values()]
                for k, dp in pairs]
               for z in memory.ZERO_STAGES]
              for conv in conventions]
             for m in models]
    act = [[[[[_sig(stage0_activation_bytes(m, tp, pp, sp, kw) / GB, 6) for sp in (False, True)]
              for _, _, kw in RECOMPUTE]
             for pp in MEMORY_PP]
            for tp in MEMORY_TP]
           for m in models]
    return {
        "models": [{"name": m.name, "params": m.params, "layers": m.layers, "seq_len": m.seq_len,
                    "d_model": m.d_model, "heads": m.heads} for m in models],
        "conventions": [{"name": c.name, "total": c.total, "weights": c.weights, "grads": c.grads,
                         "optimizer": c.optimizer, "description": c.description} for c in conventions],
        "gpus": list(MEMORY_GPUS), "tp": list(MEMORY_TP), "pp": list(MEMORY_PP),
        "zero": list(memory.ZERO_STAGES),
        "recompute": [[key, label] for key, label, _ in RECOMPUTE],
        "devices": [{"name": d.name, "memory_gb": d.memory_gb} for d in facts.GPUS.values()],
        "layouts": layouts, "state": state, "act": act,
        "colours": {k: coursefig.COLORS[k] for k in ("weights", "gradients", "optimizer", "activations")},
        "defaults": {"model": "Llama 3 70B", "gpus": 64, "tp": 8, "pp": 1, "zero": 1,
                     "convention": "zero_16", "device": "H100 SXM", "recompute": "selective", "sp": True},
    }


# --------------------------------------------------------------------------
# Pipeline: simulated schedules and their bubble
# --------------------------------------------------------------------------

PIPELINE_P = tuple(range(1, 9))
PIPELINE_M = (1, 2, 3, 4, 6, 8, 12, 16)
#: (key, label, kind, chunks per stage)
PIPELINE_SCHEDULES = (
    ("gpipe", "GPipe", "gpipe", 1),
    ("1f1b", "1F1B (PipeDream-Flush)", "1f1b", 1),
    ("interleaved2", "interleaved 1F1B, 2 chunks per GPU", "interleaved", 2),
)
T_FWD, T_BWD = 1.0, 2.0


def pipeline_data() -> dict:
    import coursefig
    from solutions import pipeline

    runs = {}
    for key, _, kind, v in PIPELINE_SCHEDULES:
        for p in PIPELINE_P:
            for m in PIPELINE_M:
                name = f"{key},{p},{m}"
                try:
                    events = pipeline.pipeline_schedule(p, m, kind, T_FWD, T_BWD, interleave=v)
                except ValueError as exc:  # e.g. interleaving needs m to be a multiple of p
                    runs[name] = {"error": str(exc)}
                    continue
                flat = []
                for e in events:
                    flat += [e.stage, e.microbatch, 0 if e.phase == "F" else 1, e.chunk,
                             _sig(e.start), _sig(e.end)]
                runs[name] = {
                    "events": flat,
                    "makespan": _sig(pipeline.makespan(events)),
                    "idle": _sig(pipeline.idle_fraction(events)),
                    "share": _sig(pipeline.bubble_fraction(p, m, "share_of_total", v)),
                    "relative": _sig(pipeline.bubble_fraction(p, m, "relative_to_ideal", v)),
                    "peak0": pipeline.peak_in_flight(events, 0),
                }
    return {"p": list(PIPELINE_P), "m": list(PIPELINE_M), "t_fwd": T_FWD, "t_bwd": T_BWD,
            "schedules": [[key, label, v] for key, label, _, v in PIPELINE_SCHEDULES], "runs": runs,
            "colours": {k: coursefig.COLORS[k] for k in ("forward", "backward")},
            "defaults": {"schedule": "1f1b", "p": 4, "m": 8}}


BUILDERS = {"chinchilla": chinchilla_data, "memory": memory_data, "pipeline": pipeline_data}
#: The modules whose change must rebuild an explorer page.
SOURCES = {
    "chinchilla": ["solutions/scaling.py", "coursefig/__init__.py"],
    "memory": ["solutions/memory.py", "solutions/facts.py", "solutions/pipeline.py", "coursefig/__init__.py"],
    "pipeline": ["solutions/pipeline.py", "coursefig/__init__.py"],
}


class ExplorerDirective(SphinxDirective):
    """``{explorer} NAME``: the explorer's container and its table of values as JSON."""

    required_arguments = 1
    has_content = False

    def run(self):
        name = self.arguments[0]
        if name not in BUILDERS:
            raise self.error(f"unknown explorer {name!r}; known: {', '.join(BUILDERS)}")
        for source in SOURCES[name] + ["book/_ext/explore.py"]:
            self.env.note_dependency(str(ROOT / source))
        payload = json.dumps(BUILDERS[name](), separators=(",", ":")).replace("</", "<\\/")
        html = (
            f'<div class="explorer" data-explorer="{name}">'
            f'<noscript>This explorer needs JavaScript.</noscript>'
            f'<script type="application/json" class="explorer-data">{payload}</script></div>'
        )
        return [nodes.raw("", html, format="html")]


def _add_assets(app, pagename, templatename, context, doctree):
    if 'class="explorer"' in context.get("body", ""):
        app.add_css_file("explore/explore.css")
        app.add_js_file("explore/explore.js", defer="defer")


def _copy_assets(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    target = Path(app.outdir) / "_static" / "explore"
    target.mkdir(parents=True, exist_ok=True)
    for source in ASSETS.iterdir():
        if source.is_file():
            shutil.copyfile(source, target / source.name)


def setup(app):
    app.add_directive("explorer", ExplorerDirective)
    app.connect("html-page-context", _add_assets)
    app.connect("build-finished", _copy_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
