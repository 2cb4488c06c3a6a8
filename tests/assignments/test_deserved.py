"""Assignments 2 to 5 graded as deserved (issue 31): a structure the statement requires is
checked (A2's hook does not wait), unusual correct answers earn full marks (A3's list-form
collectives, ZeRO-1 by reduce-scatter as section 7 teaches it), a part's points do not hang
on another part (A3's state), a wrong answer never outscores a less wrong one (A5), and the
feedback names what the evidence shows (A3 a kept gradient, A4 g's backward, A5 the rank
that raised). Each planted in the master's reference, graded at one world size and seed."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import a2_ddp, a3_zero, a4_tp, a5_pipeline

ROOT = Path(__file__).resolve().parents[2]
MASTERS = {module: ROOT / "assignments" / name for module, name in (
    (a2_ddp, "a2-ddp-by-hand.md"), (a3_zero, "a3-zero-sharded-optimizer.md"),
    (a4_tp, "a4-tensor-parallel.md"), (a5_pipeline, "a5-pipeline-1f1b.md"))}

pytestmark = pytest.mark.slow


def grade(grade_planted, module, *pairs, world_sizes=(2,), **options):
    return grade_planted(module, MASTERS[module], *pairs, world_sizes=world_sizes, seeds=(0,), salt=1, **options)


def lost(report) -> set:
    return {t.name for t in report.tests if not t.passed}


def feedback(report, module, part) -> str:
    return report.tests[list(module.POINTS).index(part)].feedback


def test_a2_a_hook_that_waits_for_its_all_reduce_loses_the_overlap_part(grade_planted):
    report = grade(grade_planted, a2_ddp, (
        "            self.in_flight.append((b, flat, dist.all_reduce(flat, async_op=True)))\n",
        "            work = dist.all_reduce(flat, async_op=True)\n            work.wait()\n"
        "            self.in_flight.append((b, flat, work))\n"))
    assert lost(report) == {a2_ddp.TITLES["overlap"]}, report.text()
    assert "the hook waits for its all-reduce" in report.text()


A2_WAIT = "        for b, flat, work in self.in_flight:\n            work.wait()\n"
A2_FUTURE_WAITS = {
    "the work's future": (A2_WAIT, "        for b, flat, work in self.in_flight:\n            work.get_future().wait()\n"),
    "torch.futures.wait_all": (A2_WAIT, "        torch.futures.wait_all([w.get_future() for _, _, w in self.in_flight])\n"
                                        "        for b, flat, work in self.in_flight:\n"),
    "torch.futures.collect_all": (A2_WAIT, "        torch.futures.collect_all([w.get_future() for _, _, w in self.in_flight])"
                                           ".wait()\n        for b, flat, work in self.in_flight:\n"),
}


@pytest.mark.parametrize("pair", A2_FUTURE_WAITS.values(), ids=list(A2_FUTURE_WAITS))
def test_a2_waiting_through_the_works_future_is_a_wait(grade_planted, pair):
    """DDP's communication hooks wait on ``work.get_future()``; before, such a wait went
    unseen and a correct class lost the overlap part ("not waited for before the step")."""
    report = grade(grade_planted, a2_ddp, pair)
    assert report.score == report.max_score, report.text()


A2_FUTURES_NEVER_WAITED = {
    "the work's future": (A2_WAIT, "        for b, flat, work in self.in_flight:\n            work.get_future()\n"),
    "torch.futures.collect_all": (A2_WAIT, "        torch.futures.collect_all([w.get_future() for _, _, w in self.in_flight])"
                                           "\n        for b, flat, work in self.in_flight:\n"),
}


@pytest.mark.parametrize("pair", A2_FUTURES_NEVER_WAITED.values(), ids=list(A2_FUTURES_NEVER_WAITED))
def test_a2_a_future_never_waited_for_still_loses_the_overlap_part(grade_planted, pair):
    """A future taken, or collected with others by collect_all, is no wait until its own wait()."""
    report = grade(grade_planted, a2_ddp, pair)
    assert lost(report) == {a2_ddp.TITLES["overlap"]}, report.text()
    assert "not waited for before the optimizer step" in report.text()


def test_a2_a_class_that_does_nothing_scores_nothing(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("import contextlib\n\n\nclass BucketedDDP:\n    def __init__(self, model, bucket_bytes):\n"
                    "        pass\n\n    @contextlib.contextmanager\n    def no_sync(self):\n        yield\n\n"
                    "    def finish_gradient_synchronization(self):\n        pass\n", encoding="utf-8")
    report = a2_ddp.grade_file(path, world_sizes=(2,), seeds=(0,), salt=1)
    assert report.score == 0, report.text()


A3_LIST_FORMS = (("dist.reduce_scatter_single(grad, grads)", "dist.reduce_scatter(grad, list(grads.chunk(self.world)))"),
                 ("dist.all_gather_single(full, self.shard.detach())",
                  "dist.all_gather(list(full.chunk(self.world)), self.shard.detach())"))


A3_STAGE1_ALL_REDUCE = (("        grad = torch.empty_like(self.shard)\n        dist.reduce_scatter_single(grad, grads)\n",
                         "        if self.stage == 1:\n            dist.all_reduce(grads)\n"
                         "            grad = grads[self.lo:self.lo + self.shard_numel]\n        else:\n"
                         "            grad = torch.empty_like(self.shard)\n"
                         "            dist.reduce_scatter_single(grad, grads)\n"),)


@pytest.mark.parametrize("pairs", [A3_LIST_FORMS, A3_STAGE1_ALL_REDUCE],
                         ids=["list-form collectives", "ZeRO-1 by all-reduce, 1.5x"])
def test_a3_correct_variants_score_full_marks(grade_planted, pairs):
    """(ZeRO-1 by reduce-scatter, as section 7 teaches it, is the reference itself: before,
    it lost stage 1's traffic point, the grader wanting an all-reduce.)"""
    report = grade(grade_planted, a3_zero, *pairs, world_sizes=(2, 4))
    assert report.score == report.max_score, report.text()


def test_a3_a_kept_gradient_is_named_as_a_gradient_not_as_the_moments(grade_planted):
    report = grade(grade_planted, a3_zero, ("        grad = torch.empty_like(self.shard)\n",
                                            "        self.kept = grads\n        grad = torch.empty_like(self.shard)\n"))
    assert lost(report) == {a3_zero.TITLES["state"]}, report.text()
    text = feedback(report, a3_zero, "state")
    assert "own gradient of the last step" in text and "moments for all P" not in text, text


def test_a3_the_state_part_is_judged_on_its_own(grade_planted):
    """No all-gather: every result and traffic point goes, the state (the moments of one
    shard, kept as it should be) stays (before, the state's points waited for a result)."""
    report = grade(grade_planted, a3_zero, (
        "dist.all_gather_single(full, self.shard.detach())",
        "full.copy_(torch.cat([p.detach().reshape(-1) for p in self.params]))\n"
        "        full[self.lo:self.lo + self.shard_numel] = self.shard.detach()"))
    assert report.score == a3_zero.POINTS["state"], report.text()


def test_a4_a_wrong_backward_of_g_is_blamed_on_g_not_on_f(grade_planted):
    """g's backward divides by the world size: each rank's input gradient is 1/n of the whole,
    which summed over the ranks looks like f's missing all-reduce; g's own check says g."""
    report = grade(grade_planted, a4_tp, ("        return grad\n        ### END SOLUTION\n\n\ndef shard_mlp",
                                          "        return grad / dist.get_world_size()\n        ### END SOLUTION\n\n\n"
                                          "def shard_mlp"))
    mlp = feedback(report, a4_tp, "mlp")
    assert "g's backward is wrong on its own" in mlp and "f (an all-reduce" not in mlp, report.text()
    assert not report.tests[list(a4_tp.POINTS).index("g")].passed


def test_a5_a_1f1b_wrong_only_for_few_micro_batches_scores_above_gpipe(grade_planted):
    short = grade(grade_planted, a5_pipeline, ("    warmup = min(p - stage - 1, m)\n", "    warmup = p - stage - 1\n"))
    gpipe = grade(grade_planted, a5_pipeline, ("    warmup = min(p - stage - 1, m)\n", "    warmup = m\n"))
    assert lost(short) == {a5_pipeline.TITLES["passes"]}, short.text()
    assert short.score == 8 > gpipe.score == 7, (short.text(), gpipe.text())


def test_a5_a_crash_on_one_rank_is_that_ranks_error_not_the_others_hang(grade_planted):
    """The last stage raises at the first seed (m = 5), then, at the next seed, waits for a
    message that never comes, while rank 0 still waits for its first gradient. Before, the
    first case said "rank 0 hung in recv"; its cause is rank 1's AttributeError."""
    report = grade_planted(a5_pipeline, MASTERS[a5_pipeline], (
        "    first, last = rank == 0, rank == p - 1\n",
        "    first, last = rank == 0, rank == p - 1\n    if last and m == 5:\n        None.missing_attribute\n"
        "    if last:\n        dist.recv(torch.zeros(1), 0, tag=7)\n"),
        world_sizes=(2,), seeds=(0, 1), salt=1)
    text = feedback(report, a5_pipeline, "run_result")
    assert "rank 1 raised AttributeError" in text, report.text()
    assert not text.split("raised")[0].rstrip().endswith("hung in recv"), text
