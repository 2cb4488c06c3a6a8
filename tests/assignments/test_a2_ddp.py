"""Assignment 2 (DDP by hand), graded as the autograder grades it: the reference from the
master notebook earns every point at world sizes 2 and 4 and three seeds; the student's
stub earns 0 saying so; each planted mistake loses points with feedback naming it."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from sandbox.multirank import ISOLATION_ORDER

from assignments import a2_ddp

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a2-ddp-by-hand.md"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference_reports():
    """The master graded once per world size (three seeds each)."""
    return {n: a2_ddp.grade_file(MASTER, world_sizes=(n,), seeds=a2_ddp.SEEDS, salt=11) for n in (2, 4)}


@pytest.mark.parametrize("n", [2, 4])
def test_reference_scores_full_marks_at_three_seeds(reference_reports, n):
    report = reference_reports[n]
    assert report.max_score == sum(a2_ddp.POINTS.values()) == 10
    assert report.score == report.max_score, report.text()
    # The class report's isolation column reads this: the grader says how its ranks ran.
    assert report.isolated in (True, False)
    assert report.isolation in ISOLATION_ORDER and report.isolated == (report.isolation == "namespaces")


def test_the_buckets_differ_in_forward_and_reverse_order_at_every_bucket_size():
    """Otherwise the grader could not tell the two orders apart."""
    sizes = a2_ddp.param_bytes(a2_ddp.make_model(0))
    for cap in a2_ddp.BUCKET_BYTES:
        reverse = sorted(sum(sizes[i] for i in b) for b in a2_ddp.buckets(sizes, cap))
        forward = sorted(sum(sizes[i] for i in b) for b in a2_ddp.buckets(sizes, cap, reverse=False))
        assert reverse != forward and len(reverse) >= 2, cap
        assert sum(reverse) == sum(sizes)


def test_the_statement_states_the_graders_numbers():
    text = MASTER.read_text(encoding="utf-8")
    assert f"relative L2 difference of {a2_ddp.GRAD_TOL:.0e}" in text
    assert f"after {a2_ddp.STEPS} AdamW" in text
    counts = ", ".join(str(m) for m in a2_ddp.MICROS[:-1]) + f" and {a2_ddp.MICROS[-1]}"
    assert f"micro-batches per step each: {counts}" in text
    assert f"to {a2_ddp.PARAM_TOL:.0e} of the update" in text
    lr, eps, wd = map(float, re.search(r"lr=([\d.e-]+), eps=([\d.e-]+), weight_decay=([\d.e-]+)", text).groups())
    assert (lr, eps, wd) == pytest.approx((a2_ddp.LR, a2_ddp.EPS, a2_ddp.WEIGHT_DECAY), rel=1e-12)
    assert f"({a2_ddp.POINTS['result']} points)" in text and f"({a2_ddp.POINTS['no_sync']} point)" in text


def test_the_students_stub_scores_zero_and_says_not_implemented(grade_stub):
    report = grade_stub(a2_ddp, MASTER, world_sizes=(2,), seeds=(0,))
    assert report.score == 0, report.text()
    assert "not implemented yet" in report.text()


MUTANTS = {
    # name: (old, new, points lost at least, words the feedback must hold)
    "a bucket all-reduced before it is full": (
        "if self.ready[b] == len(self.buckets[b]):", "if self.ready[b] == 1:", 5, "before it was full"),
    "buckets in forward order": (
        "for p in reversed(list(model.parameters())):", "for p in list(model.parameters()):",
        2, "buckets in forward order"),
    "mean not divided by the world size": (
        "            flat.div_(self.world)\n", "", 3, "divide by the world size (2)"),
    "all-reduce during no_sync": (
        "        if not self.syncing:\n            return\n", "", 4, "inside no_sync"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(grade_planted, name):
    old, new, lost, words = MUTANTS[name]
    report = grade_planted(a2_ddp, MASTER, (old, new), world_sizes=(2,), seeds=(0,))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()


def test_an_all_reduce_after_the_backward_pass_loses_the_overlap_points(grade_planted):
    """All buckets all-reduced in finish_gradient_synchronization: right gradients, no overlap."""
    report = grade_planted(
        a2_ddp, MASTER,
        ("            self.in_flight.append((b, flat, dist.all_reduce(flat, async_op=True)))\n",
         "            self.in_flight.append((b, flat, None))\n"),
        ("        for b, flat, work in self.in_flight:\n            work.wait()\n",
         "        for b, flat, work in self.in_flight:\n            dist.all_reduce(flat, async_op=True).wait()\n"),
        world_sizes=(2,), seeds=(0,))
    failed = {t.name for t in report.tests if not t.passed}
    assert failed == {a2_ddp.TITLES["overlap"]}, report.text()
    assert "only after the backward pass has ended" in report.text(), report.text()


A2_LAUNCH = "            self.in_flight.append((b, flat, dist.all_reduce(flat, async_op=True)))\n"
A2_WAIT = "            work.wait()\n"
#: The same asynchronous all-reduce started by other names: torch.distributed's own module,
#: and the process group's method (asynchronous by nature).
OTHER_NAMES = {
    "distributed_c10d.all_reduce": "dist.distributed_c10d.all_reduce(flat, async_op=True)",
    "the process group's allreduce": "dist.group.WORLD.allreduce([flat])",
}


@pytest.mark.parametrize("call", OTHER_NAMES.values(), ids=list(OTHER_NAMES))
def test_an_all_reduce_started_by_another_name_must_still_be_waited_for(grade_planted, call):
    """Before, only ``dist.all_reduce`` was watched: through another name a class that never
    waited for its buckets earned the overlap part (the grader lets the group go idle after each
    backward pass, so its gradients were right)."""
    launch = (A2_LAUNCH, A2_LAUNCH.replace("dist.all_reduce(flat, async_op=True)", call))
    waited = grade_planted(a2_ddp, MASTER, launch, world_sizes=(2,), seeds=(0,), salt=1)
    assert waited.score == waited.max_score, waited.text()
    never = grade_planted(a2_ddp, MASTER, launch, (A2_WAIT, ""), world_sizes=(2,), seeds=(0,), salt=1)
    assert {t.name for t in never.tests if not t.passed} == {a2_ddp.TITLES["overlap"]}, never.text()
    assert "not waited for before the optimizer step" in never.text(), never.text()


#: torch's own DistributedDataParallel doing the assignment's work: its buckets sized to the
#: statement's, its forward bookkeeping run from the model's forward hooks (the grader calls
#: the model, not the wrapper), and its bucket rebuild skipped (a broadcast).
BUILT_IN_DDP = '''import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


class BucketedDDP:
    def __init__(self, model, bucket_bytes):
        sizes, size = [], 0
        for p in reversed(list(model.parameters())):
            size += p.numel() * p.element_size()
            if size >= bucket_bytes:
                sizes.append(size)
                size = 0
        if size:
            sizes.append(size)
        caps = [s / 2**20 for s in reversed(sizes)]
        self.ddp = DistributedDataParallel(model, bucket_cap_mb_list=caps, init_sync=False)
        model.register_forward_pre_hook(lambda m, args: self._before())
        model.register_forward_hook(lambda m, args, out: self._after())

    def _before(self):
        if torch.is_grad_enabled() and self.ddp.require_backward_grad_sync:
            self.ddp.reducer.prepare_for_forward()

    def _after(self):
        if torch.is_grad_enabled() and self.ddp.require_backward_grad_sync:
            self.ddp.reducer.prepare_for_backward([])

    def no_sync(self):
        return self.ddp.no_sync()

    def finish_gradient_synchronization(self):
        pass
'''


def test_torchs_own_ddp_inside_the_class_earns_nothing(tmp_path):
    """The statement asks for the mechanism written by hand; before, this class scored 10/10."""
    path = tmp_path / "builtin.py"
    path.write_text(BUILT_IN_DDP, encoding="utf-8")
    report = a2_ddp.grade_file(path, world_sizes=(2,), seeds=(0,), salt=1)
    assert report.score == 0, report.text()
    assert "DistributedDataParallel" in report.text(), report.text()
    assert "Traceback" not in report.text()


def test_a_no_sync_that_does_nothing_is_caught_whatever_the_seed(grade_planted):
    """A no_sync that does nothing, its hooks counting every micro-batch's gradients and
    starting a bucket at twice its size: right only where each step has exactly two
    micro-batches. Before, every seed had two, and this class scored 10/10."""
    report = grade_planted(a2_ddp, MASTER, (
        "        self.syncing = False\n        try:\n            yield\n        finally:\n"
        "            self.syncing = True\n", "        yield\n"),
        ("        if self.ready[b] == len(self.buckets[b]):\n",
         "        if self.ready[b] == 2 * len(self.buckets[b]):\n"), world_sizes=(2,), seeds=(0,), salt=1)
    assert report.score <= report.max_score - 4, report.text()
    assert "inside no_sync" in report.text(), report.text()


def test_the_seeds_differ_in_the_number_of_micro_batches():
    """One seed steps after one backward pass (no no_sync at all), the others after several
    (the self-check's seed after more than two)."""
    counts = [a2_ddp.micro_for(seed) for seed in a2_ddp.SEEDS]
    assert 1 in counts and len(set(counts)) == len(counts)
    assert a2_ddp.micro_for(a2_ddp.SEEDS[0]) > 2


def test_a_file_without_the_class_is_told_the_class_is_missing(tmp_path):
    """The class is called a class in the one line that says it is missing (not a function)."""
    path = tmp_path / "other.py"
    path.write_text("import torch\n\n\ndef helper():\n    return 1\n", encoding="utf-8")
    report = a2_ddp.grade_file(path, world_sizes=(2,), seeds=(0,), salt=1)
    assert report.score == 0 and "no class `BucketedDDP` in the submission" in report.text(), report.text()


#: The hooks start no all-reduce and finish waits for none: nothing is ever synchronised.
NO_ALL_REDUCE = (("            self.in_flight.append((b, flat, dist.all_reduce(flat, async_op=True)))\n",
                  "            self.in_flight.append((b, flat, None))\n"), (A2_WAIT, ""))


def test_a_missing_all_reduce_is_said_for_the_steps_micro_batch_count():
    """The rank's events: a step of one micro-batch has no no_sync, so its missing all-reduce
    is in the step's only backward pass; a step of two misses it after the no_sync one."""
    sizes = a2_ddp.param_bytes(a2_ddp.make_model(0))
    one = [["b", 0, 0, True], ["e"], ["f"]]
    two = [["b", 0, 0, False], ["e"], ["b", 0, 1, True], ["e"], ["f"]]
    said = {count: a2_ddp.check_events({"events": events}, sizes, a2_ddp.BUCKET_BYTES[0])["no_sync"]
            for count, events in ((1, one), (2, two))}
    assert "in the step's only backward pass" in said[1] and "no_sync micro-batches" not in said[1], said
    assert "after the no_sync micro-batches" in said[2] and "only backward pass" not in said[2], said


@pytest.mark.parametrize("micro", [1, 3])
def test_a_missing_all_reduce_seen_on_the_wire_is_said_for_the_seeds_micro_batch_count(grade_planted, micro):
    """The traffic between the ranks decides the no_sync part; its feedback names the seed's
    micro-batch count too (one: no no_sync at all)."""
    seed = next(s for s in a2_ddp.SEEDS if a2_ddp.micro_for(s) == micro)
    report = grade_planted(a2_ddp, MASTER, *NO_ALL_REDUCE, world_sizes=(2,), seeds=(seed,), salt=1)
    said = report.tests[list(a2_ddp.POINTS).index("no_sync")].feedback
    if micro == 1:
        assert "no all-reduce seen in the step's only backward pass" in said, report.text()
    else:
        assert "no all-reduce seen after the no_sync micro-batches" in said, report.text()


def test_torchs_reducer_built_by_hand_earns_nothing(tmp_path):
    """The C++ Reducer that DistributedDataParallel is built on, built directly by the class,
    is refused as DistributedDataParallel is."""
    path = tmp_path / "reducer.py"
    path.write_text(
        "import contextlib\nimport torch.distributed as dist\n\n\nclass BucketedDDP:\n"
        "    def __init__(self, model, bucket_bytes):\n"
        "        params = list(model.parameters())\n"
        "        self.reducer = dist.Reducer(params, [list(range(len(params)))], [bucket_bytes], dist.group.WORLD)\n\n"
        "    @contextlib.contextmanager\n    def no_sync(self):\n        yield\n\n"
        "    def finish_gradient_synchronization(self):\n        pass\n", encoding="utf-8")
    report = a2_ddp.grade_file(path, world_sizes=(2,), seeds=(0,), salt=1)
    assert report.score == 0, report.text()
    assert "its Reducer" in report.text() and "Traceback" not in report.text(), report.text()
