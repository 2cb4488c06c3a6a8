"""Checks for Exercise 2: ``compute_optimal(C, ratios=None) -> (N, D, ratio, loss)``, the best
point of a grid of D/N ratios along the iso-FLOP line ``6 N D = C`` (Kaplan et al. 2020,
sec. 2.1, for 6ND; Hoffmann et al. 2022 for the loss being minimised).

Exercise 2 is graded on its own: the student's ``compute_optimal`` calls their own
``chinchilla_loss``, so an answer is accepted when it is the grid's best point under the
exercise's loss *or* under the student's own Exercise 1 (the feedback then says that
Exercise 1 changes the answer). A mistake in Exercise 1 is charged to Exercise 1 only."""
from __future__ import annotations

import random

import math

from .core import Regrade, Result, SubmissionError
from .framework import (
    REL_TOL, attempt, collect, fmt_call, fmt_pair, fmt_value, gate, keep_answer, make_check, other_call, pattern, recognise_derived, same, values_match, with_why,
)

EXERCISE = "ex2"
FUNCTION = "compute_optimal"

HINT = ("for every ratio r on the grid, N = sqrt(C / (6*r)) and D = r*N; evaluate "
        "chinchilla_loss(N, D) and return (N, D, r, loss) of the smallest loss.")

SEVERAL_BUDGETS = [1e19, 1e20, 1e21, 1e22, 1e23, 1e24, 1e25]
CUSTOM = [[1e22, [4.0, 15.0, 60.0, 240.0, 960.0]],
          [1e24, [500.0, 3.0, 90.0, 30.0, 2000.0]],  # unsorted on purpose
          [1e22, [960.0, 4.0, 240.0, 15.0, 60.0]],  # the best ratio last
          [1e23, [60.0]]]  # a single ratio
#: The exercise's default grid: np.logspace(-1, 3.3, 200), as the exercise text states.
GRID = (-1.0, 3.3, 200)
#: Grid sizes a student may have typed instead of 200 (recognised to say so).
OTHER_GRID_SIZES = (199, 201, 100, 1000, 2000, 20, 50, 500, 400, 300, 150, 250)


#: Exercise 1's loss as the exercise states it (the constants of ex1.HINT), which the grader
#: puts in place of a student's wrong chinchilla_loss to grade Exercise 2 on its own
#: (autograde.grade); test_independent checks it equals independent.chinchilla_loss.
EXERCISE_LOSS = (1.69, 406.0, 410.0, 0.34, 0.28)  # E, A, B, ALPHA, BETA


def exercise_loss_source() -> str:
    """``chinchilla_loss`` as code, from :data:`EXERCISE_LOSS`."""
    E, A, B, alpha, beta = EXERCISE_LOSS
    return f"def chinchilla_loss(N, D):\n    return {E!r} + {A!r} / N**{alpha!r} + {B!r} / D**{beta!r}\n"


def logspace(start: float, stop: float, num: int) -> list:
    """``np.logspace`` as a list of plain floats."""
    import numpy as np

    return [float(x) for x in np.logspace(start, stop, num)]


def _grid_points(C: float, ratios) -> tuple:
    Ns = [math.sqrt(C / (6 * r)) for r in ratios]
    return Ns, [r * N for r, N in zip(ratios, Ns)]


def _best_ratio(C: float, ratios) -> float:
    """The ratio of ``ratios`` whose grid point has the least loss under the exercise's
    :data:`EXERCISE_LOSS` (the first of equals, as a loop that keeps a point only when its
    loss is lower finds it)."""
    E, A, B, alpha, beta = EXERCISE_LOSS
    Ns, Ds = _grid_points(C, ratios)
    losses = [E + A / N**alpha + B / D**beta for N, D in zip(Ns, Ds)]
    return ratios[losses.index(min(losses))]


