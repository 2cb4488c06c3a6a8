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
