"""sandbox.multirank: a submission's ranks run as one group that leaves nothing behind and
cannot reach another group. Needs root for the namespaces: skipped elsewhere with the reason,
a failure under CI."""
from __future__ import annotations

import os
import random
import socket
import threading
import time

import pytest

from sandbox.multirank import Limits, namespaces_available, run_ranks

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
            try:  # (the system-call filter refuses both: it sleeps all the same)
                os.setsid()
                s = socket.socket()
                s.bind(("127.0.0.1", 0))
                s.listen()
            except PermissionError:
                pass
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
    because each has a loopback of its own. (The sockets are made in ``prepare``, which runs
    before the system-call filter that refuses new sockets to student code.)"""
    import torch.distributed as dist

    port, state = 41234, {}

    def listen():
        if dist.get_rank() == 0:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen()
            state["socket"] = s  # stays open while the rank sleeps

    def probe():
        if dist.get_rank() == 0:
            time.sleep(1)
            state["reached"] = False
            for _ in range(10):
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                    state["reached"] = True
                except OSError:
                    time.sleep(0.1)

    def listener(rank, n, data, report):
        if rank == 0:
            report({"listening": "socket" in state})
            time.sleep(3)

    def prober(rank, n, data, report):
        if rank == 0:
            report({"reached": state["reached"]})

    results = {}
    threads = [threading.Thread(target=lambda k=k, f=f, p=p: results.__setitem__(
        k, run_ranks(2, f, [b"", b""], Limits(wall_s=20), prepare=p)))
               for k, f, p in (("a", listener, listen), ("b", prober, probe))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results["a"].ok and results["b"].ok, (results["a"].detail, results["b"].detail)
    assert results["a"].messages[0] == [{"listening": True}]
    assert results["b"].messages[0] == [{"reached": False}]
    assert results["a"].isolated and results["b"].isolated


def test_a_rank_runs_under_the_exercises_system_call_filter():
    """After the rendezvous a rank may not open a socket (gloo's are open already), leave its
    process group or take a record lock: the confined/ seccomp filter, reused. The ring's
    own sends still work (the A1 tests grade through it)."""
    def main(rank, n, data, report):
        import fcntl
        import tempfile

        refused = {}
        for name, attempt in (("socket", lambda: socket.socket()), ("setsid", os.setsid),
                              ("lock", lambda: fcntl.lockf(tempfile.TemporaryFile(), fcntl.LOCK_EX))):
            try:
                attempt()
                refused[name] = False
            except PermissionError:
                refused[name] = True
        report(refused)

    result = run_ranks(2, main, [b"", b""], Limits(wall_s=20))
    assert result.ok, result.detail
    assert result.messages == [[{"socket": True, "setsid": True, "lock": True}]] * 2


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


def _waits_for_a_busy_peer(rank, world_size, payload, report):
    import torch
    import torch.distributed as dist

    if rank == 1:
        until = time.monotonic() + 3
        while time.monotonic() < until:  # computing, as a slow or starved rank would
            pass
        dist.send(torch.ones(1), 0)
    else:
        dist.recv(torch.zeros(1), 1)
    report({"done": rank})


def _sleeps(rank, world_size, payload, report):
    time.sleep(100 if rank == 1 else 0)


def test_a_hang_is_judged_by_progress_not_by_wall_time_alone():
    """Rank 0 waits 3 s in recv (past ``stall_s``) while rank 1 computes: not a hang, the
    group is making progress. A rank that sleeps (no CPU, no message awaited) is stopped after
    ``idle_s``, long before the wall limit."""
    busy = run_ranks(2, _waits_for_a_busy_peer, [b"", b""], Limits(wall_s=60, stall_s=1))
    assert busy.ok, busy.detail
    asleep = run_ranks(2, _sleeps, [b"", b""], Limits(wall_s=60, idle_s=2))
    assert asleep.outcome == "timeout" and "rank 1 did nothing for 2 s" in asleep.detail, asleep.detail
    assert asleep.wall_s < 20


def _sleeps_after_a_collective(rank, world_size, payload, report):
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(4))  # gloo's connections open: its event loops wake now and then
    time.sleep(100)


@pytest.mark.slow
@pytest.mark.parametrize("n", [4, 8])
def test_a_group_asleep_is_stopped_at_any_world_size(n):
    """Idle gloo ranks still spend a little CPU, and their event-loop threads show as runnable
    now and then: the allowance grows with the ranks and the window, and those threads are not
    taken for work waiting for a core. At 4 and 8 ranks a sleeping group had run to the wall
    limit."""
    limits = Limits(wall_s=40)  # the grader's idle_s (10 s): over a shorter window the old rule held
    result = run_ranks(n, _sleeps_after_a_collective, [b""] * n, limits)
    assert result.outcome == "timeout" and f"did nothing for {limits.idle_s:g} s" in result.detail, result.detail


def test_a_restarted_group_is_judged_stuck_sooner():
    """After a group of a submission stopped, the next waits less for a hang or a sleep."""
    from assignments.common import RESTART_IDLE_S, RESTART_STALL_S, restart_limits

    first = Limits()
    again = restart_limits(first)
    assert again.stall_s == min(first.stall_s, RESTART_STALL_S) < first.stall_s
    assert again.idle_s == min(first.idle_s, RESTART_IDLE_S) < first.idle_s
    assert again.wall_s == first.wall_s and again.cpu_s == first.cpu_s
    assert restart_limits(again) == again


@pytest.mark.slow
def test_the_cases_after_a_stopped_group_run_under_the_sooner_limits():
    """run_cases hands the sooner limits on: a rank asleep in every case is stopped after
    ``idle_s`` in the first group, and after ``RESTART_IDLE_S`` in the group started after it."""
    from assignments.common import RESTART_IDLE_S, run_cases

    limits = Limits(wall_s=60, idle_s=6)
    runs = run_cases(2, 2, lambda indices: [b"", b""], _sleeps, limits, True)
    assert runs.groups == 2, runs.stopped
    assert f"did nothing for {limits.idle_s:g} s" in runs.stopped[0], runs.stopped
    assert f"did nothing for {RESTART_IDLE_S:g} s" in runs.stopped[1], runs.stopped


SPINS = """import ctypes, sys
ctypes.CDLL(None).prctl(15, sys.argv[1].encode(), 0, 0, 0)  # PR_SET_NAME: the thread's name in /proc
while True:
    pass
"""


@pytest.mark.parametrize("name", ["gloo_tcp_loop", "busy_rank"])
def test_only_gloos_event_loop_threads_are_left_out_of_the_runnable_ones(name):
    """A thread that spins is runnable whenever /proc is read. Judging a stuck group leaves
    gloo's event-loop threads out (they wake now and then in an idle group), but no other
    thread: one named otherwise still counts as work waiting for a core."""
    import subprocess
    import sys

    from sandbox.multirank import _activity

    child = subprocess.Popen([sys.executable, "-c", SPINS, name])
    try:
        time.sleep(0.3)
        samples = []
        for _ in range(10):
            samples.append((_activity([child.pid])[1], _activity([child.pid], event_loops=False)[1]))
            time.sleep(0.02)
    finally:
        child.kill()
        child.wait()
    assert any(counted for counted, _ in samples), samples
    if name == "gloo_tcp_loop":
        assert not any(judged for _, judged in samples), samples
    else:
        assert any(judged for _, judged in samples), samples


def test_the_weaker_of_two_groups_walls_is_the_one_a_row_reports():
    from sandbox.multirank import ISOLATION_ORDER, weaker

    assert weaker(None, None) is None and weaker(None, "uid") == "uid" and weaker("rlimits", None) == "rlimits"
    for k, strong in enumerate(ISOLATION_ORDER):
        for weak in ISOLATION_ORDER[k:]:
            assert weaker(strong, weak) == weaker(weak, strong) == weak
    assert weaker("namespaces", "something new") == "something new"  # unknown: taken as weakest


HOLDER = r'''
import fcntl, os, sys, time
r, w = os.pipe()
fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ
memfd = os.memfd_create("state")
if sys.argv[1] == "full":
    os.write(w, b"x" * 900_000)
    os.write(memfd, b"y" * 3_000_000)
print("ready", flush=True)
time.sleep(60)
'''


@pytest.mark.parametrize("what", ["full", "empty"])
def test_what_a_process_keeps_in_a_memfd_or_a_pipe_counts_as_held(what):
    """Neither shows in RssAnon or RssShmem (nothing is mapped): before, a rank could keep
    AdamW's whole state in a memfd between steps and pass Assignment 3's memory probe."""
    import subprocess
    import sys

    from sandbox.multirank import _held, _held_by_descriptors

    child = subprocess.Popen([sys.executable, "-c", HOLDER, what], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline() == b"ready\n"
        counted = _held_by_descriptors([child.pid])
        if what == "full":
            assert 3_900_000 <= counted <= 3_900_000 + 2 * 4096, counted
            assert _held([child.pid], private_tmp=False) >= counted
        else:
            assert counted == 0
        assert _held_by_descriptors([child.pid]) == counted  # reading them took nothing out
    finally:
        child.kill()
        child.wait()