def _student_losses(loss_call, Ns, Ds):
    """The student's chinchilla_loss on every grid point: one call with arrays, else one
    call per point; None if it cannot answer."""
    try:
        values = loss_call(Ns, Ds)
        if type(values) is list and len(values) == len(Ns) and all(type(v) is float for v in values):
            return values
    except SubmissionError:
        pass
    values = []
    for N, D in zip(Ns, Ds):  # stop at the first call that does not give a number
        try:
            value = loss_call(N, D)
        except SubmissionError:
            return None
        if type(value) is not float or not math.isfinite(value):
            return None
        values.append(value)
    return values


#: Relative jitter of the points at which the student's loss is asked again: far below the
#: grid's 4.4% step between ratios, far above float rounding.
JITTER = 1e-6


def _honest_minimum(loss_call, Ns, Ds, losses, i) -> bool:
    """Whether the grid's best point ``i`` under the student's loss is a property of the loss,
    not of the question: the loss must have one strict minimum there (a constant loss makes
    any point "best"), and asked again at the points moved off the line by a random jitter,
    in a shuffled order (nothing left to recognise), it must put the minimum at the same
    point and agree with its own values on the grid."""
    if len(losses) > 1 and not max(losses) - losses[i] > 1e-6 * abs(losses[i]):
        return False  # constant along the line: any point would be "best"
    rng = random.Random()
    order = list(range(len(Ns)))
    rng.shuffle(order)
    jN = [Ns[k] * (1 + rng.uniform(-JITTER, JITTER)) for k in order]
    jD = [Ds[k] * (1 + rng.uniform(-JITTER, JITTER)) for k in order]
    moved = _student_losses(loss_call, jN, jD)
    if moved is None:
        return False
    again = [0.0] * len(order)
    for position, k in enumerate(order):
        again[k] = moved[position]
    if not again[i] <= min(again) + 1e-5 * abs(min(again)):  # near-ties may swap
        return False
    return all(abs(a - b) <= 1e-4 * max(abs(b), 1e-300) for a, b in zip(again, losses))


def _is_the_exercise_loss(loss_call, rng) -> bool:
    """Whether the student's loss equals the exercise's at random (N, D) far from any grid: then
    a different best point on the grid is the loss recognising the question, not a slip in
    Exercise 1, and earns nothing here."""
    E, A, B, alpha, beta = EXERCISE_LOSS
    for _ in range(8):
        N, D = 10 ** rng.uniform(6, 13), 10 ** rng.uniform(8, 15)
        try:
            value = loss_call(N, D)
        except SubmissionError:
            return False
        expected = E + A / N ** alpha + B / D ** beta
        if type(value) is not float or not abs(value - expected) <= 1e-9 * expected:
            return False
    return True


#: A loss within this relative difference of the exercise's (at random points), and falling
#: in N and in D, is "a slip" of Exercise 1 (swapped exponents are up to 80% off at the
#: sizes tried); anything else is "far".
SLIP_REL = 1.0


def own_loss_kind(call) -> str:
    """"slip" if the student's chinchilla_loss is near the exercise's and falls in N and in D
    at 16 fresh random points (nothing to recognise), else "far" (see Result.condition and REGRADE below)."""
    cache = call.__dict__
    if "_own_kind" not in cache:
        loss_call, kind = other_call(call, "chinchilla_loss"), "slip"
        E, A, B, alpha, beta = EXERCISE_LOSS
        rng = random.Random()
        for _ in range(16) if loss_call is not None else ():
            N, D = 10 ** rng.uniform(7, 13), 10 ** rng.uniform(8, 15)
            try:
                here, more_n, more_d = (loss_call(N, D), loss_call(1.5 * N, D), loss_call(N, 1.5 * D))
            except SubmissionError:
                kind = "far"
                break
            expected = E + A / N ** alpha + B / D ** beta
            if not (all(type(v) is float and math.isfinite(v) for v in (here, more_n, more_d))
                    and abs(here - expected) <= SLIP_REL * expected and more_n < here and more_d < here):
                kind = "far"
                break
        cache["_own_kind"] = kind if loss_call is not None else "far"
    return cache["_own_kind"]


