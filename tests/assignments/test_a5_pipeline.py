"""Assignment 5 (a 1F1B schedule by hand), graded as the autograder grades it: the master's
reference earns every point at world sizes 2 and 4 and three seeds; the student's stub
earns 0 saying so; each planted mistake loses points with feedback that names it; the
grader's order checks accept the course's own 1F1B (``solutions.pipeline``) and refuse
GPipe's."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import a5_pipeline
from sandbox.multirank import Limits
from solutions.pipeline import _stage_order

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a5-pipeline-1f1b.md"


def orders(kind, p, m):
    return [[(phase, i) for phase, i, _ in _stage_order(kind, p, m, s)] for s in range(p)]


def test_the_courses_1f1b_passes_every_order_check_and_gpipe_fails_memory_only():
    for p, m in a5_pipeline.order_grid():
        assert a5_pipeline.check_orders(p, m, orders("1f1b", p, m)) == dict.fromkeys(a5_pipeline.ORDER_PARTS), (p, m)
        verdict = a5_pipeline.check_orders(p, m, orders("gpipe", p, m))
        assert verdict["passes"] is None and verdict["agree"] is None and verdict["bubble"] is None
        assert (verdict["memory"] is None) == (m <= 1), (p, m, verdict)
        if m > 1:
            assert "GPipe" in verdict["memory"]


@pytest.mark.slow
def test_reference_scores_full_marks_at_two_world_sizes_and_three_seeds():
    report = a5_pipeline.grade_file(MASTER, world_sizes=(2, 4), seeds=(0, 1, 2), salt=5)
    assert report.max_score == 10
    assert report.score == report.max_score, report.text()


@pytest.mark.slow
def test_the_students_stub_scores_zero_and_says_not_implemented(grade_stub):
    report = grade_stub(a5_pipeline, MASTER, world_sizes=(2,), seeds=(0,))
    assert report.score == 0, report.text()
    assert all("not implemented yet" in t.feedback for t in report.tests), report.text()


MUTANTS = {
    # name: (old, new, points lost at least, words the feedback must hold)
    "GPipe order (stashes all m)": ("    warmup = min(p - stage - 1, m)\n", "    warmup = m\n", 2, "GPipe"),
    "a backward before its forward": ('        order += [("F", warmup + i), ("B", i)]',
                                      '        order += [("B", i), ("F", warmup + i)]', 2,
                                      "backward before its forward"),
    "stage 0 sends in the wrong order": ("    return order\n    ### END SOLUTION",
                                         "    if stage == 0 and m > 1:\n        order[0], order[1] = order[1], order[0]\n"
                                         "    return order\n    ### END SOLUTION", 1, "wrong send order"),
    "loss not divided by m": ("                out = loss_fn(out, targets[i]) / m",
                              "                out = loss_fn(out, targets[i])", 3, "divide each micro-batch's loss by m"),
    "a gradient never sent (deadlock)": ("            if not first:\n                g = received",
                                         "            if False:\n                g = received", 3, "rank 0 hung in recv"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(grade_planted, name):
    old, new, lost, words = MUTANTS[name]
    report = grade_planted(a5_pipeline, MASTER, (old, new), world_sizes=(2,), seeds=(0,),
                           limits=Limits(wall_s=30, stall_s=1.5))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()


def test_every_known_mistake_is_named_by_some_feedback_the_grader_writes():
    """The class report counts mistakes by their words: each must occur in the grader's text."""
    import inspect

    from assignments import a4_tp

    for module in (a4_tp, a5_pipeline):
        text = inspect.getsource(module).replace('"\n', "").replace('                        "', "")
        for name, words in module.MISTAKES.items():
            assert words.strip() in text or words == " hung in ", (module.__name__, name)


def test_a_micro_batch_is_recognised_by_its_closest_fingerprint_not_the_first_near_one():
    """The last stage's output gradients of an untrained model lie close together (their sum
    is 0, their absolute sums nearly equal): two candidates can both be within tolerance of
    what a rank reports, and the right one is the closest (a correct 1F1B was once told its
    send order was wrong, p=4, m=9)."""
    import torch

    from assignments.a5_pipeline import _which
    from assignments.a5_rank import fingerprint

    base = torch.linspace(1.0, 2.0, 64)
    near = base * (1 + 5e-5)  # within the tolerance of base, but not the same tensor
    assert _which(fingerprint(near), [base, near]) == 1
    assert _which(fingerprint(base), [near, base]) == 1
    assert _which(fingerprint(base * 1.01), [base, near]) == -1
    assert _which("not a list", [base]) == -1


