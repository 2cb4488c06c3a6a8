"""Checks for Exercise 4, part (b): ``communication_time_per_step_by_axis(model_params,
dp_degree, tp_degree, pp_degree, num_layers, seq_len, micro_batch, num_microbatches, d_model,
intra_node_gb_s, inter_node_gb_s)``, the per-axis estimate that sections 5-7 teach, returned
as ``(dp_seconds, tp_seconds, pp_seconds)`` for one GPU per optimizer step (bf16, 2 bytes):

    dp  = 2(d-1)/d * 2 * model_params / (t * p)                     / inter   (once per step)
    tp  = (num_layers / p) * m * 4 * 2(t-1)/t * 2 * b * s * h      / intra   (per micro-batch)
    pp  = sends(p) * m * 2 * b * s * h                              / inter   (per micro-batch)

with the ring factor 2(n-1)/n (nccl-tests; Patarasuk & Yuan 2009), Megatron's two
all-reduces forward and two backward per layer (Shoeybi et al. 2019; Narayanan et al. 2021),
and sends(p) = 0, 1, 2 for p = 1, 2, >= 3 (the busiest stage sends its output forward and its
input's gradient back). Bandwidths in GB/s: 1e9 bytes per second.

The volume checks use the same bandwidth on both links, so that a swap of the links is
charged to the bandwidth check only; a plain unit slip (1000, 1/1000, 8) is charged to the
bandwidth check only as well.
"""
from __future__ import annotations

import random

from .core import Result
from .framework import (
    PROPERTY_GATE_REL, collect, fmt_call, fmt_pair, fmt_value, make_check, same, values_match,
    why_of, with_why,
)

EXERCISE = "ex4b"
FUNCTION = "communication_time_per_step_by_axis"
AXES = ("DP", "TP", "PP")

HINT = ("per axis, as sections 5-7 teach: DP all-reduces the bf16 gradients of this GPU's "
        "shard (model_params / (tp_degree * pp_degree)) once per step with the ring factor "
        "2(n-1)/n; TP all-reduces b*s*h bf16 activations four times per layer (two forward, two "
        "backward) on the num_layers / pp_degree layers of one stage, for every micro-batch; PP "
        "sends b*s*h bf16 values per micro-batch, twice from an interior stage. TP runs on "
        "intra_node_gb_s, DP and PP on inter_node_gb_s, both in GB/s (1e9 bytes/s).")

UNIT_SLIPS = {1e3: "1000 times too large", 1e-3: "1000 times too small",
              8.0: "8 times too large"}

# model_params, dp_degree, tp_degree, pp_degree, num_layers, seq_len, micro_batch,
# num_microbatches, d_model, intra_node_gb_s, inter_node_gb_s
#: A 70B-class model (80 layers of width 8,192) on 1,024 H100s as TP8 x PP4 x DP32, 16
#: micro-batches of one 4,096-token sequence; NVLink and one 400 Gb/s NIC per GPU.
CONFIG_70B = [70e9, 32, 8, 4, 80, 4096, 1, 16, 8192, 450, 50]
#: A 7B-class model (32 layers of width 4,096) as TP4 x PP2 x DP16, 12 micro-batches of two.
CONFIG_7B = [7e9, 16, 4, 2, 32, 4096, 2, 12, 4096, 450, 50]

SAME_LINK = 100  # GB/s on both links: the volume checks do not see which link carries what
DP_PROBES = [[p, d, t, pp, 16, 2048, 1, 4, 1024, SAME_LINK, SAME_LINK]
             for p, d, t, pp in ((1e9, 8, 4, 2), (3e9, 8, 4, 2), (1e9, 64, 1, 1), (2e9, 3, 2, 4),
                                 (1e9, 16, 8, 8), (1000003.0, 8, 4, 2))]
TP_PROBES = [[1e9, 4, t, pp, layers, s, b, m, h, SAME_LINK, SAME_LINK]
             for t, pp, layers, m, b, s, h in ((8, 1, 16, 1, 1, 2048, 1024), (4, 2, 16, 4, 2, 1024, 2048),
                                               (3, 4, 32, 8, 1, 4096, 1024), (8, 4, 32, 2, 1, 2048, 4096))]
PP_PROBES = [[1e9, 4, 4, pp, 24, s, b, m, h, SAME_LINK, SAME_LINK]
             for pp, m, b, s, h in ((2, 4, 1, 2048, 1024), (3, 4, 1, 2048, 1024), (4, 8, 2, 1024, 2048),
                                    (8, 2, 1, 4096, 1024))]