def own_loss_answer(call, C: float, ratios=None, num: int | None = None):
    """The grid's best (N, D, r, loss) under the student's own ``chinchilla_loss``; None when
    it is not available (e.g. it raises). ``num``: another size of the default grid."""
    loss_call = other_call(call, "chinchilla_loss")
    if loss_call is None:
        return None
    cache = call.__dict__.setdefault("_own_answers", {})
    key = (C, tuple(ratios) if ratios is not None else None, num)
    if key not in cache:
        grid = logspace(GRID[0], GRID[1], num or GRID[2]) if ratios is None else list(ratios)
        Ns, Ds = _grid_points(C, grid)
        losses = _student_losses(loss_call, Ns, Ds)
        best = None
        if losses is not None and _is_the_exercise_loss(loss_call, random.Random()):
            # then a different best point is the loss recognising the question: the answer
            # under "its" loss is the exercise's
            E, A, B, alpha, beta = EXERCISE_LOSS
            losses = [E + A / N ** alpha + B / D ** beta for N, D in zip(Ns, Ds)]
        if losses is not None:
            i = min(range(len(grid)), key=lambda k: (losses[k], k))  # the first on a tie
            if _honest_minimum(loss_call, Ns, Ds, losses, i):
                best = [Ns[i], Ds[i], grid[i], losses[i]]
        cache[key] = best
    return cache[key]


def _own_args(probe):
    return probe.args[0], (probe.args[1] if len(probe.args) > 1 else None)


def _own_note(call, probe, value) -> str | None:
    """A note when ``value`` is the right search under the student's own (different) loss."""
    own = own_loss_answer(call, *_own_args(probe))
    if own is None or not same(value, own) or same(own, probe.expected["value"]):
        return None
    g, e = fmt_pair(own[3], probe.expected["value"][3])
    return (f"{fmt_call(FUNCTION, probe.args)}: your search is right for your own "
            f"chinchilla_loss, so it earns these points; with the exercise's loss the best "
            f"point has loss {e} (yours: {g}). Fixing Exercise 1 will change this answer.")


def _more_about_failure(call, probe, result: Result) -> Result:
    """Name the real cause where we can: a wrong grid size, or Exercise 1's function raising."""
    student = attempt(call, probe.args)
    C, ratios = _own_args(probe)
    if "raises" in student:
        loss_call = other_call(call, "chinchilla_loss")
        if loss_call is not None:
            Ns, Ds = _grid_points(C, logspace(*GRID) if ratios is None else ratios)
            outcome = attempt(loss_call, [Ns, Ds])
            if outcome.get("raises") == student["raises"] and "inside your `chinchilla_loss`" not in result.feedback:
                return Result(False, result.feedback + (
                    f"\nYour `chinchilla_loss` raises the same {student['raises']} when given "
                    "numpy arrays: the error may come from Exercise 1 (see ex1_vectorised), "
                    "which compute_optimal calls."))
        return result
    value = student.get("value")
    if ratios is None and type(value) is list and len(value) == 4 and type(value[2]) is float \
            and own_loss_answer(call, C) is not None:
        for num in OTHER_GRID_SIZES:
            grid = logspace(GRID[0], GRID[1], num)
            if any(same(value[2], r) for r in grid) and not any(same(value[2], r) for r in logspace(*GRID)):
                own = own_loss_answer(call, C, None, num)
                if own is not None and same(own, value):
                    pattern(FUNCTION, "ex2_grid_size")
                    return Result(False, result.feedback.split("\n")[0] + (
                        f"\nYour ratio {fmt_value(value[2])} is the best point of a grid of {num} "
                        f"ratios: your grid has {num} points, and the exercise's grid has 200. Use "
                        "np.logspace(-1, 3.3, 200)."))
    return result


def _collect(call, probes):
    """collect() probe by probe, naming Exercise 1's function when it is the cause."""
    values = []
    for probe in probes:
        got, failed = collect(call, FUNCTION, [probe], want="numbers")
        if failed:
            return None, (failed if failed.not_implemented
                          else _more_about_failure(call, probe, failed))
        values += got
    return values, None