FORGED_LOG = '''    for work, _ in sends:
        work.wait()
    log = next(c.cell_contents for c in type(stage_module).forward.__closure__
               if isinstance(c.cell_contents, list))
    forwards = [e for e in log if e[0] == "F"]
    backwards = {e[1]: e for e in log if e[0] == "B"}
    position = {id(e): k for k, e in enumerate(log)}
    forged, new_index = [], {}
    for phase, i in one_f_one_b(p, m, rank):  # the log rewritten into 1F1B's order
        if phase == "F":
            new_index[position[id(forwards[i])]] = len(forged)
            forged.append(forwards[i])
        else:
            old = backwards[position[id(forwards[i])]]
            forged.append(["B", new_index[old[1]], old[2]])
    log[:] = forged
    if last:  # and the losses' record of which forward pass each came from
        for cell in loss_fn.__closure__:
            if isinstance(cell.cell_contents, list) and cell.cell_contents and isinstance(cell.cell_contents[0], list):
                for pair in cell.cell_contents:
                    pair[0] = new_index.get(pair[0], pair[0])
    return total if last else None
'''


@pytest.mark.slow
def test_gpipe_run_with_the_stage_modules_log_rewritten_into_1f1b_loses_the_run_order_point(grade_planted):
    """The passes a stage module logs live inside the rank, where the submission can rewrite
    them (here through the module's closure, after a GPipe run: every forward, then every
    backward). The order of the activations and gradients between the ranks, seen on the
    wire, cannot be: the run-order point is lost all the same."""
    report = grade_planted(
        a5_pipeline, MASTER,
        ("    for phase, i in one_f_one_b(p, m, rank):\n        if phase == \"F\":\n            if first:",
         "    gpipe = [(\"F\", i) for i in range(m)] + [(\"B\", i) for i in range(m)]\n"
         "    for phase, i in gpipe:\n        if phase == \"F\":\n            if first:"),
        ("    for work, _ in sends:\n        work.wait()\n    return total if last else None\n", FORGED_LOG),
        world_sizes=(2,), seeds=(0,), limits=Limits(wall_s=30, stall_s=1.5))
    assert report.score == report.max_score - a5_pipeline.POINTS["run_order"], report.text()
    assert "in flight" in report.text() and "seen between the ranks" in report.text(), report.text()


def _seen(p, events):
    """Per rank, the wire's view: ``events`` is ``[(sender, receiver, bytes), ...]`` in the
    group's order."""
    seen = [{"sends": [], "unlisted": 0} for _ in range(p)]
    for packet, (src, dst, nbytes) in enumerate(events, start=1):
        seen[src]["sends"].append([packet, dst, nbytes])
    return seen


def test_the_in_flight_bound_on_the_wire_passes_1f1b_and_fails_gpipe_counting_bytes():
    from assignments.a5_rank import MICRO_BATCH, MODEL

    size = MICRO_BATCH * MODEL["block_size"] * MODEL["d_model"] * 4
    act, grad = (0, 1, size), (1, 0, size)
    one_f_one_b = [act, act, grad, act, grad, act, grad, act, grad, grad]  # p=2, m=5: two ahead at most
    assert a5_pipeline._judge_wire_order(2, 5, _seen(2, one_f_one_b)) is None
    gpipe = [act] * 5 + [grad] * 5
    problem = a5_pipeline._judge_wire_order(2, 5, _seen(2, gpipe))
    assert "stage 0 had sent 5 micro-batches' activations" in problem and "GPipe" in problem
    three_ahead = [act, act, act, grad, act, grad, act, grad, grad, grad]
    assert "had sent 3 micro-batches'" in a5_pipeline._judge_wire_order(2, 5, _seen(2, three_ahead))
    halves = [(0, 1, size // 2)] * 4 + [(1, 0, size // 2)] * 2 + [(0, 1, size // 2)] * 2  # 2.0 then 2.0 ahead
    assert a5_pipeline._judge_wire_order(2, 4, _seen(2, halves)) is None
    assert "had sent 2.5" in a5_pipeline._judge_wire_order(2, 4, _seen(2, halves + [(0, 1, size // 2)]))
    flooded = _seen(2, one_f_one_b)
    flooded[0]["unlisted"] = 3
    assert "more point-to-point messages than the grader lists" in a5_pipeline._judge_wire_order(2, 5, flooded)
    assert a5_pipeline._judge_wire_order(2, 5, None) is None


@pytest.mark.slow
def test_an_order_that_refuses_a_single_stage_loses_the_passes(grade_planted):
    """The statement asks for any p >= 1; the grid went from p = 2, and an order that refused
    one stage scored 10/10."""
    report = grade_planted(a5_pipeline, MASTER, (
        "    warmup = min(p - stage - 1, m)\n",
        "    if p < 2:\n        raise ValueError('a pipeline has two stages or more')\n    warmup = min(p - stage - 1, m)\n"),
        world_sizes=(2,), seeds=(0,), salt=3)
    assert report.score == report.max_score - a5_pipeline.POINTS["passes"], report.text()
    assert "p=1, m=1: one_f_one_b(1, 1, 0) raised ValueError: a pipeline has two stages or more" in report.text()


def test_the_order_grid_holds_one_stage_and_no_empty_pipeline():
    grid = a5_pipeline.order_grid()
    assert {p for p, _ in grid} == set(range(1, 7))
    assert all(m >= 1 for _, m in grid) and len(grid) == len(set(grid))
