"""What every assignment's ranks share, inside a rank: reading what the grader sent, loading
the submission's code, and the wire format of what a rank reports.

The modules named ``*_rank.py`` and this one are the only grader code a rank runs. They
import nothing but the standard library, numpy and torch (and each other, relatively), and
hold nothing a student could use: no reference answer, no expected value, no other rank's
inputs. The grading engine (:mod:`sandbox.multirank`) loads them from their source into a
package of their own inside each rank (see :class:`sandbox.multirank.RankProgram`), beside
the student's code, which can read and rewrite anything in the rank: everything a rank
reports is a claim the grader checks.
"""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re

import numpy as np

#: Bounds on what one message may carry back (the engine also bounds the total).
MAX_TEXT = 300


def unpack(data: bytes) -> tuple[dict, list]:
    """``(header, arrays)`` from what the grader sent this rank: a JSON header line, then
    its float32 arrays back to back (``header["sizes"]`` elements each)."""
    head, _, body = data.partition(b"\n")
    header = json.loads(head)
    arrays, offset = [], 0
    for size in header.get("sizes", []):
        arrays.append(np.frombuffer(body, dtype=np.float32, count=size, offset=offset).copy())
        offset += 4 * size
    return header, arrays


def encode(array) -> str:
    """A float32 array as base64 text (what a rank reports; the grader decodes it strictly)."""
    a = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    return base64.b64encode(a.tobytes()).decode()