def judge_four_numbers(call, probes) -> Result:
    values, failed = _collect(call, probes)
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
    what = "It returns four positive numbers"
    if gate(FUNCTION, probes, values, what):  # the student's own loss only when needed
        own = [own_loss_answer(call, *_own_args(p)) for p in probes]
        failed = gate(FUNCTION, probes, values, what, alternatives=own)
        if failed:
            return failed
        keep_answer()
        return Result(True, f"{fmt_call(FUNCTION, probes[0].args)} returned four positive "
                            "numbers (N, D, ratio, loss), near your own loss's best point.",
                      condition=own_loss_kind(call))
    return Result(True, f"{fmt_call(FUNCTION, probes[0].args)} returned four positive numbers "
                        "(N, D, ratio, loss).")


def _budget_factor(C):
    return lambda values: 6 * values[0][0] * values[0][1] / C


def judge_on_budget(call, probes) -> Result:
    values, failed = _collect(call, probes)
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
            times = (f"{factor:.4g} * C" if abs(factor - 1) >= 1e-3 else
                     f"C * (1 {factor - 1:+.1e}), off by a relative {abs(factor - 1):.1e} where the grader "
                     f"allows {REL_TOL:.0e} (did you round N or D?)")
            return Result(False, with_why(
                f"{where} returned N = {fmt_value(N)} and D = {fmt_value(D)}, so "
                f"6*N*D = {times}; the allocation must spend exactly the budget, "
                "6*N*D = C.", why, HINT))
        if not same(D / N, r):
            return Result(False, f"{where} returned ratio {fmt_value(r)} but D/N = "
                                 f"{fmt_value(D / N)}: the ratio is D/N of the returned point.")
    return Result(True, "The returned N and D satisfy 6*N*D = C and D/N = ratio.")


def _ratio(values):
    return values[0][2]


def judge_custom_ratios(call, probes) -> Result:
    notes = []
    for probe in probes:
        values, failed = _collect(call, [probe])
        if failed:
            return failed
        value = values[0]
        where = fmt_call(FUNCTION, probe.args)
        if len(value) != 4:
            return Result(False, f"{where} returned {fmt_value(value)}; expected (N, D, ratio, loss).")
        given = probe.args[1]
        expected = probe.expected["value"][2]
        got = value[2]
        if same(got, expected):
            continue
        own = own_loss_answer(call, *_own_args(probe))
        if own is not None and same(got, own[2]):
            keep_answer()
            notes.append(_own_note(call, probe, value) or "")
            continue
        why = recognise_derived(got, [probe], _ratio, expected)
        if not any(same(got, g) for g in given):
            text = (f"{where} returned ratio {fmt_value(got)}, which is not one of the ratios "
                    f"passed in; the best of them is {fmt_value(expected)}.")
        else:
            text = (f"{where} returned ratio {fmt_value(got)}; the ratio with the lowest loss "
                    f"among those passed in is {fmt_value(expected)}.")
            if same(given[-1], expected) and len(given) > 1:
                text += " It is the last one in the list: does your loop reach the last ratio?"
                pattern(FUNCTION, "ex2_skips_last_ratio")
        return Result(False, with_why(text, why, "search exactly the `ratios` you are given, "
                                                 "in any order, and keep the lowest loss."))
    text = "The search used the `ratios` passed in (any order, best first, last or alone) and kept the best."
    return Result(True, "\n".join([text] + [n for n in notes if n]), condition=own_loss_kind(call) if notes else "")


