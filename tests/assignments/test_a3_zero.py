"""Assignment 3 (ZeRO-1 / ZeRO-2), graded as the autograder grades it: the reference from the
master notebook earns every point at world sizes 2 and 4 and three seeds; the student's
stub earns 0 saying so; each planted mistake loses points with feedback naming it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox.multirank import ISOLATION_ORDER

from assignments import a3_zero

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a3-zero-sharded-optimizer.md"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference_reports():
    """The master graded once per world size (both stages, three seeds each)."""
    return {n: a3_zero.grade_file(MASTER, world_sizes=(n,), seeds=a3_zero.SEEDS, salt=11) for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_reference_scores_full_marks_at_three_seeds(reference_reports, n):
    report = reference_reports[n]
    assert report.max_score == sum(a3_zero.POINTS.values()) == 10
    assert report.score == report.max_score, report.text()
    # The class report's isolation column reads this: the grader says how its ranks ran.
    assert report.isolated in (True, False)
    assert report.isolation in ISOLATION_ORDER and report.isolated == (report.isolation == "namespaces")


def test_the_model_shards_evenly_and_its_shards_cut_through_layers():
    sizes = [p.numel() for p in a3_zero.make_model(0).parameters()]
    total = sum(sizes)
    boundaries = {sum(sizes[:i]) for i in range(len(sizes) + 1)}
    for n in (2, 4, 8):
        assert total % n == 0
        assert any(r * total // n not in boundaries for r in range(1, n)), n


def test_the_memory_probe_tells_the_sharded_state_from_the_full_one():
    """The probe's layer is wide enough that the full state (2P) is over the bound at each
    world size, and the sharded one (3 shards) under it, each by at least 1 MiB (what else a
    rank holds there measured 0.4 to 0.9 MiB)."""
    params = 4 * a3_zero.PROBE_NUMEL
    for n in a3_zero.WORLD_SIZES:
        allowed = a3_zero.STATE_SHARDS * params // n + a3_zero.PROBE_SLACK
        assert 2 * params - allowed >= 2**20 and allowed - a3_zero.STATE_SHARDS * params // n >= 2**20
        assert a3_zero.check_memory(n, ("memory", 2), {1: params + a3_zero.STATE_SHARDS * params // n}) == {}
        failed = a3_zero.check_memory(n, ("memory", 2), {1: params + allowed // 3, 2: 3 * params})["state"]
        assert "AdamW's moments for all P parameters" in failed and f"shards of {params // n / 2**20:g} MiB" in failed
    assert a3_zero.check_memory(2, (2, 0), {1: 10 * params}) == {}  # a training case: no probe
    assert a3_zero.check_memory(2, ("memory", 1), None) == {}  # not measured: no judgement


def test_the_statement_states_the_graders_numbers():
    text = MASTER.read_text(encoding="utf-8")
    assert f"{a3_zero.STEPS} AdamW steps" in text
    assert f"to {a3_zero.PARAM_TOL:.0e} of the update" in text
    assert f"at most {a3_zero.STATE_SHARDS} shards" in text
    lr, eps, wd = map(float, re.search(r"lr=([\d.e-]+), eps=([\d.e-]+), weight_decay=([\d.e-]+)", text).groups())
    assert (lr, eps, wd) == pytest.approx((a3_zero.LR, a3_zero.EPS, a3_zero.WEIGHT_DECAY), rel=1e-12)
    assert all(str(betas) in text for betas in a3_zero.BETAS)
    points = a3_zero.POINTS
    assert f"({points['result2']} points for stage 2, {points['result1']} for" in text
    assert f"({points['state']} points)" in text
    assert f"({points['traffic2']} points for stage 2, {points['traffic1']} for stage 1)" in text


def test_the_students_stub_scores_zero_and_says_not_implemented(grade_stub):
    report = grade_stub(a3_zero, MASTER, world_sizes=(2,), seeds=(0,))
    assert report.score == 0, report.text()
    assert "not implemented yet" in report.text()


MUTANTS = {
    # name: (old, new, points lost at least, words the feedback must hold)
    "a shard of the wrong rank": (
        "self.lo = self.rank * self.shard_numel",
        "self.lo = ((self.rank + 1) % self.world) * self.shard_numel", 5, "holds the elements of shard"),
    "full optimizer state on every rank": (
        "        self.shard.grad = None\n",
        "        self.shard.grad = None\n        self.moments = [torch.zeros_like(p) for p in self.params for _ in (0, 1)]\n",
        2, "a full AdamW state is 2P"),
    # State kept where the walk over the optimizer object does not reach (a module's
    # attribute; a file in the rank's /tmp): the grader's measurement from outside finds it.
    "full state kept in a module": (
        "        self.shard.grad = None\n",
        "        self.shard.grad = None\n        torch._kept = [torch.zeros(2 * self.numel)]\n",
        2, "measured from outside the ranks"),
    "full state kept in a file": (
        "        self.shard.grad = None\n",
        "        self.shard.grad = None\n        import numpy as np\n"
        "        np.save('/tmp/kept.npy', np.zeros(2 * self.numel, dtype=np.float32))\n",
        2, "measured from outside the ranks"),
    "missing all-gather": (
        "dist.all_gather_single(full, self.shard.detach())",
        "full.copy_(torch.cat([p.detach().reshape(-1) for p in self.params]))\n"
        "        full[self.lo:self.lo + self.shard_numel] = self.shard.detach()", 8, "all-gather the updated shards"),
    "stage 2 that all-reduces": (
        "        grad = torch.empty_like(self.shard)\n        dist.reduce_scatter_single(grad, grads)\n",
        "        dist.all_reduce(grads)\n        grad = grads[self.lo:self.lo + self.shard_numel]\n",
        2, "reduce-scatters the gradients"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(grade_planted, name):
    old, new, lost, words = MUTANTS[name]
    report = grade_planted(a3_zero, MASTER, (old, new), world_sizes=(2,), seeds=(0,))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()


# AdamW over every parameter (the gradients reduce-scattered and all-gathered, so the traffic
# is ZeRO's), its moments kept between steps in a memfd, and two shard-sized decoys in the
# object: the object walk sees a shard's state, and a memfd nobody maps held no resident memory.
MEMFD_STATE = '''import os
import numpy as np
import torch
import torch.distributed as dist


class ShardedAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, stage=2):
        self.params = list(params)
        self.lr, self.betas, self.eps, self.wd = lr, betas, eps, weight_decay
        self.n = dist.get_world_size()
        self.P = sum(p.numel() for p in self.params)
        self.decoys = (torch.zeros(self.P // self.n), torch.zeros(self.P // self.n))
        self.fd = os.memfd_create("state")
        self.t = 0

    def step(self):
        g = torch.cat([p.grad.reshape(-1) for p in self.params])
        shard = torch.empty(self.P // self.n)
        dist.reduce_scatter_single(shard, g)
        full = torch.empty(self.P)
        dist.all_gather_single(full, shard.div_(self.n))
        if self.t:
            both = torch.from_numpy(np.frombuffer(os.pread(self.fd, 8 * self.P, 0), dtype=np.float32).copy())
            m, v = both[:self.P], both[self.P:]
        else:
            m, v = torch.zeros(self.P), torch.zeros(self.P)
        self.t += 1
        b1, b2 = self.betas
        w = torch.cat([p.detach().reshape(-1) for p in self.params]).mul_(1 - self.lr * self.wd)
        m.mul_(b1).add_(full, alpha=1 - b1)
        v.mul_(b2).addcmul_(full, full, value=1 - b2)
        w.addcdiv_(m / (1 - b1 ** self.t), (v / (1 - b2 ** self.t)).sqrt().add_(self.eps), value=-self.lr)
        os.pwrite(self.fd, torch.cat([m, v]).numpy().tobytes(), 0)
        offset = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(w[offset:offset + p.numel()].view_as(p))
                offset += p.numel()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
'''


def test_a_full_state_kept_in_a_memfd_loses_the_state_part(tmp_path):
    path = tmp_path / "a3.py"
    path.write_text(MEMFD_STATE, encoding="utf-8")
    report = a3_zero.grade_file(path, world_sizes=(2,), seeds=(0,), salt=5)
    lost = {t.name for t in report.tests if not t.passed}
    assert lost == {a3_zero.TITLES["state"]}, report.text()
    assert "measured from outside the ranks" in report.text(), report.text()


def test_an_optimizer_that_drops_the_betas_loses_the_result_parts(grade_planted):
    """The statement's class takes ``betas``; before, the grader always passed the defaults,
    so an optimizer that never handed them on to AdamW scored 10/10."""
    report = grade_planted(a3_zero, MASTER, ("lr=lr, betas=betas, eps=eps", "lr=lr, eps=eps"),
                           world_sizes=(2,), seeds=(0,), salt=3)
    lost = {t.name for t in report.tests if not t.passed}
    assert lost == {a3_zero.TITLES["result2"], a3_zero.TITLES["result1"]}, report.text()
    assert "after step 2 the parameters differ" in report.text(), report.text()


def test_every_seed_is_graded_with_betas_of_its_own():
    """One seed at AdamW's defaults (a class that mishandles a betas argument it was given
    would pass there) and the others not, the self-check's seed among them."""
    betas = [a3_zero.betas_for(seed) for seed in a3_zero.SEEDS]
    assert len(set(betas)) == len(betas) and (0.9, 0.999) in betas
    assert a3_zero.betas_for(a3_zero.SEEDS[0]) != (0.9, 0.999)


