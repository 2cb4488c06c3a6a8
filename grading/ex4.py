"""Checks for Exercise 4, part (a): ``communication_time_per_step(model_params, dp_rank, tp_rank,
num_layers, seq_len, batch_size, d_model, bandwidth_tb_s)``, the exercise's first estimate:

    dp_volume = 2 * (2 * model_params)                       # fp16 gradients, all-reduce x2
    tp_volume = num_layers * 2 * (2 * batch_size * seq_len * d_model)
    seconds   = (dp_volume + tp_volume) / (bandwidth_tb_s * 1e12)

(The refinements, the ring factor 2(n-1)/n of the nccl-tests "bus bandwidth", the shard of
the gradients, Megatron's four all-reduces per layer, Shoeybi et al. 2019, and the pipeline's
sends, are part (b), :mod:`grading.ex4b`, not this estimate.)

One answer mixes volume and unit conversion multiplicatively, so the volume checks and the
bandwidth check split the blame: a factor that is a plain unit slip (1000, 8, 1e12, 1/1000)
is charged to the bandwidth check only, and a known volume slip (:mod:`grading.mistakes`) to
the volume checks only. Any other factor fails the volume checks and the bandwidth check
too: the bandwidth check pays only times that are right (within ``PROPERTY_GATE_REL``) or
off by a known slip, so that a function that only scales as 1 / bandwidth earns nothing.
"""
from __future__ import annotations

import random

from .core import Result
from .framework import (
    PROPERTY_GATE_REL, same_outcome, collect, fmt_call, fmt_pair, fmt_value, gate, make_check, recognise, recognise_derived, same,
    values_match, why_of, with_why,
)

EXERCISE = "ex4"
FUNCTION = "communication_time_per_step"
TB = 1e12  # bytes per second in one TB/s

HINT = ("follow the exercise's estimate term by term: DP volume 2*(2*model_params) bytes, "
        "TP volume num_layers * 2*(2*batch_size*seq_len*d_model) bytes, divided by "
        "bandwidth_tb_s * 1e12 bytes/s.")

UNIT_SLIPS = {1e3: "1000 times too large", 1e-3: "1000 times too small",
              8.0: "8 times too large", 1e12: "1e12 times too large"}


def unit_slip(factor: float) -> float | None:
    for u in UNIT_SLIPS:
        if same(factor, u, 1e-6):
            return u
    return None


# model_params, dp_rank, tp_rank, num_layers, seq_len, batch_size, d_model, bandwidth_tb_s
CONFIG_7B = [7e9, 16, 4, 32, 4096, 4, 4096, 0.45]
CONFIG_70B = [70e9, 64, 8, 80, 4096, 1, 8192, 0.9]
DP_PROBES = [[p, 8, 4, 32, 2048, 1, 1024, 0.5] for p in (1e9, 3e9, 1.3e10)]
SHAPES = [(1, 2048, 1024), (4, 2048, 1024), (1, 8192, 1024), (1, 2048, 4096)]
TP_PROBES = [[1e8, 8, 4, layers, s, b, d, 0.5] for (b, s, d) in SHAPES for layers in (8, 16)]
BW_PROBES = [[1e9, 8, 4, 1, 128, 1, 128, bw] for bw in (0.05, 0.45, 0.9)]
DEGREE_PROBES = [[7e9, dp, tp, 32, 4096, 4, 4096, 0.45]
                 for dp, tp in ((1, 1), (8, 1), (8, 8), (64, 4), (512, 8))]


def _dp_bytes_per_param(values):
    """Slope of time against model_params, in bytes per parameter (at the probes' bandwidth)."""
    (p0, p1, p2), bw = (a[0] for a in DP_PROBES), DP_PROBES[0][7]
    return [(values[1] - values[0]) * bw * TB / (p1 - p0),
            (values[2] - values[0]) * bw * TB / (p2 - p0)]