def judge_values(call, probes) -> Result:
    """Every probe: the grid's best point (under the exercise's loss, or the student's own)."""
    notes = []
    for probe in probes:
        result = values_match(FUNCTION, [probe], call, HINT)
        if result.passed:
            continue
        if result.not_implemented:
            return result
        student = attempt(call, probe.args)
        note = _own_note(call, probe, student["value"]) if "value" in student else None
        if note:
            keep_answer()
            notes.append(note)
            continue
        result = _more_about_failure(call, probe, result)
        value, expected = student.get("value"), probe.expected.get("value")
        if (type(value) is list and len(value) == 4 and type(value[3]) is float and expected
                and "Why:" not in result.feedback and "\nYour" not in result.feedback
                and value[3] < expected[3] and not same(value[3], expected[3])):
            g, e = fmt_pair(value[3], expected[3])
            return Result(False, result.feedback + f"\nYour loss {g} is below the best grid "
                                                   f"point's {e}: is your answer on the grid?")
        if (type(value) is list and len(value) == 4 and probe.args[1:] and "Why:" not in result.feedback
                and same(value[2], probe.args[1][-1]) and not same(value[2], expected[2])):
            return Result(False, result.feedback + "\nYou returned the last ratio of the list: "
                                                   "keep a point only when its loss is lower.")
        if (type(value) is list and len(value) == 4 and len(probe.args) > 1 and "Why:" not in result.feedback
                and len(probe.args[1]) > 1 and same(expected[2], probe.args[1][-1])
                and same(value[2], _best_ratio(probe.args[0], probe.args[1][:-1]))):
            pattern(FUNCTION, "ex2_skips_last_ratio")
            return Result(False, result.feedback + "\nThe best ratio is the last one in the "
                                                   "list: does your loop reach the last ratio?")
        return result
    text = (f"All {len(probes)} calls of `{FUNCTION}` gave the grid's best point." if len(probes) > 1
            else f"{fmt_call(FUNCTION, probes[0].args)} returned the grid's best point.")
    return Result(True, "\n".join([text] + notes), condition=own_loss_kind(call) if notes else "")


def public_checks():
    return [
        make_check(EXERCISE, "ex2_returns_four_numbers", 2, FUNCTION, [[1e21]],
                   judge_four_numbers, description="returns (N, D, ratio, loss)"),
        make_check(EXERCISE, "ex2_on_budget", 3, FUNCTION, [[1e20], [1e23]],
                   judge_on_budget, description="6*N*D equals the budget C"),
        make_check(EXERCISE, "ex2_grid_minimum", 3, FUNCTION, [[1e22]], judge_values,
                   description="the best point of the default grid at C = 1e22"),
        make_check(EXERCISE, "ex2_custom_ratios", 3, FUNCTION, CUSTOM, judge_custom_ratios,
                   description="honours a custom `ratios` grid, in any order"),
        make_check(EXERCISE, "ex2_several_budgets", 3, FUNCTION, [[c] for c in SEVERAL_BUDGETS],
                   judge_values, description="budgets from 1e19 to 1e25 FLOPs"),
    ]


def hidden_checks(rng: random.Random):
    from .independent import compute_optimal as plain_search  # instructor side only

    # Budgets over fourteen decades, one in each pair of decades.
    budgets = [[10 ** rng.uniform(lo, lo + 2)] for lo in range(14, 28, 2)]
    with_ratios = []
    for order in ("best last", "best last, sorted by loss", "best first", "alone",
                  "duplicates", "shuffled"):
        C = 10 ** rng.uniform(16, 27)
        pool = sorted({round(10 ** rng.uniform(-1, 3.6), 6) for _ in range(rng.randint(3, 12))})
        if order == "alone":
            with_ratios.append([C, [pool[0]]])
            continue
        loss = {r: plain_search(C, [r])[3] for r in pool}
        best = min(pool, key=lambda r: loss[r])
        rest = [r for r in pool if r != best]
        rng.shuffle(rest)
        if order == "best last":
            ratios = rest + [best]
        elif order == "best last, sorted by loss":
            ratios = sorted(pool, key=lambda r: -loss[r])
        elif order == "best first":
            ratios = [best] + rest
        elif order == "duplicates":
            ratios = rest + [best, best] + rest[:2]
            rng.shuffle(ratios)
        else:
            ratios = pool[:]
            rng.shuffle(ratios)
        with_ratios.append([C, ratios])
    return [
        make_check(EXERCISE, "ex2_hidden_budgets", 3, FUNCTION, budgets, judge_values,
                   hidden=True, description="random budgets over fourteen decades, default grid"),
        make_check(EXERCISE, "ex2_hidden_ratios", 3, FUNCTION, with_ratios, judge_values,
                   hidden=True, description="random ratio lists: best first, last, alone, "
                                            "duplicated, shuffled"),
    ]


