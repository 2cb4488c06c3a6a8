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


# Every token routed to its own rank's experts by rewriting the rank's router before it runs:
# nothing has to travel, and a dispatch that copies locally (with two empty all-to-alls each
# way) matched a reference built from the routing the ranks reported.
LOCAL_ROUTER = '''import sys
import torch
import torch.distributed as dist


def _local_route(x, W, top_k, selection_bias=None, round_robin=False, expert_ids=None):
    n, r, E = dist.get_world_size(), dist.get_rank(), W.shape[0]
    ids = (r * (E // n) + torch.arange(top_k) % (E // n)).expand(x.shape[0], top_k).contiguous()
    g = torch.softmax(torch.nn.functional.linear(x, W), dim=-1).gather(1, ids)
    return ids, g / g.sum(dim=1, keepdim=True)


for name, module in list(sys.modules.items()):
    if name.endswith(".moe") and hasattr(module, "route"):
        module.route = _local_route


class AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, send, recv):
        n = dist.get_world_size()
        dist.all_to_all_single(x.new_empty(0, x.shape[1]), x.new_empty(0, x.shape[1]), [0] * n, [0] * n)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        n = dist.get_world_size()
        dist.all_to_all_single(grad.new_empty(0, grad.shape[1]), grad.new_empty(0, grad.shape[1]), [0] * n, [0] * n)
        return grad, None, None


def dispatch(x, expert_ids, num_experts):
    k = expert_ids.shape[1]
    return AllToAll.apply(x.repeat_interleave(k, 0), None, None), expert_ids.reshape(-1).clone(), (k, x.shape[0])


def combine(expert_out, gates, plan):
    k, tokens = plan
    return (AllToAll.apply(expert_out, None, None) * gates.reshape(-1, 1)).view(tokens, k, -1).sum(1)
'''


@pytest.mark.slow
def test_a_router_rewritten_inside_the_rank_scores_zero(tmp_path):
    path = tmp_path / "a6.py"
    path.write_text(LOCAL_ROUTER, encoding="utf-8")
    report = a6_moe.grade_file(path, world_sizes=(2,), seeds=(0,), salt=3)
    assert report.score == 0, report.text()
    assert "expert choices the router did not make" in report.tests[0].feedback, report.text()


def test_the_routing_check_accepts_the_routers_choice_and_a_near_tie_only():
    import numpy as np
    import torch

    case = a6_moe.make_case(0, 5, 2)
    T, E, k = a6_moe.layer(0).tokens, a6_moe.layer(0).num_experts, a6_moe.layer(0).top_k
    assert k == 2  # (the two worst, and the pairs below)
    ids = []
    for r in range(2):
        x = case["x"][r * T:(r + 1) * T]
        scores = torch.nn.functional.linear(x, case["router"]) + case["bias"]
        ids.append(torch.argsort(-scores, dim=1, stable=True)[:, :k].numpy())
    assert a6_moe._judge_routing(case, ids, 2) is None
    worst = [a.copy() for a in ids]
    worst[1][3] = np.argsort((torch.nn.functional.linear(case["x"][T + 3], case["router"])
                              + case["bias"]).numpy(), kind="stable")[:k]  # rank 1, token 3: its two worst
    assert "rank 1 reported expert choices the router did not make (token 3" in a6_moe._judge_routing(case, worst, 2)
    # A router whose scores are the bias alone: experts 0 and 1 first, expert 2 a rounding below 1.
    bias = torch.zeros(E)
    bias[0], bias[1], bias[2] = 3.0, 2.0, 2.0 - a6_moe.ROUTING_SLACK / 10
    flat = dict(case, router=torch.zeros_like(case["router"]), bias=bias)
    chosen = np.tile([0, 1], (T, 1))
    assert a6_moe._judge_routing(flat, [chosen, chosen], 2) is None
    near = np.tile([2, 0], (T, 1))  # a near tie may go either way, in any order
    assert a6_moe._judge_routing(flat, [chosen, near], 2) is None
    for wrong in ([0, 3], [0, 0], [0, E]):
        assert "rank 0" in a6_moe._judge_routing(flat, [np.tile(wrong, (T, 1)), chosen], 2), wrong


