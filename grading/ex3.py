"""Checks for Exercise 3: ``memory_per_gpu(model_params, strategy, num_gpus)`` in bytes, at the
chapter's 12 bytes per parameter (bf16 weights and gradients, fp32 Adam moments;
Micikevicius et al. 2018 for mixed precision): 'dp' keeps it all on every GPU, 'tp', 'pp'
and 'fsdp' split it evenly (the chapter's first approximation), anything else raises
ValueError."""
from __future__ import annotations

import random

from .core import Result
from .framework import (
    attempt, collect, fmt_call, fmt_pair, gate, make_check, recognise, same, values_match, with_why,
)

EXERCISE = "ex3"
FUNCTION = "memory_per_gpu"
SHARDED = ("tp", "pp", "fsdp")
STRATEGIES = ("dp",) + SHARDED

HINT_BYTES = ("on one GPU every strategy holds the full model state: 12 bytes per parameter "
              "(2 bf16 weights + 2 bf16 gradients + 8 fp32 Adam moments), returned in bytes.")


UNKNOWN_HINT = "check `strategy` and raise ValueError('strategy must be one of ...') for anything else."


def judge_unknown_strategy(call, probes) -> Result:
    """An unknown strategy raises ValueError. A NotImplementedError there is "not implemented
    yet" only where the function is still the stub: where it answers for a known strategy,
    that NotImplementedError is the wrong exception, and the feedback says so."""
    result = values_match(FUNCTION, probes, call, UNKNOWN_HINT, ok_text="An unknown strategy raises ValueError.")
    if result.passed or not result.not_implemented or "value" not in attempt(call, [7e9, "dp", 8]):
        return result
    return Result(False, f"{fmt_call(FUNCTION, probes[0].args)} raised NotImplementedError, although "
                         f"`{FUNCTION}` is implemented: an unknown strategy should raise ValueError. "
                         f"Hint: {UNKNOWN_HINT}")


def judge_same_as_first(what: str):
    """All probes must give the student's own first value (a relation, not a constant)."""
    def judge(call, probes) -> Result:
        values, failed = collect(call, FUNCTION, probes, want="positive")
        if failed:
            return failed
        for probe, value in zip(probes[1:], values[1:]):
            if not same(value, values[0]):
                g, f = fmt_pair(value, values[0])
                text = (f"{fmt_call(FUNCTION, probe.args)} returned {g}, but "
                        f"{fmt_call(FUNCTION, probes[0].args)} returned {f}: {what}")
                return Result(False, with_why(text, recognise({"value": value}, probe)))
        failed = gate(FUNCTION, probes, values, "The memory is the same for every GPU count")
        if failed:
            return failed
        return Result(True, f"The same memory per GPU for every GPU count tried: {what}")
    return judge


def judge_divides(call, probes) -> Result:
    """Probes come in groups (strategy on 1 GPU, then on g GPUs): value(g) * g == value(1)."""
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    base = {}
    for probe, value in zip(probes, values):
        N, strategy, g = probe.args
        if g == 1:
            base[strategy] = value
            continue
        if not same(value * g, base[strategy]):
            g_text, e_text = fmt_pair(value, base[strategy] / g)
            text = (f"{fmt_call(FUNCTION, probe.args)} returned {g_text}; {strategy!r} splits the "
                    f"state evenly, so expected your one-GPU value divided by {g}: {e_text}.")
            return Result(False, with_why(text, recognise({"value": value}, probe)))
    failed = gate(FUNCTION, probes, values, "The memory divides by the number of GPUs")
    if failed:
        return failed
    return Result(True, "TP, PP and FSDP divide the one-GPU memory by the number of GPUs.")


def judge_fsdp_vs_dp(call, probes) -> Result:
    """Pairs (fsdp on g GPUs, dp on g GPUs): FSDP x GPUs == DP, the exercise's verification."""
    values, failed = collect(call, FUNCTION, probes, want="positive")
    if failed:
        return failed
    for i in range(0, len(probes), 2):
        fsdp, dp = values[i], values[i + 1]
        g = probes[i].args[2]
        if not same(fsdp * g, dp):
            g_text, e_text = fmt_pair(fsdp * g, dp)
            text = (f"{fmt_call(FUNCTION, probes[i].args)} x {g} = {g_text}, but "
                    f"{fmt_call(FUNCTION, probes[i + 1].args)} = {e_text}: FSDP on {g} GPUs "
                    "should hold exactly 1/num_gpus of what DP holds per GPU.")
            why = (recognise({"value": fsdp}, probes[i])
                   or recognise({"value": dp}, probes[i + 1]))
            return Result(False, with_why(text, why))
    failed = gate(FUNCTION, probes, values, "FSDP x GPUs equals DP")
    if failed:
        return failed
    return Result(True, "FSDP memory x number of GPUs equals DP memory per GPU.")


def public_checks():
    return [
        make_check(EXERCISE, "ex3_bytes_per_param", 5, FUNCTION,
                   [[7e9, s, 1] for s in STRATEGIES] + [[1.3e8, "dp", 1], [7e10, "fsdp", 1]],
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT_BYTES),
                   description="12 bytes per parameter on one GPU, in bytes"),
        make_check(EXERCISE, "ex3_dp_replicates", 4, FUNCTION,
                   [[7e9, "dp", g] for g in (1, 8, 64, 1024)],
                   judge_same_as_first("data parallelism keeps a full replica on every GPU."),
                   description="DP memory does not depend on the number of GPUs"),
        make_check(EXERCISE, "ex3_sharded_divide", 5, FUNCTION,
                   [[7e9, s, g] for s in SHARDED for g in (1, 8, 64)],
                   judge_divides, description="TP, PP and FSDP divide by the number of GPUs"),
        make_check(EXERCISE, "ex3_fsdp_times_gpus_equals_dp", 3, FUNCTION,
                   [[n, s, g] for n, g in ((7e9, 8), (7e10, 1024)) for s in ("fsdp", "dp")],
                   judge_fsdp_vs_dp, description="FSDP x GPUs == DP"),
        make_check(EXERCISE, "ex3_unknown_strategy", 4, FUNCTION,
                   [[7e9, "zero", 8], [7e9, "expert", 8]], judge_unknown_strategy,
                   description="an unknown strategy raises ValueError"),
    ]


GPU_COUNTS = [2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 96, 128, 256, 512, 1024, 2048]


def hidden_checks(rng: random.Random):
    probes = []
    for strategy in STRATEGIES:  # every strategy, several times: no mistake can hide
        for _ in range(3):
            g = rng.choice(GPU_COUNTS)
            # A whole number of parameters that num_gpus divides (the reference checks it).
            k = rng.randint(-(-10**8 // g), 10**12 // g)
            probes.append([float(g * k), strategy, g])
    rng.shuffle(probes)
    return [
        make_check(EXERCISE, "ex3_hidden_random", 9, FUNCTION, probes,
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT_BYTES),
                   hidden=True, description="random model sizes, strategies and GPU counts"),
    ]
