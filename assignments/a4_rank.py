"""Assignment 4 inside a rank: run the student's ``f``, ``g``, shards and tensor-parallel
blocks on the course's MLP and attention blocks (``model``: ``labs/model.py``, loaded beside
this module), step by step, and report outputs, gradients and calls (see :mod:`.rank_common`)."""
from __future__ import annotations

import base64

import numpy as np

from .rank_common import Stopped, call_counter, course_model, failure, marker, one_case, student, unpack

#: The blocks graded, one per seed (by seed mod 3; small: CPU ranks): width h, heads, sequence
#: s, micro-batch b. They differ, as the statement leaves them open (a block written for one
#: width or head count must not pass them all), and each world size graded divides the heads.
BLOCK_SHAPES = ({"d_model": 32, "n_head": 4, "seq": 8, "batch": 2},
                {"d_model": 48, "n_head": 8, "seq": 5, "batch": 3},
                {"d_model": 24, "n_head": 4, "seq": 6, "batch": 2})
#: f and g alone: a (4, 8) tensor per rank.
UNIT_SHAPE = (4, 8)
#: The steps of one case, in the order each rank runs them.
STEPS = ("f", "g", "mlp", "attn")


def block_shape(seed: int) -> dict:
    """``{"d_model", "n_head", "seq", "batch"}`` of the blocks of ``seed``'s case."""
    return dict(BLOCK_SHAPES[seed % len(BLOCK_SHAPES)])


def build_case(shape: dict):
    """The unsharded blocks of ``shape`` (:func:`block_shape`) and the inputs of one case,
    drawn from torch's global generator (seed it first): ``(mlp, attention, x, probe)`` (the
    loss is ``sum(out * probe)``, so every output element has its own gradient)."""
    import torch

    model = course_model()
    cfg = model.GPTConfig(n_head=shape["n_head"], d_model=shape["d_model"], block_size=shape["seq"])
    mlp, attn = model.MLP(cfg), model.CausalSelfAttention(cfg)
    x = torch.randn(shape["batch"], shape["seq"], shape["d_model"])
    probe = torch.randn(shape["batch"], shape["seq"], shape["d_model"])
    return mlp, attn, x, probe


def case_seed(seed: int, salt: int) -> int:
    return (seed * 1_000_003 + salt) % 2**31


def enc(t) -> dict:
    """A tensor as a rank reports it: its shape and its float32 bytes, base64."""
    a = np.ascontiguousarray(t.detach().float().numpy())
    return {"shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}


def first_communication():
    """A dispatch mode that records whether the forward pass's first all-reduce comes
    before its first matrix product (``.first``: 'all_reduce', 'matmul' or None): Megatron's
    forward all-reduce (g) follows the row-parallel matmul, never precedes the first one."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten, c10d = torch.ops.aten, torch.ops.c10d
    matmuls = {aten.mm, aten.addmm, aten.bmm, aten.baddbmm}

    class First(TorchDispatchMode):
        first = None

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if self.first is None:
                if func._overloadpacket in matmuls:
                    self.first = "matmul"
                elif func._overloadpacket is c10d.allreduce_:
                    self.first = "all_reduce"
            return func(*args, **(kwargs or {}))

    return First()


def unit(fn, u_np, w_np) -> dict:
    """f or g alone on this rank's ``u``, loss ``sum(op(u) * w)``."""
    import torch

    u = torch.from_numpy(u_np.copy()).requires_grad_(True)
    with call_counter() as fwd:
        y = fn.apply(u)
    with call_counter() as bwd:
        (y * torch.from_numpy(w_np.copy())).sum().backward()
    return {"out": enc(y), "grad": enc(u.grad), "calls": [fwd.calls, bwd.calls]}


def block(fns, key, module, x, probe, rank, n, n_head, mark=lambda label, point: None) -> dict:
    """One block on this rank: its shard, output, input gradient, shard gradients, calls;
    ``mark`` checkpoints after the forward pass and after the backward pass (where the grader
    cuts the traffic it sees)."""
    import torch

    full = {k: p.detach().clone() for k, p in module.named_parameters()}
    shard = fns["shard_mlp"](full, rank, n) if key == "mlp" else fns["shard_attention"](full, n_head, rank, n)
    shard = {str(k): v.detach().clone().to(torch.float32).requires_grad_(True) for k, v in shard.items()}
    message = {"shards": {k: enc(v) for k, v in shard.items()}}
    xin = x.clone().requires_grad_(True)
    try:
        with call_counter() as fwd, first_communication() as first:
            y = fns["tp_mlp"](xin, shard) if key == "mlp" else fns["tp_attention"](xin, shard, n_head)
        mark("phase", "forward")
        with call_counter() as bwd:
            (y * probe).sum().backward()
        mark("phase", "backward")
    except (NotImplementedError, Stopped):
        raise
    except Exception as exc:  # noqa: BLE001 - the shards are still worth reporting
        return failure(exc, message)
    message.update(out=enc(y), x_grad=enc(xin.grad) if xin.grad is not None else None,
                   grads={k: enc(v.grad) for k, v in shard.items() if v.grad is not None},
                   calls=[fwd.calls, bwd.calls], bytes=[fwd.bytes, bwd.bytes], first=first.first)
    return message


def main(ctx) -> None:
    import torch

    header, arrays = unpack(ctx.payload)
    fns = student(ctx)
    if fns is None:
        return
    units = {c: (arrays[2 * k].reshape(UNIT_SHAPE), arrays[2 * k + 1].reshape(UNIT_SHAPE))
             for k, c in enumerate(header["units"])}
    built = {}

    def work(index):
        seed, step = header["runs"][index]
        if step in ("f", "g"):
            return unit(fns["CopyToTensorParallel" if step == "f" else "ReduceFromTensorParallel"], *units[index])
        if seed not in built:
            torch.manual_seed(case_seed(seed, header["salt"]))
            built[seed] = build_case(block_shape(seed))
        mlp, attn, x, probe = built[seed]
        return block(fns, step, mlp if step == "mlp" else attn, x, probe, ctx.rank, ctx.world_size,
                     block_shape(seed)["n_head"], marker(ctx, index))

    for index in header["cases"]:
        if not one_case(ctx, index, lambda index=index: work(index)):
            return


def warm() -> None:
    import torch

    with call_counter(), first_communication():
        torch.zeros(2, 2) @ torch.zeros(2, 2)