BW_PROBES = [[1e9, 8, 4, 4, 16, 2048, 1, 4, 1024, intra, inter]
             for intra, inter in ((450, 50), (900, 25), (100, 400))]
DEGREE_ONE_PROBES = [[7e9, d, t, pp, 32, 4096, 1, 6, 4096, 450, 50]
                     for d, t, pp in ((1, 4, 2), (8, 1, 4), (8, 4, 1), (1, 1, 1))]


def unit_slip(factor: float) -> float | None:
    for u in UNIT_SLIPS:
        if same(factor, u, 1e-6):
            return u
    return None


def _components(values, axis: int) -> list:
    return [v[axis] for v in values]


def _recognise_axis(values, probes, axis: int) -> str | None:
    """The explanation of the one known mistake whose ``axis`` component reproduces the
    student's on every probe (and differs from the right one somewhere)."""
    found = set()
    for mistake_id in probes[0].mistakes:
        outcomes = [p.mistakes.get(mistake_id, {}) for p in probes]
        if not all("value" in o and type(o["value"]) is list and len(o["value"]) == 3 for o in outcomes):
            continue
        theirs = [o["value"][axis] for o in outcomes]
        right = [p.expected["value"][axis] for p in probes]
        if all(same(a, b) for a, b in zip(theirs, _components(values, axis))) \
                and not all(same(a, b) for a, b in zip(theirs, right)):
            found.add(mistake_id)
    return why_of(found.pop()) if len(found) == 1 else None


def _three(call, probes):
    """The student's answers, each three finite numbers; or a failed Result."""
    values, failed = collect(call, FUNCTION, probes, want="numbers")
    if failed:
        return None, failed
    for probe, value in zip(probes, values):
        if len(value) != 3:
            return None, Result(False, f"{fmt_call(FUNCTION, probe.args)} returned "
                                       f"{fmt_value(value)}; expected three numbers, the seconds "
                                       "of DP, TP and PP traffic, in that order.")
    return values, None


def judge_axis(axis: int, what: str, ok_text: str):
    """One axis's seconds equal the right ones on every probe (both links at the same
    bandwidth), up to a unit slip that the bandwidth check charges."""
    def judge(call, probes) -> Result:
        values, failed = _three(call, probes)
        if failed:
            return failed
        got = _components(values, axis)
        right = [p.expected["value"][axis] for p in probes]
        if all(same(g, r) for g, r in zip(got, right)):
            return Result(True, ok_text)
        factors = [g / r for g, r in zip(got, right) if r != 0]
        zero_ok = all(same(g, 0.0) or abs(g) < 1e-300 for g, r in zip(got, right) if r == 0)
        if factors and zero_ok and all(same(f, factors[0], 1e-6) for f in factors) \
                and unit_slip(factors[0]) is not None:
            return Result(True, f"The {AXES[axis]} volume is right, but all your times are "
                                f"{UNIT_SLIPS[unit_slip(factors[0])]} (see ex4b_bandwidth_units).")
        i = next(i for i, (g, r) in enumerate(zip(got, right)) if not same(g, r))
        g, e = fmt_pair(got[i], right[i])
        text = (f"{fmt_call(FUNCTION, probes[i].args)}: your {AXES[axis]} time is {g} s; "
                f"expected {e} s. {what}")
        if right[i] != 0:
            ratio = got[i] / right[i]
            text += f" That is {ratio:.4g} times the expected value" + (
                " (2^30 / 1e9: a gibibyte where the exercise's GB is 1e9 bytes)."
                if same(ratio, 1e9 / 2**30, 1e-6) or same(ratio, 2**30 / 1e9, 1e-6) else ".")
        return Result(False, with_why(text, _recognise_axis(values, probes, axis), HINT))
    return judge