def error_text(exc: BaseException) -> str:
    """``"TypeError: ..."``, one line, bounded."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - a student's exception whose str() raises
        text = type(exc).__name__
    return " ".join(text.split())[:MAX_TEXT]


def load_names(sources: list, names) -> dict:
    """``{name: object}`` for each of ``names``: the submission's units (``[(filename,
    source)]``) run once, in order, in one namespace (a unit that fails costs only itself,
    as in the exercises' grader). LookupError naming the first one missing, and why."""
    namespace = {"__name__": "submission"}
    errors, failed = [], []
    with contextlib.redirect_stdout(io.StringIO()):
        for filename, source in sources:
            try:
                exec(compile(source, filename, "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - the student's cell, not ours
                errors.append(f"{filename}: {error_text(exc)}")
                failed.append(source)
    for name in names:
        what = "class" if name[:1].isupper() else "function"  # (the graders' names: classes are capitalised)
        if not callable(namespace.get(name)):
            defined = re.compile(rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b", re.M)
            imported = re.compile(rf"^[ \t]*(?:from[ \t]+\S+[ \t]+)?import[ \t][^\n]*\b{re.escape(name)}\b", re.M)
            where = [e for e, source in zip(errors, failed) if imported.search(source)]
            if where:
                raise LookupError(f"no {what} `{name}` in the submission: it is imported ({where[0]}), and a "
                                  "rank has only the standard library, numpy and torch: write it yourself")
            if not any(defined.search(source) for _, source in sources):
                # Not written anywhere: most likely another file (a cell's error would mislead).
                raise LookupError(f"no {what} `{name}` in the submission: nowhere does it "
                                  f"define `{name}` (the wrong file?)")
            more = f" ({errors[0]})" if errors else ""
            raise LookupError(f"no {what} `{name}` in the submission{more}")
    found = {name: namespace[name] for name in names}
    missing_modules = [e for e in errors if "ModuleNotFoundError" in e]
    if missing_modules:  # a helper imported from the course: say so where it is used
        found["__import_errors__"] = missing_modules[:3]
    return found


def course_model():
    """The course's model module (``labs/model.py``): in a rank, the copy loaded beside these
    modules (a rank cannot import the course); in the grader, ``labs.model`` itself."""
    try:
        from . import model
    except ImportError:
        from labs import model
    return model


class Stopped(Exception):
    """The grader stopped this rank at a checkpoint inside a case (a peer was out of step)."""


def marker(ctx, index: int):
    """``mark(label, point)``: a checkpoint inside case ``index``, where the grader cuts the
    traffic it sees; raises :class:`Stopped` when the grader says stop."""
    def mark(label: str, point) -> None:
        if ctx.checkpoint(label, case=index, point=point) == "stop":
            raise Stopped(label)
    return mark


def student(ctx, name: str | None = None):
    """The student's definitions (``ctx.student()``), or the one called ``name``; None once
    the rank has reported what is missing (the grader then scores every part 0, saying why)."""
    try:
        found = ctx.student()
        return found if name is None else found[name]
    except LookupError as exc:
        ctx.report({"missing": str(exc)[:300]})
        return None


def one_case(ctx, index: int, work) -> bool:
    """Run case ``index``: ``work()`` returns the rank's message (an exception of the
    student's code becomes its error); report it, then wait at the case's checkpoint. False
    when the grader says stop, there or inside the case (:class:`Stopped`)."""
    try:
        message = work()
    except Stopped:
        return False
    except Exception as exc:  # noqa: BLE001 - the student's code
        message = failure(exc)
    ctx.report(dict(message, case=index))
    return ctx.checkpoint("case", case=index, raised="error" in message) != "stop"


def quiet_stdio() -> None:
    """Send a rank's own prints to /dev/null (a grader's console is not the student's)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def failure(exc: BaseException, extra: dict | None = None) -> dict:
    """What a rank reports for a case whose code raised: ``{"error": ...}``, with the
    message of a NotImplementedError apart (an untouched stub)."""
    if isinstance(exc, NotImplementedError):
        return dict(extra or {}, error="NotImplementedError")
    return dict(extra or {}, error=error_text(exc))


# ----------------------------------------------------------------------------- counting calls

#: c10d operators -> (name, where the full buffer is: "in"/"out" argument index). The full
#: buffer is the all-gather's output and the reduce-scatter's input (nccl-tests' convention),
#: in the tensor and the list forms alike.
COLLECTIVE_OPS = {
    "allreduce_": ("all_reduce", 0),
    "_allgather_base_": ("all_gather", 0),
    "allgather_": ("all_gather", 0),
    "allgather_into_tensor_coalesced_": ("all_gather", 0),
    "_reduce_scatter_base_": ("reduce_scatter", 1),
    "reduce_scatter_": ("reduce_scatter", 1),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", 1),
    "broadcast_": ("broadcast", 0),
    "reduce_": ("reduce", 0),
    "gather_": ("gather", 1),
    "scatter_": ("scatter", 0),
    "alltoall_": ("all_to_all", 1),
    "alltoall_base_": ("all_to_all", 1),
    "send": ("send", 0),
    "recv_": ("recv", 0),
    "recv_any_source_": ("recv", 0),
}


#: torch's functional collectives (``torch.distributed._functional_collectives``: operators of
#: the ``_c10d_functional`` namespace, the same collectives on the same process groups) ->
#: (name, the full buffer's bytes from the arguments). Their autograd forms run these too.
FUNCTIONAL_OPS = {
    "all_reduce": ("all_reduce", lambda a: nbytes(a[0])),
    "all_reduce_": ("all_reduce", lambda a: nbytes(a[0])),
    "all_reduce_coalesced": ("all_reduce", lambda a: nbytes(a[0])),
    "all_reduce_coalesced_": ("all_reduce", lambda a: nbytes(a[0])),
    "all_gather_into_tensor": ("all_gather", lambda a: nbytes(a[0]) * int(a[1])),
    "all_gather_into_tensor_out": ("all_gather", lambda a: nbytes(a[0]) * int(a[1])),
    "all_gather_into_tensor_coalesced": ("all_gather", lambda a: nbytes(a[0]) * int(a[1])),
    "reduce_scatter_tensor": ("reduce_scatter", lambda a: nbytes(a[0])),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", lambda a: nbytes(a[0])),
    "reduce_scatter_tensor_out": ("reduce_scatter", lambda a: nbytes(a[0])),
    "all_to_all_single": ("all_to_all", lambda a: nbytes(a[0])),
    "broadcast": ("broadcast", lambda a: nbytes(a[0])),
    "broadcast_": ("broadcast", lambda a: nbytes(a[0])),
    "isend": ("send", lambda a: nbytes(a[0])),  # (tensor, peer, tag, group)
    "irecv": ("recv", lambda a: nbytes(a[0])),
}
#: ``_c10d_functional`` operators that move nothing: waiting for a result, wrapping it.
FUNCTIONAL_PLUMBING = ("wait_tensor", "_wrap_tensor_autograd")


def nbytes(x) -> int:
    import torch

    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(nbytes(y) for y in x)
    return 0


def _async_op(func, args, kwargs) -> bool:
    """The ``async_op`` argument a c10d operator was called with (True where it has none)."""
    names = [a.name for a in func._schema.arguments]
    if "async_op" not in names:
        return True
    i = names.index("async_op")
    return bool((kwargs or {}).get("async_op", args[i] if i < len(args) else True))


def all_to_all_record(packet: str, args) -> dict:
    """What one all-to-all moves, from its c10d operator's arguments (a claim): the rows this
    rank sends to and receives from each rank (empty splits: equal ones), whether the rows
    are floating point (tokens, not counts), and the bytes that leave the rank (its own
    share stays)."""
    import torch.distributed as dist

    rank, size = dist.get_rank(), dist.get_world_size()
    if packet == "alltoall_":  # lists of tensors, one per peer
        outputs, inputs = args[0], args[1]
        sends = [nbytes(t) for t in inputs]
        return {"floating": bool(inputs) and inputs[0].is_floating_point(),
                "input_splits": [t.shape[0] if t.dim() else 1 for t in inputs],
                "output_splits": [t.shape[0] if t.dim() else 1 for t in outputs],
                "sent": sum(b for j, b in enumerate(sends) if j != rank)}
    if packet == "all_to_all_single":  # the functional form: (input, output splits, input splits, group)
        inp, out_splits, in_splits = args[:3]
        rows_out = None  # (the operator makes its output)
    else:  # c10d's: (output, input, group, output splits, input splits, ...)
        output, inp, _, out_splits, in_splits = args[:5]
        rows_out = output.shape[0] if output.dim() else 1
    rows_in = inp.shape[0] if inp.dim() else 1
    rows_out = rows_in if rows_out is None else rows_out
    row = nbytes(inp) // rows_in if rows_in else 0
    ins = [int(x) for x in in_splits] or [rows_in // size] * size
    outs = [int(x) for x in out_splits] or [rows_out // size] * size
    return {"floating": inp.is_floating_point(), "input_splits": ins, "output_splits": outs,
            "sent": row * sum(x for j, x in enumerate(ins) if j != rank)}


def _check_peer(op: str, args, at: int = 2) -> None:
    """Refuse a send to, or a receive from, a rank the group does not have, in one line: gloo
    would otherwise look the missing rank up in the rendezvous store (which the grader's wire
    check reads as data sent around the ranks) or crash the rank. ``args`` are c10d's
    ``(tensors, process group, peer, tag)`` (``at``: where the peer is; the functional
    ``isend``'s and ``irecv``'s are ``(tensor, peer, tag, group)``); the peer is checked
    against the world's ranks."""
    import torch.distributed as dist

    peer = args[at] if len(args) > at else None
    if isinstance(peer, int) and dist.is_initialized() and not 0 <= peer < dist.get_world_size():
        n = dist.get_world_size()
        raise ValueError(f"{'send to' if op in ('send', 'isend') else 'recv from'} rank {peer}, which does not exist: "
                         f"the ranks are 0 to {n - 1} at this world size ({n})")


def work_of(out):
    """The ``Work`` a c10d operator returned (its outputs hold it boxed), or None. It is the
    very object the caller gets from ``torch.distributed``, whatever function it called."""
    import torch

    for item in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(item, torch.ScriptObject):
            try:
                return torch._C._distributed_c10d.Work.unbox(item)
            except Exception:  # noqa: BLE001 - some other script object
                return None
    return None


def call_counter(log: list | None = None, started=None):
    """A dispatch mode counting, while active, each c10d operation the rank's Python code
    issues (``torch.distributed``'s and the functional collectives', :data:`FUNCTIONAL_OPS`): ``calls[name]`` and ``bytes[name]`` (the full buffer, :data:`COLLECTIVE_OPS`),
    and ``log`` (the list given, or a new one): ``[name, bytes, async]`` per call in order.
    ``started(name, work)``, if given, is called once each collective has been issued, with
    the ``Work`` it returned (:func:`work_of`; None where it returned none).
    What it counts is the rank's own claim (student code runs in the same process); the
    grader checks it against the traffic it sees itself."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counter(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.calls, self.bytes, self.log = {}, {}, log if log is not None else []
            self.all_to_all = []  # one all_to_all_record per all-to-all

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False  # (torch wraps a mode's dispatch in dynamo.disable: 1.5 s to import)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            packet = func._overloadpacket
            if func.namespace == "_c10d_functional" and packet.__name__ not in FUNCTIONAL_PLUMBING:
                if packet.__name__ in ("isend", "irecv"):
                    _check_peer(packet.__name__, args, at=1)
                name, size_of = FUNCTIONAL_OPS.get(packet.__name__, (packet.__name__.rstrip("_"), None))
                try:
                    size = size_of(args) if size_of is not None else 0
                except Exception:  # noqa: BLE001 - arguments the operator will refuse anyway
                    size = 0
                self.calls[name] = self.calls.get(name, 0) + 1
                self.bytes[name] = self.bytes.get(name, 0) + size
                if len(self.log) < 20_000:
                    self.log.append([name, size, True])
                if name == "all_to_all" and len(self.all_to_all) < 1000:
                    try:
                        self.all_to_all.append(all_to_all_record(packet.__name__, args))
                    except Exception:  # noqa: BLE001
                        pass
            elif func.namespace == "c10d":
                if packet.__name__ in ("send", "recv_"):
                    _check_peer(packet.__name__, args)
                name, which = COLLECTIVE_OPS.get(packet.__name__, (packet.__name__.rstrip("_"), -1))
                if name not in ("barrier", "monitored_barrier"):
                    size = nbytes(args[which]) if 0 <= which < len(args) else 0
                    self.calls[name] = self.calls.get(name, 0) + 1
                    self.bytes[name] = self.bytes.get(name, 0) + size
                    if len(self.log) < 20_000:
                        self.log.append([name, size, _async_op(func, args, kwargs)])
                    if name == "all_to_all" and len(self.all_to_all) < 1000:
                        try:  # recorded before it runs: a call that fails is seen too
                            self.all_to_all.append(all_to_all_record(packet.__name__, args))
                        except Exception:  # noqa: BLE001 - arguments the operator will refuse anyway
                            pass
                    if started is not None:
                        out = func(*args, **(kwargs or {}))
                        started(name, work_of(out))
                        return out
            return func(*args, **(kwargs or {}))

    return Counter()


def warm() -> None:
    """What a rank's grader code uses, imported and run once before the rank may lose the
    right to read the interpreter's files (the dispatch-mode machinery imports on first use)."""
    import cProfile  # noqa: F401  (imported lazily by torch's dispatch-mode machinery)
    import torch

    with call_counter():
        torch.zeros(1).add_(1)
    x = torch.ones(2, requires_grad=True)
    (x * 2).backward(torch.ones(2))  # an explicit gradient imports torch.fx's shape machinery (sympy)
