"""A plan of :mod:`solutions.plan` as HTML tables, for a notebook or the book.

``python -m solutions.plan`` prints a plan as numbered lines (:func:`solutions.plan.format_plan`),
wider than a page's column. :func:`plan_tables` shows the same plan as two tables that wrap:
the numbered lines (the numbers are the printout's, so that a text can say "line 9"), and the
other layouts with why they lose. The values come from the plan's JSON object
(:func:`solutions.plan.plan_json`, the keys scripts rely on) and, for line 2, the compute-optimal
splits the plan carries. :class:`PlanTables` displays as the tables in Jupyter and as the printout
in a terminal.

    from solutions import plan, plan_html
    plan_html.PlanTables(plan.make_plan(model=70e9, tokens=1.4e12, gpu="H100", count=1024), coursefig.NAMES)
"""
from __future__ import annotations

import html
import math
from dataclasses import asdict

from . import memory, plan as planner, scaling, steptime
from ._format import count as count_words, gib as _gib, plural, seconds as _time

__all__ = ["plan_tables", "PlanTables"]

_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "interleaved 1F1B", "zb-h1": "ZB-H1", "zb-h2": "ZB-H2"}
_AXES = {"tp": "tensor parallel", "cp": "context parallel", "pp": "pipeline sends", "dp": "data parallel / ZeRO",
         "ep": "expert all-to-all"}


def _power(x: float, digits: int = 3) -> str:
    """``5.88 × 10<sup>23</sup>``: a large count as a reader writes it."""
    exponent = math.floor(math.log10(abs(x)))
    return f"{x / 10**exponent:.{digits}g} × 10<sup>{exponent}</sup>"


def describe_layout(layout: dict) -> str:
    """A layout of the plan's JSON (``layout``) in words; expert parallelism, folded into
    TP x CP x DP, after the axes."""
    axes = [f"TP {layout['tp']}"] + ([f"CP {layout['cp']}"] if layout["cp"] > 1 else []) + \
        [f"PP {layout['pp']}", f"DP {layout['dp']}"]
    experts = []
    if layout.get("ep", 1) * layout.get("etp", 1) > 1:
        experts = [f"EP {layout['ep']}" + (f" × ETP {layout['etp']}" if layout.get("etp", 1) > 1 else "")]
    words = [" × ".join(axes), *experts, f"ZeRO stage {layout['zero']}"]
    if layout["pp"] > 1:
        v = layout["virtual_stages"]
        words.append(_SCHEDULES.get(layout["schedule"], layout["schedule"]) + " schedule"
                     + (f", {v} chunks per stage" if v > 1 else ""))
    mb = layout["micro_batch"]
    words.append(f"micro-batches of {mb} sequence{'s' if mb > 1 else ''}")
    words.append("no recomputation" if layout["recompute"] == "none" else f"{layout['recompute']} recomputation")
    return ", ".join(words)


def _row(line, what, value, cls=""):
    klass = f' class="{cls}"' if cls else ""
    return f'<tr{klass}><td class="line">{line}</td><th scope="row">{what}</th><td>{value}</td></tr>'


def _section(title):
    return f'<tr class="section"><th scope="rowgroup" colspan="3">{title}</th></tr>'