def judge_bandwidth(call, probes) -> Result:
    """Each axis's time is inversely proportional to the bandwidth of its own link, with GB/s
    converted to 1e9 bytes/s."""
    values, failed = _three(call, probes)
    if failed:
        return failed
    links = ("inter_node_gb_s", "intra_node_gb_s", "inter_node_gb_s")
    ratios = []
    for axis in range(3):
        factors = [v[axis] / p.expected["value"][axis] for v, p in zip(values, probes)]
        if not all(same(f, factors[0], 1e-6) for f in factors):
            i = next(i for i, f in enumerate(factors) if not same(f, factors[0], 1e-6))
            text = (f"{fmt_call(FUNCTION, probes[i].args)}: your {AXES[axis]} time does not follow "
                    f"{links[axis]}. {AXES[axis]} traffic runs on "
                    f"{'NVLink inside a server' if axis == 1 else 'the network between servers'}: "
                    f"time = bytes / ({links[axis]} * 1e9).")
            return Result(False, with_why(text, _recognise_all(values, probes)))
        ratios.append(factors[0])
    if all(same(r, 1.0) for r in ratios):
        return Result(True, "Each axis runs on its own link, with GB/s converted to 1e9 bytes/s, "
                            "and the times are in seconds.")
    slip = unit_slip(ratios[0])
    if slip is not None and all(same(r, ratios[0], 1e-6) for r in ratios):
        g, e = fmt_pair(values[0][0], probes[0].expected["value"][0])
        return Result(False, with_why(
            f"{fmt_call(FUNCTION, probes[0].args)}: your DP time is {g} s; expected {e} s: your "
            f"times are {UNIT_SLIPS[slip]}.", _recognise_all(values, probes),
            "the bandwidths are in GB/s, that is 1e9 bytes per second; return seconds."))
    if all(abs(r - 1.0) <= PROPERTY_GATE_REL for r in ratios) or _a_known_volume_slip(values, probes):
        return Result(True, "Each axis's time is inversely proportional to its own link's "
                            "bandwidth and the unit conversion looks right (the volumes are "
                            "checked separately).")
    g, e = fmt_pair(values[0], probes[0].expected["value"])
    return Result(False, f"{fmt_call(FUNCTION, probes[0].args)} returned {g}; expected {e}. Each "
                         "of your times follows its link, but this test pays only when the times "
                         f"are right too (within {PROPERTY_GATE_REL:.0%}), or off only by a known "
                         "slip in a volume, which the volume tests charge.")


def _recognise_all(values, probes) -> str | None:
    """The explanation of the known mistake that reproduces every probe's whole answer."""
    found = set()
    for mistake_id in probes[0].mistakes:
        outcomes = [p.mistakes.get(mistake_id, {}) for p in probes]
        if all("value" in o and same(o["value"], v) for o, v in zip(outcomes, values)) and \
                not all(same(o["value"], p.expected["value"]) for o, p in zip(outcomes, probes)):
            found.add(mistake_id)
    return why_of(found.pop()) if len(found) == 1 else None


def _a_known_volume_slip(values, probes) -> bool:
    """The answers are a known mistake's that changes bytes, not units or links."""
    for mistake_id in probes[0].mistakes:
        if mistake_id.startswith("ex4b_bandwidth") or mistake_id.startswith("ex4b_links"):
            continue
        outcomes = [p.mistakes.get(mistake_id, {}) for p in probes]
        if all("value" in o and same(o["value"], v, 1e-6) for o, v in zip(outcomes, values)):
            return True
    return False


def judge_degree_one(call, probes) -> Result:
    """An axis of degree 1 sends nothing: its ring has one GPU, or there is no pipeline; the
    other axes' times must be right too (within the property gate, or a unit slip)."""
    values, failed = _three(call, probes)
    if failed:
        return failed
    degrees = {0: 1, 1: 2, 2: 3}  # argument index of each axis's degree
    for probe, value in zip(probes, values):
        for axis in range(3):
            if probe.args[degrees[axis]] == 1 and not (value[axis] == 0.0):
                text = (f"{fmt_call(FUNCTION, probe.args)}: your {AXES[axis]} time is "
                        f"{fmt_value(value[axis])} s, but with {AXES[axis].lower()}_degree = 1 there "
                        f"is no {AXES[axis]} traffic at all.")
                return Result(False, with_why(text, _recognise_all(values, probes), HINT))
    for probe, value in zip(probes, values):
        right = probe.expected["value"]
        for axis in range(3):
            if right[axis] == 0:
                continue
            factor = value[axis] / right[axis]
            if abs(factor - 1) > PROPERTY_GATE_REL and unit_slip(factor) is None:
                g, e = fmt_pair(value[axis], right[axis])
                text = (f"{fmt_call(FUNCTION, probe.args)}: the axes of degree 1 send nothing, "
                        f"as they should, but your {AXES[axis]} time is {g} s; expected {e} s. "
                        f"This test pays only when the other times are right too (within "
                        f"{PROPERTY_GATE_REL:.0%}).")
                return Result(False, with_why(text, _recognise_all(values, probes)))
    return Result(True, "An axis of degree 1 sends nothing.")


