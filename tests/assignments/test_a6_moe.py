"""Assignment 6 (expert-parallel dispatch and combine), graded as the autograder grades it: the
master's reference earns every point at world sizes 2 and 4 and three seeds; the student's stub
and an empty file earn 0 saying why in one line; each planted mistake loses points with
feedback that names it; the self-check says what the grader says; Lab 8's own dispatch and
combine pass the same checks."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import a6_moe
from sandbox.multirank import Limits

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a6-expert-parallel.md"

ORDER = "    order = torch.argsort(flat, stable=True)\n    counts = torch.bincount(flat, minlength=num_experts)\n"
DISPATCH_A2A = "    rows = AllToAll.apply(x[order // k], send, recv)\n"
COMBINE_A2A = "    back = AllToAll.apply(expert_out, recv, send)\n"
MUTANTS = {
    # name: (replacements, points lost at least, words the feedback must hold)
    "splits transposed": (((DISPATCH_A2A, "    rows = AllToAll.apply(x[order // k], recv, send)\n"),), 10,
                          "splits transposed"),
    "combine without the router's weights": ((("    weighted = back * gates.reshape(-1)[order].unsqueeze(1)\n",
                                               "    weighted = back\n"),), 5, "without the router's weights"),
    "overflow tokens dropped silently": (((ORDER, (
        "    order = torch.argsort(flat, stable=True)\n"
        "    capacity = -(-flat.numel() // num_experts)  # slots per expert: its balanced share\n"
        "    position = torch.arange(flat.numel()) - torch.searchsorted(flat[order], flat[order])\n"
        "    order = order[position < capacity]\n"
        "    counts = torch.bincount(flat[order], minlength=num_experts)\n")),), 4, "dropped silently"),
    # Calling forward directly: the all-to-all runs, but autograd never sees it.
    "no all-to-all in the backward pass": (
        ((DISPATCH_A2A, "    rows = AllToAll.forward(type('Ctx', (), {})(), x[order // k], send, recv)\n"),
         (COMBINE_A2A, "    back = AllToAll.forward(type('Ctx', (), {})(), expert_out, recv, send)\n")), 6,
        "no all-to-all in the backward pass"),
}


@pytest.mark.slow
def test_reference_scores_full_marks_at_two_world_sizes_and_three_seeds():
    report = a6_moe.grade_file(MASTER, world_sizes=(2, 4), seeds=(0, 1, 2), salt=17)
    assert report.max_score == 10
    assert report.score == report.max_score, report.text()


@pytest.mark.slow
def test_the_students_stub_scores_zero_and_says_not_implemented(grade_stub):
    report = grade_stub(a6_moe, MASTER, world_sizes=(2,), seeds=(0,))
    assert report.score == 0, report.text()
    assert all("not implemented yet" in t.feedback for t in report.tests), report.text()


def test_an_empty_file_scores_zero_with_one_line(tmp_path):
    empty = tmp_path / "a6.py"
    empty.write_text("", encoding="utf-8")
    report = a6_moe.grade_file(empty)
    assert report.score == 0 and report.max_score == 10
    assert {t.feedback for t in report.tests} == {"the file is empty"}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(grade_planted, name):
    pairs, lost, words = MUTANTS[name]
    report = grade_planted(a6_moe, MASTER, *pairs, world_sizes=(2,), seeds=(0,), limits=Limits(wall_s=30, stall_s=2))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()
    assert words.strip() in a6_moe.MISTAKES[name]  # the class report counts it by these words


def _master_namespace(*pairs) -> dict:
    import jupytext

    namespace = {}
    for cell in jupytext.read(MASTER).cells:
        if cell.cell_type == "code" and "def dispatch" in cell.source:
            source = cell.source
            for old, new in pairs:
                assert source.count(old) == 1, old
                source = source.replace(old, new)
            exec(source, namespace)
    return namespace


@pytest.mark.slow
def test_the_self_check_says_what_the_grader_says(grade_planted, capsys):
    pairs = MUTANTS["combine without the router's weights"][0]
    graded = grade_planted(a6_moe, MASTER, *pairs, world_sizes=(2,), seeds=(0,), salt=0)
    checked = a6_moe.self_check(_master_namespace(*pairs), world_sizes=(2,), seeds=(0,))
    assert checked == graded.score < graded.max_score
    assert "without the router's weights" in capsys.readouterr().out


@pytest.mark.slow
def test_the_labs_dispatch_and_combine_pass_the_graders_checks():
    """Lab 8's functions (``labs.expert_parallel``) and the assignment's reference are held to
    the same checks."""
    from labs.expert_parallel import AllToAll, combine, dispatch

    from assignments.common import Student

    functions = {"AllToAll": AllToAll, "dispatch": dispatch, "combine": combine}
    report = a6_moe.grade(Student(local=lambda: functions), world_sizes=(4,), seeds=(1,))
    assert report.score == report.max_score, report.text()


def test_every_known_mistake_is_named_by_some_feedback_the_grader_writes():
    import inspect

    text = inspect.getsource(a6_moe).replace('"\n', "").replace('                        "', "")
    for name, words in a6_moe.MISTAKES.items():
        assert words.strip() in text or words == " hung in ", name