# --------------------------------------------------------------------------- the regrade

#: The one line each regraded test starts with.
REGRADE_NOTE = ("Graded with the exercise's chinchilla_loss in place of yours, which is wrong "
                "(see Exercise 1): a mistake in Exercise 1 costs points in Exercise 1 only.")
#: A test passed under the student's own (wrong) loss whose search fails with the exercise's.
OWN_LOSS_REFUSED = ("Your answer is the best point under your own chinchilla_loss, but with the "
                    "exercise's chinchilla_loss in place of yours, compute_optimal does not find "
                    "the exercise's best point: the search must come from the loss it calls, "
                    "not be built into it.")


def needs_the_exercise_loss(results) -> bool:
    """Exercise 1 lost points or was not graded (its chinchilla_loss may be wrong in some way:
    it raises, returns None, a wrong value) and Exercise 2 lost points it did not lose to a
    stub, or earned some only under the student's own loss (``Result.condition``). Decided from
    the results' structure alone, never from feedback text."""
    ex1 = [r for c, r in results if c.exercise == "ex1"]
    ex1_failed = not ex1 or any(not r.passed for r in ex1)  # not graded here: the self-check
    ex2_failed = any(c.exercise == EXERCISE and ((not r.passed and not r.not_implemented)
                                                 or (r.passed and r.condition))
                     for c, r in results)
    return ex1_failed and ex2_failed


def keep_the_better(results, again: dict) -> tuple:
    """Test by test, the better of the first grading and the one with the exercise's
    chinchilla_loss in place of the student's (``again``): a mistake in Exercise 1 costs
    points in Exercise 1 only. A test that passed only under the student's own loss (its
    ``condition``: the answer is that loss's best grid point) counts if the search passes with
    the exercise's loss too, or, where the answer did not change with the exercise's loss in
    place (the search uses its own copy of the loss), if that loss is a slip of the exercise's
    (near it, falling in N and D: ``"slip"``). A loss far from the exercise's everywhere whose
    minimum the student placed where the answer is (with no search at all) earns nothing here.
    Returns ``(results, whether the exercise's loss decided any test)``."""
    import dataclasses

    used = False
    kept = []
    for c, first in results:
        again_r = again.get(c.name)
        if again_r is None or (first.passed and not first.condition):
            kept.append((c, first))  # earned without the student's loss deciding it
        elif again_r.passed:
            used = True
            kept.append((c, dataclasses.replace(again_r, feedback=REGRADE_NOTE + "\n" + again_r.feedback)))
        elif first.passed and first.condition == "slip" and first.got == again_r.got:
            kept.append((c, first))  # the same answer with either loss: a search on its own
            # copy of a mistyped loss, which substitution cannot reach ("one slip", fairly)
        elif first.passed:  # paid only because the student's own loss put its minimum there
            kept.append((c, dataclasses.replace(again_r, feedback=OWN_LOSS_REFUSED + "\n" + again_r.feedback)))
        elif again_r.mistake and not first.mistake:
            # Failed either way, but only with the exercise's loss is Exercise 2's own mistake
            # recognised (the student's loss hides it): show that feedback, which says what to
            # fix (the report's note, said once, tells that the exercise's loss was used).
            used = True
            kept.append((c, again_r))
        else:
            kept.append((c, first))
    return kept, used


#: Exercise 2 graded again with the exercise's chinchilla_loss in place of the student's.
REGRADE = Regrade(EXERCISE, needs_the_exercise_loss, exercise_loss_source, keep_the_better, REGRADE_NOTE)
