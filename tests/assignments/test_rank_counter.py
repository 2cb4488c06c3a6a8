"""The ranks' collective counter (assignments.rank_common.call_counter) on torch's functional
collectives: each is counted under the collective it is, with its bytes, whichever of
``_c10d_functional``'s forms started it. Run in a child process of its own (a one-rank gloo
group), so that no process group or thread is left in the test process."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json, os, sys, tempfile
import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol
from assignments.rank_common import call_counter

folder = tempfile.mkdtemp()
dist.init_process_group("gloo", store=dist.FileStore(os.path.join(folder, "store"), 1), rank=0, world_size=1)
name = dist.group.WORLD.group_name
x = torch.ones(8)
counter = call_counter()
refused = ""
with counter:
    out = torch.empty(8)
    funcol.wait_tensor(torch.ops._c10d_functional.reduce_scatter_tensor_out(x, "sum", 1, name, out=out))
    funcol.wait_tensor(funcol.reduce_scatter_tensor(x, "sum", 0, dist.group.WORLD))
    try:
        torch.ops._c10d_functional.isend(x, 5, 0, name)
    except ValueError as exc:
        refused = str(exc)
dist.destroy_process_group()
print(json.dumps({"calls": counter.calls, "bytes": counter.bytes, "refused": refused}))
'''


def _counted() -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_functional_reduce_scatters_and_sends_count_as_what_they_are():
    """The ``_out`` reduce-scatter was counted as a collective of its own ("reduce_scatter_tensor_out",
    0 bytes): Assignment 3 charges any collective beside the reduce-scatter and the all-gather. A
    functional ``isend`` to a rank the group lacks went past the peer check that ``dist.send`` has."""
    got = _counted()
    assert got["calls"] == {"reduce_scatter": 2}, got
    assert got["bytes"] == {"reduce_scatter": 2 * 8 * 4}, got
    assert "send to rank 5, which does not exist" in got["refused"], got


PAIR = r'''
import json, os, sys
import torch
import torch.distributed as dist
from torch.distributed import _functional_collectives as funcol
from assignments.rank_common import call_counter

rank, store = int(sys.argv[1]), sys.argv[2]
dist.init_process_group("gloo", store=dist.FileStore(store, 2), rank=rank, world_size=2)
name = dist.group.WORLD.group_name
x = torch.ones(8)
counter = call_counter()
refused = ""
with counter:
    funcol.wait_tensor(funcol.all_gather_tensor(x, 0, dist.group.WORLD))
    if rank == 0:
        funcol.wait_tensor(torch.ops._c10d_functional.isend(x, 1, 0, name))
    else:
        funcol.wait_tensor(torch.ops._c10d_functional.irecv(torch.empty(8), 0, 0, name))
        try:
            torch.ops._c10d_functional.irecv(torch.empty(8), 5, 0, name)
        except ValueError as exc:
            refused = str(exc)
dist.barrier()
dist.destroy_process_group()
print(json.dumps({"calls": counter.calls, "bytes": counter.bytes, "refused": refused}))
'''


def test_functional_all_gathers_sends_and_receives_count_between_two_ranks(tmp_path):
    """At two ranks: the functional all-gather counts its whole gathered buffer (the input
    times the group's size, as dist.all_gather_into_tensor's output), and the functional
    isend and irecv count as a send and a receive, an irecv from a rank the group lacks
    refused as dist.recv's is."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    store = str(tmp_path / "store")
    ranks = [subprocess.Popen([sys.executable, "-c", PAIR, str(r), store], cwd=ROOT, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    got = []
    try:
        for p in ranks:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err[-2000:]
            got.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in ranks:
            if p.poll() is None:
                p.kill()
                p.wait()
    first, second = got
    assert first["calls"] == {"all_gather": 1, "send": 1} and second["calls"] == {"all_gather": 1, "recv": 1}, got
    assert first["bytes"] == {"all_gather": 2 * 8 * 4, "send": 8 * 4}, got
    assert second["bytes"] == {"all_gather": 2 * 8 * 4, "recv": 8 * 4}, got
    assert "recv from rank 5, which does not exist" in second["refused"], got
