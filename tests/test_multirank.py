"""autograde.multirank: a submission's ranks run as one group that leaves nothing behind and
cannot reach another group. Needs root for the namespaces: skipped elsewhere with the reason,
a failure under CI."""
from __future__ import annotations

import json
import os
import random
import socket
import threading
import time

import pytest

from autograde.multirank import Limits, namespaces_available, run_ranks

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


@pytest.fixture(scope="module")
def isolated():
    ok, why = namespaces_available()
    if not ok:
        if IN_CI:
            pytest.fail(f"multi-rank sandbox: {why} (CI runs as root)")
        pytest.skip(f"multi-rank sandbox: {why}")


def _marker_processes(marker: str) -> list:
    found = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except (OSError, ValueError):
            pass
    return found


def test_a_rank_that_forks_sleeps_and_keeps_a_socket_leaves_nothing(isolated):
    marker = f"{random.randrange(10**6, 10**7)}.25"

    def main(rank, n, data, report):
        if os.fork() == 0:  # a daemon holding a listening socket, then sleeping forever
            os.setsid()
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            s.listen()
            os.execv("/bin/sleep", ["sleep", marker])
        report({"forked": True})
        time.sleep(1000)

    result = run_ranks(2, main, [b"", b""], Limits(wall_s=3, stall_s=5))
    assert result.outcome == "timeout" and "did not finish within 3 s" in result.detail
    assert _marker_processes(marker) == []


@pytest.mark.slow
def test_a_deadlock_is_named_by_rank_and_call(isolated):
    def main(rank, n, data, report):
        import torch
        import torch.distributed as dist

        dist.recv(torch.zeros(1), src=1 - rank)  # both wait: nobody sends

    result = run_ranks(2, main, [b"", b""], Limits(wall_s=30, stall_s=2))
    assert result.outcome == "hung"
    assert result.detail in ("rank 0 hung in recv after 2 s", "rank 1 hung in recv after 2 s")


@pytest.mark.slow
def test_two_groups_at_once_cannot_see_each_other(isolated):
    """Group A listens on a port of its loopback; group B, at the same time, tries to connect
    to that port and finds nothing. Both also use the same rendezvous port, which only works
    because each has a loopback of its own."""
    port = 41234

    def listener(rank, n, data, report):
        if rank == 0:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            report({"listening": True})
            time.sleep(3)

    def prober(rank, n, data, report):
        if rank == 0:
            time.sleep(1)
            reached = False
            for _ in range(10):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    reached = True
                except OSError:
                    time.sleep(0.1)
            report({"reached": reached})

    results = {}
    threads = [threading.Thread(target=lambda k=k, f=f: results.__setitem__(k, run_ranks(2, f, [b"", b""], Limits(wall_s=20))))
               for k, f in (("a", listener), ("b", prober))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"].ok and results["b"].ok, (results["a"].detail, results["b"].detail)
    assert results["a"].messages[0] == [{"listening": True}]
    assert results["b"].messages[0] == [{"reached": False}]
    assert results["a"].isolated and results["b"].isolated


def _waits_for_a_sleeping_peer(rank, world_size, payload, report):
    import torch
    import torch.distributed as dist

    if rank == 1:
        time.sleep(30)
    dist.all_reduce(torch.ones(4), async_op=True).wait()


@pytest.mark.slow
def test_a_wait_on_an_asynchronous_collective_is_named_when_it_hangs():
    """``dist.all_reduce(..., async_op=True)`` returns at once; the hang is in ``wait()``."""
    result = run_ranks(2, _waits_for_a_sleeping_peer, [b"x", b"x"], Limits(wall_s=30, stall_s=2))
    assert result.outcome == "hung", result.detail
    assert result.detail == "rank 0 hung in collective wait after 2 s"
    assert result.wall_s < 15
