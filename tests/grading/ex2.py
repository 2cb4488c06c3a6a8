"""Checks for Exercise 2: ``compute_optimal(C, ratios=None) -> (N, D, ratio, loss)``, the best
point of a grid of D/N ratios along the iso-FLOP line ``6 N D = C`` (Kaplan et al. 2020,
sec. 2.1, for 6ND; Hoffmann et al. 2022 for the loss being minimised)."""
from __future__ import annotations

import random

from .core import Result
from .framework import (
    collect, fmt_call, fmt_pair, fmt_value, make_check, recognise, recognise_derived, same,
    values_match, with_why,
)

EXERCISE = "ex2"
FUNCTION = "compute_optimal"

HINT = ("for every ratio r on the grid, N = sqrt(C / (6*r)) and D = r*N; evaluate "
        "chinchilla_loss(N, D) and return (N, D, r, loss) of the smallest loss.")

SEVERAL_BUDGETS = [1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25]
CUSTOM = [[1e22, [4.0, 15.0, 60.0, 240.0, 960.0]],
          [1e24, [500.0, 3.0, 90.0, 30.0, 2000.0]]]  # unsorted on purpose


def judge_four_numbers(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="numbers")
    if failed:
        return failed
    for probe, value in zip(probes, values):
        where = fmt_call(FUNCTION, probe.args)
        if len(value) != 4:
            return Result(False, f"{where} returned {len(value)} numbers; return four: "
                                 "(N, D, ratio, loss).")
        if not all(v > 0 for v in value):
            return Result(False, f"{where} returned {fmt_value(value)}; N, D, the ratio and "
                                 "the loss are all positive.")
    return Result(True, f"{fmt_call(FUNCTION, probes[0].args)} returned four positive numbers "
                        "(N, D, ratio, loss).")


def _budget_factor(C):
    return lambda values: 6 * values[0][0] * values[0][1] / C


def judge_on_budget(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="numbers")
    if failed:
        return failed
    for probe, value in zip(probes, values):
        where = fmt_call(FUNCTION, probe.args)
        if len(value) != 4:
            return Result(False, f"{where} returned {fmt_value(value)}; expected (N, D, ratio, loss).")
        N, D, r, _ = value
        C = probe.args[0]
        factor = 6 * N * D / C
        if not same(factor, 1.0):
            why = recognise_derived(factor, [probe], _budget_factor(C), 1.0)
            return Result(False, with_why(
                f"{where} returned N = {fmt_value(N)} and D = {fmt_value(D)}, so "
                f"6*N*D = {factor:.4g} * C; the allocation must spend exactly the budget, "
                "6*N*D = C.", why, HINT))
        if not same(D / N, r):
            return Result(False, f"{where} returned ratio {fmt_value(r)} but D/N = "
                                 f"{fmt_value(D / N)}: the ratio is D/N of the returned point.")
    return Result(True, "The returned N and D satisfy 6*N*D = C and D/N = ratio.")


def _ratio(values):
    return values[0][2]


def judge_custom_ratios(call, probes) -> Result:
    values, failed = collect(call, FUNCTION, probes, want="numbers")
    if failed:
        return failed
    for probe, value in zip(probes, values):
        where = fmt_call(FUNCTION, probe.args)
        if len(value) != 4:
            return Result(False, f"{where} returned {fmt_value(value)}; expected (N, D, ratio, loss).")
        given = probe.args[1]
        expected = probe.expected["value"][2]
        got = value[2]
        if same(got, expected):
            continue
        why = recognise_derived(got, [probe], _ratio, expected)
        if not any(same(got, g) for g in given):
            text = (f"{where} returned ratio {fmt_value(got)}, which is not one of the ratios "
                    f"passed in; the best of them is {fmt_value(expected)}.")
        else:
            text = (f"{where} returned ratio {fmt_value(got)}; the ratio with the lowest loss "
                    f"among those passed in is {fmt_value(expected)}.")
        return Result(False, with_why(text, why, "search exactly the `ratios` you are given, "
                                                 "in any order, and keep the lowest loss."))
    return Result(True, "The search used the `ratios` passed in (sorted or not) and kept the best.")


def judge_values(call, probes) -> Result:
    result = values_match(FUNCTION, probes, call, HINT)
    if result.passed or result.not_implemented:
        return result
    # Say how the loss compares with the grid's best: lower means "not on the grid".
    for probe in probes:
        student = collect(call, FUNCTION, [probe], want="numbers")[0]
        expected = probe.expected.get("value")
        if student and len(student[0]) == 4 and expected and not same(student[0], expected):
            got_loss, best_loss = student[0][3], expected[3]
            if got_loss < best_loss and not same(got_loss, best_loss) and "Why:" not in result.feedback:
                g, e = fmt_pair(got_loss, best_loss)
                return Result(False, result.feedback + f"\nYour loss {g} is below the best grid "
                                                       f"point's {e}: is your answer on the grid?")
            break
    return result


def public_checks():
    return [
        make_check(EXERCISE, "ex2_returns_four_numbers", 2, FUNCTION, [[1e21]],
                   judge_four_numbers, description="returns (N, D, ratio, loss)"),
        make_check(EXERCISE, "ex2_on_budget", 3, FUNCTION, [[1e20], [1e23]],
                   judge_on_budget, description="6*N*D equals the budget C"),
        make_check(EXERCISE, "ex2_grid_minimum", 3, FUNCTION, [[1e22]], judge_values,
                   description="the best point of the default grid at C = 1e22"),
        make_check(EXERCISE, "ex2_custom_ratios", 3, FUNCTION, CUSTOM, judge_custom_ratios,
                   description="honours a custom `ratios` grid"),
        make_check(EXERCISE, "ex2_several_budgets", 3, FUNCTION, [[c] for c in SEVERAL_BUDGETS],
                   judge_values, description="budgets from 1e19 to 1e25 FLOPs"),
    ]


def hidden_checks(rng: random.Random):
    budgets = [[10 ** rng.uniform(18, 26)] for _ in range(5)]
    with_ratios = []
    for _ in range(3):
        # For budgets up to 1e26 the optimal ratio stays below about 150 (Exercise 2's
        # constants), and the loss along the budget line has a single minimum in log(r). A
        # ratio in [170, 700] below the last one therefore always beats the last one: the
        # best point is never simply the end of the list.
        ratios = [10 ** rng.uniform(-0.3, 2.9) for _ in range(rng.randint(2, 7))]
        ratios += [10 ** rng.uniform(2.23, 2.84), 10 ** rng.uniform(2.9, 3.3)]
        with_ratios.append([10 ** rng.uniform(18, 26), sorted(ratios)])
    return [
        make_check(EXERCISE, "ex2_hidden_budgets", 3, FUNCTION, budgets, judge_values,
                   hidden=True, description="random budgets, default grid"),
        make_check(EXERCISE, "ex2_hidden_ratios", 3, FUNCTION, with_ratios, judge_values,
                   hidden=True, description="random budgets and random ratio grids"),
    ]
