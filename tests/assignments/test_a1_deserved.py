"""Assignment 1 graded as deserved: every case of every seed runs and scores on its own (a
crash at one size does not hide the sums of the later seeds), a solution cell that also
imports the course's packages keeps its function, and the feedback names only what the
evidence shows (a ring that pads is not told to pad; a wrong mean is not sent to the chunk
indices when the sums are right)."""
from __future__ import annotations

import pytest

from assignments import a1_ring

pytestmark = pytest.mark.slow

MEAN = '    if op == "mean":\n        tensor.div_(n)\n'
START = "    n = dist.get_world_size(group)\n    r = dist.get_rank(group)\n"


def planted(old: str, new: str) -> str:
    source = a1_ring.reference_source()
    assert source.count(old) == 1, old
    return source.replace(old, new)


def grade(tmp_path, source: str, name="submission.py", **options):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    options.setdefault("seeds", (0, 1, 2))
    return a1_ring.grade_file(path, salt=3, **options)


def points(report) -> dict:
    return {part: t.points for part, t in zip(a1_ring.POINTS, report.tests)}


def test_a_crash_at_one_size_costs_that_size_only_not_the_later_seeds(tmp_path):
    """The ring dies (os._exit) on 1001 elements with op='sum': only the uneven part is lost.
    (Before, the ranks ran seed after seed in one group: the crash at seed 0 left the sums of
    seeds 1 and 2 unrun, and the sum part failed too.)"""
    source = planted(START, START + '    if tensor.numel() == 1001 and op == "sum":\n        import os\n'
                                    '        os._exit(1)\n')
    report = grade(tmp_path, source, world_sizes=(2,))
    assert points(report) == {"sum": 3, "uneven": 0, "mean": 2, "traffic": 2, "p2p": 1}, report.text()
    assert "rank 0 exited with status 1" in report.text() or "rank 1 exited with status 1" in report.text()


def test_a_ring_that_pads_but_hangs_on_fewer_elements_than_ranks_is_not_told_to_pad(tmp_path):
    """Sizes 1001 and 4099 come out right at n=4 (the ring pads); 1 and 3 elements deadlock:
    the feedback says the other uneven sizes pass and that some chunks are empty."""
    source = planted(START, START + "    if tensor.numel() < n:\n        dist.recv(torch.zeros(1), (r + 1) % n)\n")
    report = grade(tmp_path, source, world_sizes=(4,), seeds=(0,))
    uneven = report.tests[list(a1_ring.POINTS).index("uneven")]
    assert not uneven.passed and report.score == 8, report.text()
    assert "pad the buffer" not in uneven.feedback, uneven.feedback
    assert "sizes 1001, 4099 come out right" in uneven.feedback and "chunks are empty" in uneven.feedback


def test_a_wrong_division_of_the_mean_names_the_mean_not_the_chunks(tmp_path):
    report = grade(tmp_path, planted(MEAN, '    if op == "mean":\n        tensor.div_(n - 1)\n'),
                   world_sizes=(4,), seeds=(0,))
    mean = report.tests[list(a1_ring.POINTS).index("mean")]
    assert not mean.passed and report.score == 8, report.text()
    assert "the sums are right, but op='mean' leaves 1.333 x the mean" in mean.feedback, mean.feedback
    assert "chunk" not in mean.feedback


def test_a_solution_cell_that_also_imports_solutions_keeps_its_function(tmp_path):
    """A notebook whose solution cell imports from ``solutions`` (for a helper it never needs
    in the ranks) is graded on its ring (before: the whole cell was dropped, "the wrong
    file?", 0/10 while the self-check gave 10)."""
    import json

    ring = a1_ring.reference_source()
    cells = [
        "import importlib.util, pathlib, sys\nif importlib.util.find_spec('coursefig') is None:\n"
        "    sys.path.insert(0, str(pathlib.Path.cwd()))\n",
        "from solutions.communication import allreduce_bytes_per_rank\n" + ring,
        "from assignments.a1_ring import self_check\n\nscore = self_check(ring_all_reduce)\n",
    ]
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": c, "outputs": [],
                           "execution_count": None} for c in cells],
                "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    report = grade(tmp_path, json.dumps(notebook), name="a1.ipynb", world_sizes=(2,), seeds=(0,))
    assert report.score == report.max_score, report.text()