def test_a_collective_beside_the_reduce_scatter_and_all_gather_costs_the_traffic_part():
    """The traffic part is a reduce-scatter and an all-gather per step, nothing else: before,
    the rank's own count of any other collective (a broadcast on top of the right two) was set
    aside, and only the traffic seen between the ranks, where it is seen, could cost the part."""
    numel = sum(p.numel() for p in a3_zero.make_model(0).parameters())
    whole = a3_zero.STEPS * 4 * numel
    right = {"reduce_scatter": whole, "all_gather": whole}
    assert a3_zero.check_traffic({"bytes": right}, 2, 2, numel) is None
    failed = a3_zero.check_traffic({"bytes": dict(right, broadcast=whole)}, 2, 2, numel)
    assert failed and "broadcast" in failed, failed


def test_shards_gathered_by_broadcasts_are_told_so_not_told_they_bypassed_torch_distributed(grade_planted):
    """Each rank broadcasting its shard in turn: the traffic parts go, and the feedback names
    the broadcasts (before, it said the collectives were called past torch.distributed's
    functions, which these were not)."""
    report = grade_planted(a3_zero, MASTER, (
        "        dist.all_gather_single(full, self.shard.detach())\n",
        "        full[self.lo:self.lo + self.shard_numel] = self.shard.detach()\n"
        "        for r in range(self.world):\n"
        "            dist.broadcast(full[r * self.shard_numel:(r + 1) * self.shard_numel], src=r)\n"),
        world_sizes=(2,), seeds=(0,), salt=3)
    lost = {t.name for t in report.tests if not t.passed}
    assert lost == {a3_zero.TITLES["traffic2"], a3_zero.TITLES["traffic1"]}, report.text()
    assert "broadcast" in report.text() and "past torch.distributed" not in report.text(), report.text()


def test_shards_gathered_by_broadcasts_are_told_the_broadcast_is_no_part_of_it():
    """The rank's own count: a reduce-scatter and broadcasts in place of the all-gather. The
    feedback says the broadcasts are no part of ZeRO's traffic, not that the shards never
    reach the other ranks (they do)."""
    numel = sum(p.numel() for p in a3_zero.make_model(0).parameters())
    whole = a3_zero.STEPS * 4 * numel
    failed = a3_zero.check_traffic({"bytes": {"reduce_scatter": whole, "broadcast": whole}}, 2, 2, numel)
    assert failed and "broadcast is no part of it" in failed, failed
    assert "never reach the other ranks" not in failed, failed
