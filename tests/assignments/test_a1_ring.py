"""Assignment 1 (ring all-reduce), graded as the autograder grades it: the reference (the
ring the labs run, ``labs.collectives.ring_all_reduce``, which the master notebook calls)
earns every point; the student's stub earns 0 saying so; each planted
mistake loses points with feedback that names it; a built-in collective or a socket to the
outside scores 0."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from assignments import a1_ring
from instructor.student_notebook import write_student_version

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a1-ring-allreduce.md"

pytestmark = pytest.mark.slow


def reference_source() -> str:
    """The reference as a submitted .py: Lab 1's ring, so the mutants below are planted in
    the one implementation the labs run."""
    return a1_ring.reference_source()


def grade_source(tmp_path, source: str, name="submission.py", **kwargs):
    path = tmp_path / name
    path.write_text(source, encoding="utf-8")
    return a1_ring.grade_file(path, seeds=(0,), **kwargs)


def mutate(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the reference no longer holds {old!r}"
    return source.replace(old, new)


def test_reference_scores_full_marks_at_two_world_sizes_and_three_seeds(tmp_path):
    report = a1_ring.grade_file(a1_ring.reference_submission(tmp_path), world_sizes=(2, 4),
                                seeds=(0, 1, 2), salt=7)
    assert report.score == report.max_score == 10, report.text()


def test_the_students_stub_scores_zero_and_says_not_implemented(tmp_path):
    ipynb, _ = write_student_version(MASTER, tmp_path)
    assert "BEGIN SOLUTION" not in ipynb.read_text(encoding="utf-8")
    report = a1_ring.grade_file(ipynb, seeds=(0,))
    assert report.score == 0
    assert "not implemented yet" in report.text()


MUTANTS = {
    # name: (old, new, points lost at least, words the feedback must hold)
    "whole buffer at every step": (
        "exchange(chunks[(r - s) % n], incoming)\n        chunks[(r - s - 1) % n].add_(incoming)",
        "exchange(work.clone(), whole)\n        work.add_(whole) if False else None\n"
        "        chunks[(r - s - 1) % n].add_(whole.chunk(n)[(r - s - 1) % n])",
        2, "whole buffer"),
    "mean forgets to divide": ('    if op == "mean":\n        tensor.div_(n)\n', "", 2, "divide by the world size"),
    "sizes not divisible by n": ("pad = (-flat.numel()) % n", "pad = 0", 2, "not a multiple of the world size"),
    "wrong chunk in the all-gather": ("exchange(chunks[(r + 1 - s) % n], chunks[(r - s) % n])",
                                      "exchange(chunks[(r - s) % n], chunks[(r - s - 1) % n])", 3, "chunk"),
    "built-in collective": ("    r = dist.get_rank(group)\n",
                            "    r = dist.get_rank(group)\n    dist.all_reduce(tensor)\n"
                            "    tensor.div_(n) if op == 'mean' else None\n    return tensor\n", 10, "all_reduce"),
    "deadlock: blocking receive first": (
        "        for req in dist.batch_isend_irecv(ops):\n            req.wait()",
        "        dist.recv(recv, left)\n        dist.send(send, right)", 10, "hung in recv after"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(tmp_path, name):
    old, new, lost, words = MUTANTS[name]
    source = mutate(reference_source(), old, new)
    if name == "whole buffer at every step":
        source = source.replace("incoming = torch.empty_like(chunks[0])",
                                "incoming = torch.empty_like(chunks[0])\n    whole = torch.empty_like(work)")
    report = grade_source(tmp_path, source, world_sizes=(4,) if name != "deadlock: blocking receive first" else (2,))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()
    if name == "wrong chunk in the all-gather":  # no sum right: the bytes wait for one
        assert "counted once a sum comes out right" in report.text(), report.text()
    if name == "deadlock: blocking receive first":  # named as such, with the statement's hint
        assert report.text().count("a deadlock (the statement's hint 'deadlocks'") == 1, report.text()


def test_a_socket_to_the_outside_scores_zero(tmp_path):
    source = mutate(reference_source(), "    r = dist.get_rank(group)\n",
                    "    r = dist.get_rank(group)\n    import socket\n"
                    "    try:\n        socket.create_connection(('192.0.2.1', 80), timeout=0.2)\n"
                    "    except OSError:\n        pass\n")
    report = grade_source(tmp_path, source, world_sizes=(2,))
    assert report.score == 0, report.text()
    assert "socket" in report.text() and "192.0.2.1" in report.text()


def test_the_master_notebook_calls_the_labs_ring_and_its_student_version_does_not():
    """One implementation: the master's solution cell runs the labs' ring (so its self-check
    output is the labs' ring graded), and the student's version of it holds a stub."""
    import jupytext

    from instructor.student_notebook import BEGIN, END, strip_solutions

    cell = next(c.source for c in jupytext.read(MASTER).cells if BEGIN in c.source)
    region = cell.split(BEGIN, 1)[1].split(END, 1)[0]
    assert "from labs.collectives import ring_all_reduce" in region
    stub, regions, _ = strip_solutions(cell)
    assert regions == 1 and "labs.collectives" not in stub and "NotImplementedError" in stub


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="forked ranks drop to an unprivileged user only when the grader runs as root")
def test_self_check_works_from_a_checkout_the_ranks_cannot_read(tmp_path):
    """The master notebook's answer imports ``labs.collectives`` inside a rank, and a forked
    rank runs as an unprivileged user: from a clone in a 0700 folder (``mktemp -d``) it could
    not read the module, and scored 0. The self-check imports it before the ranks fork."""
    import shutil
    import subprocess
    import sys

    from sandbox.multirank import namespaces_available

    if not namespaces_available()[0]:
        pytest.skip("no namespaces here: the ranks keep the grader's user")
    hidden = tmp_path / "private"
    shutil.copytree(ROOT / "labs", hidden / "labs", ignore=shutil.ignore_patterns("__pycache__"))
    hidden.chmod(0o700)
    program = (
        "import sys\n"
        f"sys.path[:0] = [{str(hidden)!r}, {str(ROOT)!r}]\n"
        "from assignments.a1_ring import self_check\n"
        "def ring_all_reduce(tensor, op='sum'):\n"
        "    from labs.collectives import ring_all_reduce as course_ring\n"
        "    return course_ring(tensor, op=op)\n"
        "print('SCORE', self_check(ring_all_reduce))\n")
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "No module named 'labs'" not in out.stdout
    last = out.stdout.strip().splitlines()[-1].split()
    assert last[0] == "SCORE" and float(last[1]) == pytest.approx(10, abs=1e-9), out.stdout[-2000:]


# Two half-buffers going round in opposite directions, each cut by tensor_split: a correct
# ring whose chunks differ by an element at sizes like 3 x 37 (the halves do not divide by n).
TWO_WAY_RING = '''import torch
import torch.distributed as dist


def _ring(flat, n, r, step):
    chunks = list(torch.tensor_split(flat, n))
    to, frm = (r + step) % n, (r - step) % n

    def exchange(send, recv):
        ops = [dist.P2POp(dist.isend, send.contiguous(), to), dist.P2POp(dist.irecv, recv, frm)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()

    for s in range(n - 1):
        i = (r - step * (s + 1)) % n
        incoming = torch.empty_like(chunks[i])
        exchange(chunks[(r - step * s) % n], incoming)
        chunks[i].add_(incoming)
    for s in range(n - 1):
        i = (r - step * s) % n
        incoming = torch.empty_like(chunks[i])
        exchange(chunks[(r + step * (1 - s)) % n], incoming)
        chunks[i].copy_(incoming)


def ring_all_reduce(tensor, op="sum"):
    n, r = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1)
    half = flat.numel() // 2
    _ring(flat[:half], n, r, 1)
    _ring(flat[half:], n, r, -1)
    if op == "mean":
        tensor.div_(n)
    return tensor
'''


def test_a_two_way_ring_with_uneven_chunks_earns_the_traffic_points(tmp_path):
    report = grade_source(tmp_path, TWO_WAY_RING, world_sizes=(3, 4), salt=2)
    assert report.score == report.max_score, report.text()


def test_the_traffic_allowance_is_less_than_one_chunk_at_every_graded_size():
    for n in range(2, 9):
        for size in a1_ring.divisible_sizes(n):
            assert a1_ring.traffic_slack(n) < 4 * size / n


# Rabenseifner's all-reduce: reduce-scatter by recursive halving, all-gather by recursive
# doubling. It sends 2 (n-1)/n of the buffer like a ring, but pairs rank r with r XOR 2^k,
# so it only works when n is a power of two; the statement asks for any n from 2 to 8.
HALVING_DOUBLING = '''import torch
import torch.distributed as dist


def _swap(send, recv, peer):
    ops = [dist.P2POp(dist.isend, send.contiguous(), peer), dist.P2POp(dist.irecv, recv, peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()


def ring_all_reduce(tensor, op="sum"):
    n, r = dist.get_world_size(), dist.get_rank()
    flat = tensor.view(-1)
    size = flat.numel()
    buf = torch.zeros(-(-size // n) * n, dtype=flat.dtype)
    buf[:size] = flat
    lo, hi = 0, buf.numel()
    mask = n // 2
    while mask >= 1:
        mid = (lo + hi) // 2
        keep, give = ((mid, hi), (lo, mid)) if r & mask else ((lo, mid), (mid, hi))
        incoming = torch.empty(keep[1] - keep[0], dtype=buf.dtype)
        _swap(buf[give[0]:give[1]], incoming, r ^ mask)
        buf[keep[0]:keep[1]] += incoming
        lo, hi = keep
        mask //= 2
    mask = 1
    while mask < n:
        width = hi - lo
        other = (lo - width, lo) if r & mask else (hi, hi + width)
        incoming = torch.empty(width, dtype=buf.dtype)
        _swap(buf[lo:hi], incoming, r ^ mask)
        buf[other[0]:other[1]] = incoming
        lo, hi = min(lo, other[0]), max(hi, other[1])
        mask *= 2
    flat.copy_(buf[:size])
    if op == "mean":
        tensor.div_(n)
    return tensor
'''


def test_an_all_reduce_that_needs_a_power_of_two_ranks_loses_points_at_the_odd_world_size(tmp_path):
    # right wherever n is a power of two: full marks at 2 and 4 ...
    even = grade_source(tmp_path, HALVING_DOUBLING, world_sizes=(2, 4), salt=3)
    assert even.score == even.max_score == 10, even.text()
    # ... but the grader also runs an odd world size, where r XOR 1 has no partner
    assert 3 in a1_ring.WORLD_SIZES
    graded = grade_source(tmp_path, HALVING_DOUBLING, salt=3)
    assert graded.score < graded.max_score, graded.text()
    assert "n=3" in graded.text() and "powers of two" in graded.text(), graded.text()
    # its send to rank 3, which does not exist, is an error of its own, not data sent around the ranks
    assert "rank 3, which does not exist" in graded.text() and "rendezvous store" not in graded.text(), graded.text()
    # the class report counts both as known mistakes
    found = {name for name, words in a1_ring.MISTAKES.items() if words in graded.text()}
    assert {"a method that needs a power of two ranks (halving and doubling)",
            "a send or receive to a rank that does not exist"} <= found, found