def judge_dp_volume(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    got = _dp_bytes_per_param(values)
    expected = _dp_bytes_per_param([p.expected["value"] for p in probes])[0]
    where = (f"{fmt_call(FUNCTION, probes[0].args)} and the same call with model_params = "
             f"{fmt_value(probes[1].args[0])}")
    if not same(got[0], got[1], 1e-6):
        return Result(False, f"Your time does not grow in proportion to model_params "
                             f"({fmt_value(got[0])} vs {fmt_value(got[1])} bytes per extra "
                             "parameter between calls): the DP volume is a fixed number of "
                             "bytes per parameter.")
    factor = got[0] / expected
    if same(factor, 1.0, 1e-6):
        return Result(True, f"The DP term moves {fmt_value(expected)} bytes per parameter.")
    slip = unit_slip(factor)
    if slip is not None:
        return Result(True, f"The DP term has the right {fmt_value(expected)} bytes per parameter, "
                            f"but all your times are {UNIT_SLIPS[slip]} (see ex4_bandwidth_units).")
    why = recognise_derived(got[0], probes, lambda v: _dp_bytes_per_param(v)[0], expected)
    return Result(False, with_why(
        f"From {where}, your DP term moves {fmt_value(got[0])} bytes per parameter; the "
        f"exercise's estimate moves {fmt_value(expected)} (fp16 gradients, 2 bytes, "
        "all-reduced with factor 2).", why, HINT))


def _tp_bytes_per_element(values):
    """Per extra layer, bytes per activation element b*s*d, for each shape."""
    out = []
    for i, (b, s, d) in enumerate(SHAPES):
        t8, t16 = values[2 * i], values[2 * i + 1]
        layers8, layers16 = TP_PROBES[2 * i][3], TP_PROBES[2 * i + 1][3]
        bw = TP_PROBES[2 * i][7]
        out.append((t16 - t8) * bw * TB / ((layers16 - layers8) * b * s * d))
    return out


def _recognise_all(values, probes) -> str | None:
    """The explanation of the one known mistake that reproduces every probe's value."""
    whys = {recognise({"value": v}, p) for v, p in zip(values, probes)}
    return whys.pop() if len(whys) == 1 else None


def _no_tp_term(values) -> bool:
    """The times at 8 layers are the same for every activation shape: no TP term at all
    (a TP term that is there but not multiplied by num_layers still grows with the shape)."""
    at_8_layers = values[0::2]
    return all(same(v, at_8_layers[0], 1e-9) for v in at_8_layers[1:])


def judge_tp_volume(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    got = _tp_bytes_per_element(values)
    expected = _tp_bytes_per_element([p.expected["value"] for p in probes])[0]
    why = _recognise_all(values, probes) or recognise_derived(
        got[0], probes, lambda v: _tp_bytes_per_element(v)[0], expected)
    if same(got[0], 0.0) or abs(got[0]) < 1e-9 * expected:
        # No growth per layer: either no TP term at all, or one not multiplied by num_layers.
        # The values tell the two apart (not the first mistake whose slope is also zero).
        if _no_tp_term(values):
            return Result(False, with_why(
                "Your time changes with neither num_layers nor batch_size * seq_len * d_model: "
                "there is no TP term. Each layer all-reduces its activations, 2 * (2 * "
                "batch_size * seq_len * d_model) bytes, num_layers times.",
                _recognise_all(values, probes) or why_of("ex4_tp_missing"), HINT))
        return Result(False, with_why(
            "Your time does not change when num_layers goes from 8 to 16: the TP volume is "
            "per layer.", _recognise_all(values, probes) or why_of("ex4_tp_not_per_layer"), HINT))
    for (b, s, d), g in zip(SHAPES[1:], got[1:]):
        if not same(g, got[0], 1e-6):
            return Result(False, f"Your TP term per layer is not proportional to "
                                 f"batch_size * seq_len * d_model: {fmt_value(got[0])} bytes per "
                                 f"element at (batch_size, seq_len, d_model) = {SHAPES[0]}, "
                                 f"{fmt_value(g)} at {(b, s, d)}.")
    factor = got[0] / expected
    if same(factor, 1.0, 1e-6):
        return Result(True, f"The TP term moves {fmt_value(expected)} bytes per activation "
                            "element per layer (two fp16 all-reduces).")
    slip = unit_slip(factor)
    if slip is not None:
        return Result(True, f"The TP term has the right {fmt_value(expected)} bytes per element per "
                            f"layer, but all your times are {UNIT_SLIPS[slip]} (see ex4_bandwidth_units).")
    return Result(False, with_why(
        f"Your TP term moves {fmt_value(got[0])} bytes per activation element "
        f"(batch_size * seq_len * d_model) per layer; the exercise's estimate moves "
        f"{fmt_value(expected)}: 2 bytes (fp16) x 2 all-reduces.", why, HINT))


def judge_bandwidth(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    factors = [v / p.expected["value"] for v, p in zip(values, probes)]
    for p, f in zip(probes[1:], factors[1:]):
        if not same(f, factors[0], 1e-6):
            return Result(False, f"{fmt_call(FUNCTION, p.args)}: your time is not inversely "
                                 "proportional to the bandwidth. Time = bytes / (bytes per second).")
    slip = unit_slip(factors[0])
    if slip is not None:
        why = recognise({"value": values[0]}, probes[0])
        g, e = fmt_pair(values[0], probes[0].expected["value"])
        return Result(False, with_why(
            f"{fmt_call(FUNCTION, probes[0].args)} returned {g} s; expected {e} s: your times "
            f"are {UNIT_SLIPS[slip]}.", why,
            "bandwidth_tb_s is in TB/s, that is bandwidth_tb_s * 1e12 bytes per second; return seconds."))
    if same(factors[0], 1.0):
        return Result(True, "Times are in seconds, with TB/s converted to 1e12 bytes/s, and "
                            "inversely proportional to the bandwidth.")
    if abs(factors[0] - 1.0) <= PROPERTY_GATE_REL or _a_known_volume_slip(values, probes):
        return Result(True, "Your times are inversely proportional to the bandwidth and the unit "
                            "conversion looks right (the volumes are checked separately).")
    g, e = fmt_pair(values[0], probes[0].expected["value"])
    return Result(False, f"{fmt_call(FUNCTION, probes[0].args)} returned {g} s; expected {e} s. "
                         "Your times are inversely proportional to the bandwidth, but this test "
                         f"pays only when the times are right too (within {PROPERTY_GATE_REL:.0%}), "
                         "or off only by a known slip in a volume, which the volume tests charge.")


#: Mistakes that change the bytes, not the unit: the bandwidth test still pays them.
def _a_known_volume_slip(values, probes) -> bool:
    for mistake_id in probes[0].mistakes:
        if mistake_id.startswith("ex4_bandwidth"):
            continue
        if all(same_outcome({"value": v}, p.mistakes.get(mistake_id, {}), 1e-6)
               for v, p in zip(values, probes)):
            return True
    return False


def judge_degrees(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    for probe, value in zip(probes[1:], values[1:]):
        if not same(value, values[0]):
            g, f = fmt_pair(value, values[0])
            text = (f"{fmt_call(FUNCTION, probe.args)} returned {g} but with dp_rank = tp_rank = 1 "
                    f"it returned {f}. The exercise's first estimate does not use the parallel "
                    "degrees; how they change the traffic is part (b).")
            return Result(False, with_why(text, recognise({"value": value}, probe)))
    failed = gate(FUNCTION, probes, values, "The time does not depend on the degrees",
                  factors=(1.0, *UNIT_SLIPS))  # a unit slip is charged to ex4_bandwidth_units
    if failed:
        return failed
    return Result(True, "As in the exercise's first estimate, the result does not depend on "
                        "dp_rank and tp_rank.")


def public_checks():
    def values(call, probes):
        return values_match(FUNCTION, probes, call, HINT)

    return [
        make_check(EXERCISE, "ex4_config_7b", 2, FUNCTION, [CONFIG_7B], values,
                   description="a 7e9-parameter model, DP 16 x TP 4"),
        make_check(EXERCISE, "ex4_config_70b", 2, FUNCTION, [CONFIG_70B], values,
                   description="a 70e9-parameter model, DP 64 x TP 8"),
        make_check(EXERCISE, "ex4_dp_volume", 2, FUNCTION, DP_PROBES, judge_dp_volume,
                   description="DP volume: bytes per parameter"),
        make_check(EXERCISE, "ex4_tp_volume", 2, FUNCTION, TP_PROBES, judge_tp_volume,
                   description="TP volume: bytes per activation element per layer"),
        make_check(EXERCISE, "ex4_bandwidth_units", 2, FUNCTION, BW_PROBES, judge_bandwidth,
                   description="TB/s converted to bytes/s; result in seconds"),
        make_check(EXERCISE, "ex4_ignores_degrees", 1, FUNCTION, DEGREE_PROBES, judge_degrees,
                   description="the first estimate does not depend on dp_rank, tp_rank"),
    ]


def hidden_checks(rng: random.Random):
    configs = []
    for _ in range(6):
        configs.append([
            10 ** rng.uniform(8, 12),                           # model_params
            # Degrees of 2 would make different mistakes give the same number (the ring
            # factor 2(n-1)/n is 1 at n = 2, like dividing by tp = 2), so start above.
            rng.randint(3, 1024),                               # dp_rank (a degree)
            rng.choice([4, 8]),                                 # tp_rank (a degree)
            rng.randint(12, 128),                               # num_layers
            rng.choice([1024, 2048, 4096, 8192, 32768]),        # seq_len
            rng.randint(1, 16),                                 # batch_size
            128 * rng.randint(8, 128),                          # d_model
            round(rng.uniform(0.025, 1.8), 4),                  # bandwidth_tb_s
        ])
    return [
        make_check(EXERCISE, "ex4_hidden_random", 4, FUNCTION, configs,
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT),
                   hidden=True, description="random 3D-parallel configurations"),
    ]
