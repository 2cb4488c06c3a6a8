"""Checks for Exercise 1: ``chinchilla_loss(N, D) = E + A / N**ALPHA + B / D**BETA`` with the
exercise's constants E, A, B = 1.69, 406.0, 410.0 and ALPHA, BETA = 0.34, 0.28
(Hoffmann et al. 2022, eq. 2, with A and B rounded as the exercise states)."""
from __future__ import annotations

import random

from .core import Result
from .framework import (
    attempt, call_failure, collect, fmt_call, fmt_pair, fmt_value, gate, make_check, recognise, same,
    values_match, with_why,
)

EXERCISE = "ex1"
FUNCTION = "chinchilla_loss"

HINT = ("use exactly E, A, B = 1.69, 406.0, 410.0 and ALPHA, BETA = 0.34, 0.28, with "
        "alpha on the N term and beta on the D term.")

N_GRID = [1e6, 1e7, 1e8, 1e9, 7e9, 7e10, 1.75e11, 5e11, 1e12, 1e13]
D_GRID = [1e8, 1e9, 1e10, 1e11, 3e11, 1.4e12, 5e12, 1.5e13, 1e14]
VECTOR_N = [1e8, 7e9, 7e10, 1.75e11, 5.4e11]
VECTOR_D = [2e9, 1.4e11, 1.4e12, 3e11, 7.8e11]


def judge_decreasing(variable: str):
    def judge(call, probes) -> Result:
        values, failed = collect(call, FUNCTION, probes)
        if failed:
            return failed
        index = 0 if variable == "N" else 1
        failed = gate(FUNCTION, probes, values, f"The loss falls as {variable} grows")
        for i in range(len(values) - 1):
            if not values[i + 1] < values[i]:
                a, b = probes[i].args, probes[i + 1].args
                text = (f"{fmt_call(FUNCTION, a)} = {fmt_value(values[i])} but "
                        f"{fmt_call(FUNCTION, b)} = {fmt_value(values[i + 1])}: the loss must "
                        f"fall as {variable} grows from {fmt_value(a[index])} to {fmt_value(b[index])}.")
                why = recognise({"value": values[i + 1]}, probes[i + 1])
                return Result(False, with_why(text, why))
        if failed:
            return failed
        fixed = "D" if variable == "N" else "N"
        return Result(True, f"The loss falls strictly as {variable} grows from "
                            f"{fmt_value(probes[0].args[index])} to {fmt_value(probes[-1].args[index])} "
                            f"({len(values)} values, {fixed} = {fmt_value(probes[0].args[1 - index])}).")
    return judge


def judge_vectorised(call, probes) -> Result:
    """One call with arrays must equal the student's own scalar calls, element by element."""
    array_probe, scalar_probes = probes[0], probes[1:]
    scalars, failed = collect(call, FUNCTION, scalar_probes)
    if failed:
        return failed
    where = fmt_call(FUNCTION, array_probe.args)
    student = attempt(call, array_probe.args)
    if "value" not in student:
        failed = call_failure(FUNCTION, array_probe.args, student)
        text = f"With numpy arrays for N and D: {failed.feedback}"
        return Result(False, with_why(text, recognise(student, array_probe),
                                      "write the formula with numpy operations only."))
    got = student["value"]
    n = len(scalars)
    if type(got) is not list or len(got) != n:
        return Result(False, f"{where} returned {fmt_value(got)}; expected an array of {n} "
                             "losses, one per (N, D) pair.")
    for i, (g, s) in enumerate(zip(got, scalars)):
        if not same(g, s):
            gs, ss = fmt_pair(g, s)
            return Result(False, f"{where}: element {i} is {gs}, but "
                                 f"{fmt_call(FUNCTION, scalar_probes[i].args)} returns {ss}.")
    failed = gate(FUNCTION, scalar_probes, scalars, "It works on arrays")
    if failed:
        return failed
    return Result(True, f"{where} returned the {n} losses of the scalar calls.")


def public_checks():
    return [
        make_check(EXERCISE, "ex1_gpt3", 2, FUNCTION, [[175e9, 300e9]],
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT),
                   description="GPT-3: 175e9 parameters, 300e9 tokens (2.002)"),
        make_check(EXERCISE, "ex1_chinchilla", 2, FUNCTION, [[70e9, 1.4e12]],
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT),
                   description="Chinchilla: 70e9 parameters, 1.4e12 tokens (1.936)"),
        make_check(EXERCISE, "ex1_decreasing_in_n", 1, FUNCTION, [[n, 1.4e12] for n in N_GRID],
                   judge_decreasing("N"), description="(a) the loss falls as N grows"),
        make_check(EXERCISE, "ex1_decreasing_in_d", 1, FUNCTION, [[70e9, d] for d in D_GRID],
                   judge_decreasing("D"), description="(b) the loss falls as D grows"),
        make_check(EXERCISE, "ex1_vectorised", 1, FUNCTION,
                   [[VECTOR_N, VECTOR_D]] + [[n, d] for n, d in zip(VECTOR_N, VECTOR_D)],
                   judge_vectorised, description="works on numpy arrays of N and D"),
    ]


def hidden_checks(rng: random.Random):
    # Sizes over ten decades each, from a toy model to far beyond any trained so far.
    pairs = [[10 ** rng.uniform(5, 15), 10 ** rng.uniform(6, 16)] for _ in range(10)]
    return [
        make_check(EXERCISE, "ex1_hidden_random", 3, FUNCTION, pairs,
                   lambda call, probes: values_match(FUNCTION, probes, call, HINT),
                   hidden=True, description="random model and data sizes"),
    ]
