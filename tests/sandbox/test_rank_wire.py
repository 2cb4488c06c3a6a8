"""What the grader sees between a group's ranks (sandbox.wire): each operation alone, on two
and four ranks, counted from the packets on the group's loopback, matches what the
assignments' formulas say it sends; and what a rank does past torch.distributed's functions
(the backend called directly, the rendezvous store, raw bytes on gloo's sockets) is seen.
If a new torch changes gloo's wire, these fail, not a student's grade."""
from __future__ import annotations

import os

import pytest

from sandbox import multirank
from sandbox.multirank import Limits, RankProgram, run_ranks

OPS = '''
import torch, torch.distributed as dist

def main(ctx):
    n, r, N = ctx.world_size, ctx.rank, 1024
    steps = [
        ("send", lambda: dist.send(torch.ones(N), 1) if r == 0 else (dist.recv(torch.zeros(N), 0) if r == 1 else None)),
        ("all_reduce", lambda: dist.all_reduce(torch.ones(N))),
        ("reduce_scatter", lambda: dist.reduce_scatter_single(torch.empty(N // n), torch.ones(N))),
        ("reduce_scatter list", lambda: dist.reduce_scatter(torch.empty(N // n), list(torch.ones(N).chunk(n)))),
        ("all_gather", lambda: dist.all_gather_single(torch.empty(N), torch.ones(N // n))),
        ("all_gather list", lambda: dist.all_gather(list(torch.empty(N).chunk(n)), torch.ones(N // n))),
        ("backend all_reduce", lambda: dist.group.WORLD._get_backend(torch.device("cpu")).allreduce([torch.ones(N)]).wait()),
        ("all_to_all", lambda: dist.all_to_all_single(torch.empty(N), torch.ones(N))),
        ("store", lambda: dist.distributed_c10d._get_default_store().set(f"k{r}", b"x" * 4000)),
    ]
    for k, (name, run) in enumerate(steps):
        run()
        ctx.checkpoint(name, case=k)
'''


class Together:
    """Every rank goes on from a checkpoint once all are there (one cut per operation)."""

    def __init__(self, n):
        self.n, self.waiting = n, {}

    def arrive(self, rank, message):
        self.waiting[rank] = message
        if len(self.waiting) < self.n:
            return {}
        answers, self.waiting = {r: "go" for r in self.waiting}, {}
        return answers

    def finished(self, rank):
        return {}


@pytest.mark.parametrize("n", [2, 4])
def test_each_operation_is_seen_with_the_bytes_of_its_formula(n):
    if not multirank.namespaces_available()[0] or os.environ.get("AUTOGRADE_RANK_ISOLATION", "auto") not in ("auto", "namespaces"):
        pytest.skip("the traffic is seen in a group's own network namespace")
    result = run_ranks(n, RankProgram(modules=(("ops", OPS),), entry="ops:main"), [b""] * n, Limits(wall_s=60),
                       checkpoints=Together(n))
    assert result.ok, result.detail
    seen = {s["checkpoint"]: s["traffic"] for s in result.segments}
    size, ring = 4096, (n - 1) / n
    assert [t["p2p"] for t in seen["send"]] == [size] + [0] * (n - 1)
    for name, prefix, per_rank in (("all_reduce", "all_reduce", 2 * ring * size),
                                   ("reduce_scatter", "all_reduce", 2 * ring * size),  # gloo: an all-reduce
                                   ("reduce_scatter list", "all_reduce", 2 * ring * size),
                                   ("all_gather", "all_gather", ring * size),
                                   ("all_gather list", "all_gather", ring * size),
                                   ("backend all_reduce", "all_reduce", 2 * ring * size),
                                   ("all_to_all", "all_to_all", ring * size)):  # its own share stays
        assert [t["collectives"].get(prefix) for t in seen[name]] == [per_rank] * n, (name, seen[name])
        assert all(t["p2p"] == 0 and t["store"] == 0 and t["garbage"] == 0 for t in seen[name]), name
    assert all(t["store"] >= 4000 for t in seen["store"]), seen["store"]
    assert result.unowned_bytes == 0 and result.wire_complete