def plan_tables(plan: planner.Plan, names: dict | None = None) -> str:
    """The plan as HTML: the printout's numbered lines as one table, then the other layouts.
    The constant sets go by the names readers know (:data:`solutions.plan.CONSTANT_NAMES`),
    unless ``names`` gives others (e.g. ``coursefig.NAMES``)."""
    names = {**planner.CONSTANT_NAMES, **(names or {})}  # words, not code names, as labels
    j, e = planner.plan_json(plan), html.escape
    lay, b, mem, shape = j["layout"], j["breakdown_s"], j["memory"], j["shape"]
    moe = shape.get("moe") is not None
    given = "the budget" if plan.budget_given else "6ND" + (", N active" if moe else "")
    peak16, low = plan.gpu.sixteen_bit.upper(), plan.precision not in ("bf16", "fp16")
    optimal = "".join(
        f"<tr><th scope=\"row\">{e(names.get(name, name))}</th><td>{count_words(N)}</td><td>{count_words(D)}</td>"
        f"<td>{r:.1f}</td><td>{L:.3f}</td></tr>" for name, (N, D, r, L) in plan.optimal.items())
    optimal += (f"<tr><th scope=\"row\">{scaling.CHINCHILLA_TOKENS_PER_PARAM} tokens per parameter</th>"
                f"<td>{count_words(plan.twenty[0])}</td><td>{count_words(plan.twenty[1])}</td><td></td><td></td></tr>")
    optimal = ('<table class="plan-optimal"><thead><tr><th scope="col">fit</th><th scope="col">N</th>'
               '<th scope="col">D</th><th scope="col">tokens / param</th><th scope="col">loss</th></tr></thead>'
               f"<tbody>{optimal}</tbody></table>")
    attention = f"{plural(shape['heads'], 'head')} of {shape['head_size']}" + (
        f", {plural(shape['kv_heads'], 'key/value head')}" if shape.get("kv_heads") and shape["kv_heads"] != shape["heads"] else "")
    conv = memory.get_convention(plan.convention)
    comm = [f"{_AXES[a]} {_time(b[a])} exposed + {_time(j['hidden_s'].get(a, 0.0))} hidden "
            f"({planner.traffic_words(plan.step, a, plan.gpu, 'over')})"
            for a in steptime.OVERLAP_AXES if j["bytes_per_step"].get(a, 0) > 0]  # every axis the printout has
    margin = mem["margin_bytes"]
    recompute = "no" if lay["recompute"] == "none" else lay["recompute"]
    rows = [
        _section("Compute"),
        _row(1, "training compute", f"{_power(j['flops'])} FLOPs ({given}): {count_words(j['params'])} parameters"
                                    + (f" ({count_words(shape['active_params'])} active)" if moe else "") + " on "
                                    f"{count_words(j['tokens'])} tokens, {j['tokens'] / j['params']:.1f} tokens per parameter"),
        _row(2, "compute-optimal at this budget", optimal),
        _section("Layout"),
        _row(3, "shape", f"{e(shape['name'])}: {shape['layers']} layers, width {shape['hidden']:,}, {attention}, "
                         f"{e(shape['mlp'])} MLP, sequences of {shape['seq_len']:,} tokens"
                         + (f"; {e(planner.moe_words(plan))}" if moe else "")),
        _row(4, "layout", f"{describe_layout(lay)}, {e(lay['attention'])} attention"
                          + (" in FP8" if lay["attention_precision"] == "fp8" else "")
                          + f", {e(plan.precision.upper())}, on {j['count']:,} {e(j['gpu'])}"
                          + (" (expert parallelism folded into TP × CP × DP"
                             + (f", {e(lay['ep_dispatch'])} dispatch" if lay["ep"] > 1 else "") + ")"
                             if lay["ep"] * lay.get("etp", 1) > 1 else "")
                          + "".join(f"<br>why: {e(r)}" for r in plan.reasons)),
        _section("Memory per GPU (GiB = 2<sup>30</sup> bytes)"),
        _row(5, f"model state ({conv.total:g} bytes per parameter, "
                f"{e(memory.CONVENTION_LABELS.get(plan.convention, plan.convention))}"
                + (f", {e(planner.weight_copy_words(plan))}" if planner.weight_copy_words(plan) else "") + ")",
             f"weights {_gib(mem['weights_bytes'])}, gradients {_gib(mem['grads_bytes'])}, "
             f"optimizer state {_gib(mem['optimizer_bytes'])}"),
        _row(6, "activations", f"{_gib(mem['activation_bytes'])} ({recompute} recomputation, {e(lay['attention'])} "
                               "attention, busiest pipeline stage"
             + (f"; {lay['offload_layers']} layers' activations offloaded over {e(j['links']['offload'])}, "
                f"{_time(b['offload'])} exposed + {_time(j['hidden_s']['offload'])} hidden"
                if lay.get("offload_layers") else "") + ")"),
        _row(7, "total", e(planner.memory_budget_words(plan)) + ": "
                         + (f"fits, {_gib(margin)} to spare" if mem["fits"]
                            else f"<strong>does not fit</strong>: {_gib(-margin)} over")),
        _section("Step (predicted)"),
        _row(8, "batch", f"{j['global_batch']:,} sequences, {j['global_batch'] * shape['seq_len'] / 1e6:.1f}M tokens "
                         f"per step; {plural(j['microbatches'], 'micro-batch', 'micro-batches')} per replica; "
                         f"{j['steps']:,} steps"),
        _row(9, "compute", f"{_time(b['compute'])} ({e(planner.ceiling_words(plan))})"),
        _row(10, "communication", "; ".join(comm) or "none"),
        _row(11, "pipeline bubble", f"{_time(b['bubble'])} ({b['bubble'] / j['step_time_s']:.1%} of the step)"),
        _row(12, "step", f"{_time(j['step_time_s'])}: {j['tokens_per_s']:,.0f} tokens/s, "
                         f"{j['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU, {j['tflops_per_gpu']:,.0f} TFLOP/s per GPU "
                         f"(model); MFU {j['mfu_bf16_peak']:.1%} of the {peak16} peak"
                         + (f", {j['mfu_precision_peak']:.1%} of the {e(plan.precision.upper())} peak" if low else "")
                         + f"; hardware FLOPs utilisation {j['hardware_flops_utilization']:.1%} of the {peak16} peak"
                         + (f", {j['hardware_flops_utilization_precision_peak']:.1%} of the {e(plan.precision.upper())} "
                            "peak" if low else ""),
             "total"),
        _section("Time"),
        _row(13, "days to train", f"{j['days']:,.1f} days on {j['count']:,} GPUs at {j['mfu_used']:.1%} MFU "
                                  f"of the {peak16} peak "
                                  f"({'given' if j['mfu_given'] else 'predicted'}), "
                                  f"{j['days'] * j['count'] / 365.25:,.1f} GPU-years", "total"),
    ]
    lines = ('<table class="plan-lines"><caption>The plan, line by line</caption><thead><tr><th scope="col">line</th>'
             '<th scope="col">what</th><th scope="col">value</th></tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    others = "".join(f"<tr><td>{_time(a['step_time_s'])}</td><td>{a['predicted_mfu']:.1%}</td>"
                     f"<td>{describe_layout(a['layout'])}</td></tr>" for a in j["alternatives"])
    others = ('<table class="plan-others"><caption>The next fastest layouts</caption><thead><tr>'
              f'<th scope="col">step</th><th scope="col">MFU ({peak16} peak)</th><th scope="col">layout</th></tr></thead>'
              f"<tbody>{others}</tbody></table>")
    lose = "".join(f"<li>{e(x)}</li>" for x in j["why_others_lose"])
    if plan.rule:
        st, rule_layout = plan.rule
        lose += (f"<li>the rule of thumb for this size ({e(planner.regime(plan.params))}): "
                 f"{describe_layout(asdict(rule_layout))}, {'fits' if st.fits else 'does not fit'}: "
                 f"{_time(st.step_s)} ({st.step_s / j['step_time_s'] - 1:+.0%})</li>")
    advice = "".join(f"<li>{e(x)}</li>" for x in j["advice"])
    return ('<div class="plan-tables">' + lines + others
            + (f'<p>Why the others lose:</p><ul class="plan-why">{lose}</ul>' if lose else "")
            + _runs_like(j["published_runs_like_this"], plan.gpu.name)
            + (f'<p>What to change:</p><ul>{advice}</ul>' if advice else "") + "</div>")