# The statement asks for any k and any number of experts (E/n per rank); a grader whose every
# case had the same layer (E = 8, k = 2) gave full marks to a dispatch with both typed in.
SPECIAL_CASED = {
    "k typed in": ("    k = expert_ids.shape[1]\n", "    k = 2\n"),
    "E typed in": ("    per_rank = num_experts // world\n", "    per_rank = 8 // world\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SPECIAL_CASED))
def test_a_dispatch_special_cased_to_one_layer_loses_the_dispatch(grade_planted, name):
    report = grade_planted(a6_moe, MASTER, SPECIAL_CASED[name], world_sizes=(2,), seeds=(0, 1, 2), salt=4)
    assert not report.tests[list(a6_moe.POINTS).index("dispatch")].passed, report.text()
    assert report.score <= report.max_score - 2, report.text()


def test_the_cases_vary_the_layer_the_statement_leaves_open():
    """k, the number of experts and the tokens per rank take more than one value over the
    three cases, k above 2 among them (k = 1 would leave the gates at 1)."""
    layers = [a6_moe.layer(seed) for seed in a6_moe.SEEDS]
    for field in ("num_experts", "top_k", "tokens"):
        assert len({getattr(layer, field) for layer in layers}) > 1, field
    assert max(layer.top_k for layer in layers) > 2 and min(layer.top_k for layer in layers) >= 2
    for seed, layer in zip(a6_moe.SEEDS, layers):
        for n in a6_moe.WORLD_SIZES:  # rank 0's experts can take every copy in the "rank 0" case
            assert layer.num_experts % n == 0
            assert a6_moe.BIASES[seed % 3] != "rank 0" or layer.top_k <= layer.num_experts // n


# torch's functional collectives (torch.distributed._functional_collectives) run the same
# all-to-all on the same process group, but as operators of another namespace, which the
# ranks' counter did not count: the wire saw both all-to-alls of each pass, the rank's record
# none, and an honest submission lost the traffic part ("issued 0 all-to-all(s)").
FUNCTIONAL = (
    ("        dist.all_to_all_single(received, x.contiguous(), list(recv_splits), list(send_splits))\n",
     "        from torch.distributed import _functional_collectives as funcol\n"
     "        received = funcol.wait_tensor(funcol.all_to_all_single(x.contiguous(), list(recv_splits),\n"
     "                                                               list(send_splits), dist.group.WORLD))\n"),
    ("        dist.all_to_all_single(sent_back, grad.contiguous(), ctx.send_splits, ctx.recv_splits)\n",
     "        from torch.distributed import _functional_collectives as funcol\n"
     "        sent_back = funcol.wait_tensor(funcol.all_to_all_single(grad.contiguous(), ctx.send_splits,\n"
     "                                                                ctx.recv_splits, dist.group.WORLD))\n"),
)


@pytest.mark.slow
def test_all_to_alls_through_the_functional_collectives_count_as_all_to_alls(grade_planted):
    report = grade_planted(a6_moe, MASTER, *FUNCTIONAL, world_sizes=(2, 4), seeds=(0, 1, 2), salt=6)
    assert report.score == report.max_score, report.text()


@pytest.mark.slow
def test_an_all_gather_through_the_functional_collectives_is_named(grade_planted):
    """Every rank gets every token through the functional all-gather and keeps its experts'
    copies: the right rows, by a collective the statement forbids."""
    report = grade_planted(a6_moe, MASTER, (
        "    rows = AllToAll.apply(x[order // k], send, recv)\n",
        "    from torch.distributed import _functional_collectives as funcol\n"
        "    AllToAll.apply(x[order // k], send, recv)\n"
        "    funcol.wait_tensor(funcol.all_gather_tensor(x.detach(), 0, dist.group.WORLD))\n"
        "    rows = AllToAll.apply(x[order // k], send, recv)\n"), world_sizes=(2,), seeds=(0,), salt=6)
    traffic = report.tests[list(a6_moe.POINTS).index("traffic")]
    assert not traffic.passed and "all_gather" in traffic.feedback, report.text()