def public_checks():
    def values(call, probes):
        return values_match(FUNCTION, probes, call, HINT)

    return [
        make_check(EXERCISE, "ex4b_config_70b", 3, FUNCTION, [CONFIG_70B], values,
                   description="a 70e9-parameter model, TP8 x PP4 x DP32, 16 micro-batches"),
        make_check(EXERCISE, "ex4b_config_7b", 3, FUNCTION, [CONFIG_7B], values,
                   description="a 7e9-parameter model, TP4 x PP2 x DP16, 12 micro-batches of 2"),
        make_check(EXERCISE, "ex4b_dp_shard", 3, FUNCTION, DP_PROBES,
                   judge_axis(0, "DP all-reduces, once per step, the bf16 gradients of this GPU's "
                                 "shard, model_params / (tp_degree * pp_degree), with the ring "
                                 "factor 2(n-1)/n of n = dp_degree.",
                              "DP: a ring all-reduce of this GPU's shard of the gradients, once per step."),
                   description="DP: ring all-reduce of one GPU's shard, once per step"),
        make_check(EXERCISE, "ex4b_tp_allreduces", 3, FUNCTION, TP_PROBES,
                   judge_axis(1, "TP all-reduces b*s*h bf16 values four times per layer (two forward, "
                                 "two backward), with the ring factor of n = tp_degree, on the "
                                 "num_layers / pp_degree layers of this GPU's stage, for every "
                                 "micro-batch.",
                              "TP: four ring all-reduces per layer of the stage, per micro-batch."),
                   description="TP: four all-reduces per layer of one stage, per micro-batch"),
        make_check(EXERCISE, "ex4b_pp_sends", 2, FUNCTION, PP_PROBES,
                   judge_axis(2, "The busiest stage sends b*s*h bf16 values per micro-batch: twice "
                                 "(activations forward, gradients back) from an interior stage, "
                                 "once with two stages, never without a pipeline.",
                              "PP: the busiest stage's sends, per micro-batch."),
                   description="PP: the busiest stage's sends, per micro-batch"),
        make_check(EXERCISE, "ex4b_bandwidth_units", 2, FUNCTION, BW_PROBES, judge_bandwidth,
                   description="TP on the intra-node link, DP and PP on the inter-node link, GB/s"),
        make_check(EXERCISE, "ex4b_degree_one", 1, FUNCTION, DEGREE_ONE_PROBES, judge_degree_one,
                   description="an axis of degree 1 sends nothing"),
    ]


#: Pipeline degrees of the hidden configurations, one each: every branch of sends(p) and a
#: degree (3) that divides no power of two.
HIDDEN_PP = (1, 2, 3, 4, 8, 16)


def hidden_checks(rng: random.Random):
    configs = []
    for pp in HIDDEN_PP:
        # Degrees of 2 would make different mistakes give the same number (the ring
        # factor 2(n-1)/n is 1 at n = 2), so start above.
        tp = rng.choice([3, 4, 8])
        # A micro-batch count equal to a degree or to tp * pp would let two mistakes (the
        # gradients all-reduced per micro-batch, or not divided by the model-parallel
        # degrees) give the same number: skip those.
        m = rng.choice([k for k in range(3, 65) if k not in (tp, pp, tp * pp)])
        configs.append([
            10 ** rng.uniform(8, 12),                     # model_params
            rng.randint(3, 512),                          # dp_degree
            tp,                                           # tp_degree
            pp,                                           # pp_degree
            pp * rng.randint(2, 24),                      # num_layers, a multiple of pp
            rng.choice([1024, 2048, 4096, 8192, 32768]),  # seq_len
            rng.randint(1, 8),                            # micro_batch
            m,                                            # num_microbatches
            128 * rng.randint(8, 128),                    # d_model
            round(rng.uniform(100, 1800), 1),             # intra_node_gb_s
            round(rng.uniform(12.5, 90), 2),              # inter_node_gb_s
        ])
    rng.shuffle(configs)
    return [
        make_check(EXERCISE, "ex4b_hidden_random", 8, FUNCTION, configs,
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT),
                   hidden=True, description="random 3D-parallel layouts, shapes and links"),
    ]