def _runs_like(track: dict, gpu: str) -> str:
    """The published runs nearest the plan and the model's error on each (the plan's JSON,
    ``published_runs_like_this``)."""
    e = html.escape
    if not track["runs"]:
        return f"<p>No published run on the {e(gpu)}: {e(planner.UNCHECKED_GPU)}.</p>"
    body = "".join(f"<tr><th scope=\"row\">{e(r['name'])}</th>"
                   f"<td data-label=\"published\">{r['published_tokens_per_s_per_gpu']:,.0f}</td>"
                   f"<td data-label=\"predicted\">{r['predicted_tokens_per_s_per_gpu']:,.0f}</td>"
                   f"<td data-label=\"error\">{r['error']:+.1%}</td><td data-label=\"set\">{e(r['set'])}</td></tr>"
                   for r in track["runs"])
    return (f'<table class="plan-runs-like"><caption>Published runs like this one ({e(track["match"])}): '
            "tokens/s per GPU, and the model's error</caption><thead><tr><th scope=\"col\">run</th>"
            '<th scope="col">published</th><th scope="col">predicted</th><th scope="col">error</th>'
            f'<th scope="col">set</th></tr></thead><tbody>{body}</tbody></table>')


class PlanTables:
    """A plan that shows as tables in Jupyter (:func:`plan_tables`) and as the printout
    (:func:`solutions.plan.format_plan`) as text."""

    def __init__(self, plan: planner.Plan, names: dict | None = None):
        self.plan, self.names = plan, names

    def _repr_html_(self) -> str:
        return plan_tables(self.plan, self.names)

    def __repr__(self) -> str:
        return planner.format_plan(self.plan)
