"""The red team's attacks on the assignments (issue 31), one submission each, and the exact
grade each deserves.

Most are Assignment 1's reference ring (the labs' ring) with one attack planted: what the
attack tries must earn nothing, and whatever honest work sits beside it keeps its points. A
deserved grade is stated per part (``points``), never taken from a grading run. ``words``
must appear in the feedback, ``absent`` must not.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
START = "    n = dist.get_world_size(group)\n    r = dist.get_rank(group)\n"
A1_FULL = {"sum": 3, "uneven": 2, "mean": 2, "traffic": 2, "p2p": 1}
A1_NONE = dict.fromkeys(A1_FULL, 0)


@dataclass(frozen=True)
class Attack:
    name: str
    what: str  # the attack, in one line (the words)
    assignment: str
    source: object  # source(folder): the submission's text (folder: where the test lets it aim)
    points: dict  # part -> the points it deserves
    words: tuple = ()  # phrases the feedback must hold
    absent: tuple = ()  # phrases it must not
    suffix: str = ".py"
    options: dict = field(default_factory=dict)


def ring(prelude: str = "", module: str = "") -> str:
    """The reference ring with ``prelude`` run first inside ``ring_all_reduce`` and
    ``module`` code at the top of the file."""
    from assignments.a1_ring import reference_source

    source = reference_source()
    assert source.count(START) == 1
    return module + source.replace(START, START + prelude)


def master(path: str, old: str, new: str) -> str:
    text = (ROOT / path).read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    return text.replace(old, new)


TIOCSTI = '''
import fcntl, os, termios
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"x")
    except OSError:
        pass
try:
    tty = os.open("/dev/tty", os.O_RDWR)
    for c in b"echo pwned\\n":
        fcntl.ioctl(tty, termios.TIOCSTI, bytes([c]))
except OSError:
    pass
'''

SURVIVOR = '''    import os, time
    if os.fork() == 0:
        try:
            os.setsid()
        except OSError:
            pass
        if os.fork() == 0:
            for _ in range(40):
                for target in TARGETS:
                    try:
                        with open(target, "w") as f:
                            f.write('{"score": 100}')
                    except OSError:
                        pass
                time.sleep(0.1)
        os._exit(0)
'''

FLOOD = '''    import gc
    from multiprocessing.connection import Connection
    for o in gc.get_objects():
        if isinstance(o, Connection):
            for _ in range(30_000):
                try:
                    o.send_bytes(b'{"flood": "' + b"x" * 2000 + b'"}')
                except OSError:
                    break
'''

FILES = '''    import os
    for folder in ("/tmp", "/dev/shm", "/var/tmp", "/"):
        try:
            with open(os.path.join(folder, "left-by-a-rank-%d" % r), "wb") as f:
                for _ in range(80):
                    f.write(b"x" * 2**20)
        except OSError:
            pass
'''

BACKEND = '''    import torch
    dist.group.WORLD._get_backend(torch.device("cpu")).allreduce([tensor]).wait()
    return tensor.div_(n) if op == "mean" else tensor
'''

COUNTER_OFF = '''

def ring_all_reduce(tensor, op="sum"):
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack, _pop_mode, _push_mode
    modes = _get_current_dispatch_mode_stack()
    for _ in modes:
        _pop_mode()
    try:
        return _ring(tensor, op=op)
    finally:
        for mode in modes:
            _push_mode(mode)
'''

FRAMES = '''    import gc
    import numpy as np
    mine = tensor.detach().numpy().copy()
    total = None
    for o in gc.get_objects():  # a list holding every rank's input of this case
        if (isinstance(o, list) and len(o) == n and all(isinstance(a, np.ndarray) and a.shape == mine.shape for a in o)
                and any(np.array_equal(a, mine) for a in o)):
            total = np.sum([a.astype("float64") for a in o], axis=0)
            break
    if total is None:
        total = mine.astype("float64")
    tensor.copy_(torch.from_numpy((total / n if op == "mean" else total).astype("float32")))
    return tensor
'''

RELAY = '''    import os, time, numpy as np
    np.save("/dev/shm/relay-%d.npy" % r, tensor.numpy())
    total, deadline = tensor.numpy().astype("float64"), time.time() + 0.5
    for other in range(n):
        if other != r:
            while time.time() < deadline and not os.path.exists("/dev/shm/relay-%d.npy" % other):
                time.sleep(0.01)
            if os.path.exists("/dev/shm/relay-%d.npy" % other):
                total += np.load("/dev/shm/relay-%d.npy" % other)
    tensor.copy_(torch.from_numpy((total / n if op == "mean" else total).astype("float32")))
    return tensor
'''

STORE = '''    import numpy as np
    store = dist.distributed_c10d._get_default_store()
    key = "case%d" % STORE_CALLS[0]
    STORE_CALLS[0] += 1
    store.set(f"{key}-{r}", tensor.numpy().tobytes())
    total = tensor.numpy().astype("float64")
    for other in range(n):
        if other != r:
            total += np.frombuffer(store.get(f"{key}-{other}"), dtype=np.float32)
    tensor.copy_(torch.from_numpy((total / n if op == "mean" else total).astype("float32")))
    return tensor
'''

ECHO = '''    import os
    text = " ".join(f"{k}={v}" for k, v in os.environ.items())
    for path in ("assignments/a1-ring-allreduce.md", "/autograder/source/assignments/a1-ring-allreduce.md",
                 "labs/collectives.py"):
        try:
            text += open(path).read()[:500]
        except OSError:
            pass
    raise ValueError("leak: " + text)
'''

WHOLE_BUFFER = ("exchange(chunks[(r - s) % n], incoming)\n        chunks[(r - s - 1) % n].add_(incoming)",
                "exchange(work.clone(), whole)\n        chunks[(r - s - 1) % n].add_(whole.chunk(n)[(r - s - 1) % n])")


def whole_buffer_with_the_counter_off() -> str:
    """The ring that sends the whole buffer at every step, run with every dispatch mode of
    the rank (the course's counter among them) taken off, and put back after."""
    source = ring()
    assert source.count(WHOLE_BUFFER[0]) == 1
    source = source.replace(WHOLE_BUFFER[0], WHOLE_BUFFER[1]).replace(
        "incoming = torch.empty_like(chunks[0])", "incoming = torch.empty_like(chunks[0])\n    whole = torch.empty_like(work)")
    return source.replace("def ring_all_reduce(", "def _ring(") + COUNTER_OFF


A2_EVENTS = ("            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[b]])\n"
             "            self.in_flight.append((b, flat, dist.all_reduce(flat, async_op=True)))\n",
             "            import sys\n"
             "            events = sys.modules['_grader.a2_rank'].EVENTS[0]\n"
             "            k = len([e for e in events if e[0] == 'a'])\n"
             "            size = sum(q.numel() * q.element_size() for q in self.buckets[b])\n"
             "            events += [['a', k], ['all_reduce', size, True]]\n"
             "            self.in_flight.append((b, None, None))\n")
A2_LATE = ("        for b, flat, work in self.in_flight:\n            work.wait()\n",
           "        for i, (b, _, _) in enumerate(self.in_flight):\n"
           "            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[b]])\n"
           "            dist.all_reduce(flat)\n"
           "            import sys\n"
           "            sys.modules['_grader.a2_rank'].EVENTS[0].append(['w', i])\n")

A3_NUMPY = ("        self.inner = torch.optim.AdamW([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)\n",
            "        self.inner = torch.optim.AdamW([self.shard], lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)\n"
            "        SIDE['moments'] = [np.zeros(self.numel, dtype=np.float32) for _ in (0, 1)]\n")

#: The unsharded state kept where the walk over the optimizer object does not look: an
#: attribute of a module (torch), and a file in the rank's /tmp.
A3_MODULE = (A3_NUMPY[0], A3_NUMPY[0] + "        torch._kept = [torch.zeros(self.numel) for _ in (0, 1)]\n")
A3_FILE = (A3_NUMPY[0], A3_NUMPY[0] + "        np.save('/tmp/moments.npy', np.zeros((2, self.numel), dtype=np.float32))\n")

#: A cheat that knows the probe: on a wide layer (the probe's), plain SGD, which holds
#: nothing; on the graded model, a replicated AdamW hidden in a module, and a decoy of a
#: shard's two moments for the walk to find.
A3_ADAPTIVE = '''import torch
import torch.distributed as dist


class ShardedAdamW:
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, stage=2):
        self.params = list(params)
        self.lr = lr
        self.wide = sum(p.numel() for p in self.params) > 100000
        if not self.wide:
            torch._hidden = torch.optim.AdamW(self.params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        numel = sum(p.numel() for p in self.params)
        self.decoy = [torch.zeros(numel // dist.get_world_size()) for _ in (0, 1)]

    def step(self):
        n = dist.get_world_size()
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        shard = torch.empty(flat.numel() // n)
        dist.reduce_scatter_single(shard, flat)
        full = torch.empty_like(flat)
        dist.all_gather_single(full, shard)
        offset = 0
        for p in self.params:
            p.grad.copy_(full[offset:offset + p.numel()].view_as(p) / n)
            offset += p.numel()
        if self.wide:
            with torch.no_grad():
                for p in self.params:
                    p -= self.lr * p.grad
        else:
            torch._hidden.step()

    def zero_grad(self):
        for p in self.params:
            p.grad = None
'''


LABS = '''import torch


def ring_all_reduce(tensor, op="sum"):
    import importlib
    return importlib.import_module("labs.collectives").ring_all_reduce(tensor, op=op)
'''

MASTER_READ = '''import torch
import torch.distributed as dist


def ring_all_reduce(tensor, op="sum"):
    for path in ("assignments/a1-ring-allreduce.md", "/autograder/source/assignments/a1-ring-allreduce.md",
                 %r):
        try:
            text = open(path).read()
        except OSError:
            continue
        cell = next(c for c in text.split("```") if "def ring_all_reduce" in c)
        namespace = {}
        exec("\\n".join(line for line in cell.splitlines() if not line.startswith(("{", ":"))), namespace)
        return namespace["ring_all_reduce"](tensor, op=op)
    raise FileNotFoundError("no master notebook")
''' % str(ROOT / "assignments" / "a1-ring-allreduce.md")

A3_IMPORTS = ("import torch\nimport torch.distributed as dist\n\n\nclass ShardedAdamW:",
              "import numpy as np\nimport torch\nimport torch.distributed as dist\n\nSIDE = {}\n\n\nclass ShardedAdamW:")


def targets(folder) -> str:
    """Module code naming where the survivor aims: a results.json the grader writes."""
    return f"TARGETS = {[str(Path(folder) / 'results.json'), '/autograder/results/results.json']!r}\n"


ATTACKS = [
    Attack("tiocsti", "typing into the instructor's terminal (TIOCSTI on an inherited tty)", "a1",
           lambda folder: ring(TIOCSTI.replace("\n", "\n    ")), A1_FULL),
    Attack("survivor", "a double-forked survivor rewriting results.json after the grade", "a1",
           lambda folder: ring(SURVIVOR, targets(folder)), A1_FULL),
    Attack("flood", "flooding the grader with messages", "a1", lambda folder: ring(FLOOD), A1_NONE,
           words=("sent the grader more than",)),
    Attack("files", "64 MB files left in /dev/shm, /tmp and /var/tmp", "a1", lambda folder: ring(FILES), A1_FULL),
    Attack("labs", "importing the course's own ring from labs", "a1", lambda folder: LABS, A1_NONE,
           words=("ModuleNotFoundError",)),
    Attack("master", "reading the master notebook from disk", "a1", lambda folder: MASTER_READ, A1_NONE,
           words=("FileNotFoundError",)),
    Attack("backend", "calling the backend's all-reduce below the counter", "a1", lambda folder: ring(BACKEND), A1_NONE,
           words=("calls the built-in all_reduce",)),
    Attack("counter-off", "switching the counter off (and sending the whole buffer at each step)", "a1",
           lambda folder: whole_buffer_with_the_counter_off(), dict(A1_FULL, traffic=0),
           words=("sends the whole buffer at a step",)),
    Attack("frames", "reading every rank's inputs from the grader's frames", "a1", lambda folder: ring(FRAMES), A1_NONE),
    Attack("relay", "a relay through /dev/shm", "a1", lambda folder: ring(RELAY), A1_NONE),
    Attack("store", "a relay through the rendezvous store", "a1", lambda folder: ring(STORE, "STORE_CALLS = [0]\n"),
           A1_NONE, words=("sent data through the rendezvous store",)),
    Attack("echo", "the grader's environment and a line of a reference solution echoed into feedback", "a1",
           lambda folder: ring(ECHO), A1_NONE, words=("raised ValueError: leak",),
           absent=("PATH=", "HOME=", "PYTHONPATH", "### BEGIN SOLUTION", "course_ring", "chunks[(r - s) % n]")),
    Attack("events", "rewriting A2's event log (every all-reduce after the backward pass)", "a2",
           lambda folder: master("assignments/a2-ddp-by-hand.md", *A2_EVENTS).replace(*A2_LATE),
           {"result": 3, "traffic": 2, "buckets": 2, "overlap": 0, "no_sync": 1},
           words=("nothing was sent between the ranks before the backward pass ended",), suffix=".md"),
    Attack("numpy-state", "keeping A3's unsharded state in numpy", "a3",
           lambda folder: master("assignments/a3-zero-sharded-optimizer.md", *A3_NUMPY).replace(*A3_IMPORTS),
           {"result2": 3, "result1": 2, "state": 0, "traffic2": 2, "traffic1": 1},
           words=("the optimizer holds",), suffix=".md"),
    Attack("module-state", "keeping A3's unsharded state in an attribute of a module", "a3",
           lambda folder: master("assignments/a3-zero-sharded-optimizer.md", *A3_MODULE),
           {"result2": 3, "result1": 2, "state": 0, "traffic2": 2, "traffic1": 1},
           words=("measured from outside the ranks",), suffix=".md"),
    Attack("probe-aware", "A3 with SGD on the memory probe's wide layer, AdamW's full state hidden elsewhere", "a3",
           lambda folder: A3_ADAPTIVE, {"result2": 3, "result1": 2, "state": 0, "traffic2": 2, "traffic1": 1},
           words=("counts only while it does AdamW's work",)),
    Attack("file-state", "keeping A3's unsharded state in a file in /tmp", "a3",
           lambda folder: master("assignments/a3-zero-sharded-optimizer.md", *A3_FILE).replace(*A3_IMPORTS),
           {"result2": 3, "result1": 2, "state": 0, "traffic2": 2, "traffic1": 1},
           words=("measured from outside the ranks",), suffix=".md"),
]
