"""Assignment 6 inside a rank: route this rank's own tokens, run the student's ``dispatch``,
this rank's experts on the rows it received, the student's ``combine`` and the backward pass,
and report what came out (see :mod:`.rank_common`). The MoE layer's pieces (``moe``: the
labs' ``MoEConfig``, ``Experts`` and ``route``, not their dispatch and combine) are loaded
beside this module; a rank gets its own tokens and its own experts' weights only."""
from __future__ import annotations

import base64
import hashlib

import numpy as np

from .rank_common import Stopped, call_counter, failure, marker, one_case, student, unpack

#: The layers graded (small: CPU ranks): width h and each expert's hidden width f, the same in
#: every case; the number of experts E, top-k and the tokens per rank vary from case to case
#: (the grader's ``LAYERS``, sent with each case).
D_MODEL, FFN_HIDDEN = 8, 16


def moe():
    """The labs' MoE pieces: in a rank, the copy loaded beside this module; else the labs'."""
    try:
        from . import moe as module
    except ImportError:
        from labs import expert_parallel as module
    return module


def config(num_experts: int, top_k: int):
    return moe().MoEConfig(D_MODEL, FFN_HIDDEN, num_experts, top_k)


def row_id(row) -> str:
    """A row's identity (its float32 bytes, hashed): an all-to-all copies a token exactly, so
    the grader, which has every token, can tell which token copy each received row is."""
    return hashlib.blake2b(np.ascontiguousarray(row, dtype=np.float32).tobytes(), digest_size=8).hexdigest()


def enc(t):
    if t is None:
        return None
    a = np.ascontiguousarray(t.detach().float().cpu().numpy())
    return {"shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}


def check_returned(rows, row_experts):
    """Why what ``dispatch`` returned cannot be run, or None."""
    import torch

    if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[1] != D_MODEL:
        return f"dispatch must return rows as a (copies, {D_MODEL}) tensor, got {type(rows).__name__} " \
               f"{tuple(getattr(rows, 'shape', ()))}"
    if not isinstance(row_experts, torch.Tensor) or row_experts.dtype not in (torch.int64, torch.int32) \
            or row_experts.reshape(-1).shape[0] != rows.shape[0]:
        return "dispatch must return row_experts as an integer tensor with one global expert id per row"
    return None


def own_case(rank: int, n: int, arrays: list, layer: dict):
    """``(router, x, probe, bias, experts)`` of this rank from what the grader sent: the router
    (every rank routes its own tokens with it), its tokens and their probe, the case's routing
    bias, and its own experts (the global ones ``rank E/n`` to ``(rank+1) E/n - 1``); ``layer``:
    the case's ``{"num_experts", "top_k", "tokens"}``."""
    import torch

    E, tokens = layer["num_experts"], layer["tokens"]
    cfg, per = config(E, layer["top_k"]), E // n
    W, x, probe, bias, w1, w3, w2 = (torch.from_numpy(a.copy()) for a in arrays)
    experts = moe().Experts(cfg, per, rank * per)
    with torch.no_grad():
        experts.w1.copy_(w1.view_as(experts.w1))
        experts.w3.copy_(w3.view_as(experts.w3))
        experts.w2.copy_(w2.view_as(experts.w2))
    return (W.view(E, D_MODEL), x.view(tokens, D_MODEL), probe.view(tokens, D_MODEL), bias, experts)


def run_case(fns, rank: int, n: int, arrays: list, mark, layer: dict) -> dict:
    import torch

    W, x, probe, bias, local = own_case(rank, n, arrays, layer)
    x, W = x.clone().requires_grad_(True), W.clone().requires_grad_(True)
    ids, gates = moe().route(x, W, layer["top_k"], bias)
    ids = ids.detach()
    message = {"ids": ids.tolist()}
    fwd = bwd = None
    try:
        with call_counter() as fwd:
            rows, row_experts, plan = fns["dispatch"](x, ids.clone(), layer["num_experts"])
            why = check_returned(rows, row_experts)
            if why:
                raise TypeError(why)
            row_experts = row_experts.reshape(-1).to(torch.int64)
            rows32 = rows.detach().to(torch.float32).cpu().numpy()
            message["arrivals"] = [[row_id(rows32[i]), int(e)] for i, e in enumerate(row_experts.tolist())]
            held = (row_experts >= local.first) & (row_experts < local.first + local.count)
            if not bool(held.all()):
                raise LookupError(f"rank {rank} received rows for expert {int(row_experts[~held][0])}, which it does "
                                  "not hold")
            out = local(rows.to(torch.float32), row_experts)
            y = fns["combine"](out, gates, plan)
        message["y"] = enc(y) if isinstance(y, torch.Tensor) else None
        if not isinstance(y, torch.Tensor) or not y.requires_grad:
            raise TypeError("combine must return a tensor that autograd can differentiate (use the gates, and an "
                            "all-to-all that autograd sees)")
        mark("phase", "forward")
        with call_counter() as bwd:
            (y * probe).sum().backward()
        mark("phase", "backward")
    except Stopped:
        raise
    except Exception as exc:  # noqa: BLE001 - the student's code
        message.update(failure(exc))
    message["counters"] = [{"calls": dict(c.calls), "all_to_all": list(c.all_to_all)} if c is not None else None
                           for c in (fwd, bwd)]
    if "error" not in message:
        message["x_grad"] = enc(x.grad)
        message["router_grad"] = enc(W.grad)
        message["expert_grads"] = {name: enc(getattr(local, name).grad) for name in ("w1", "w3", "w2")}
    return message


def main(ctx) -> None:
    header, arrays = unpack(ctx.payload)
    fns = student(ctx)
    if fns is None:
        return
    for k, index in enumerate(header["cases"]):
        def work(k=k, index=index):
            return run_case(fns, ctx.rank, ctx.world_size, arrays[7 * k:7 * k + 7], marker(ctx, index),
                            header["layers"][k])

        if not one_case(ctx, index, work):
            return


def warm() -> None:
    import torch

    cfg = config(8, 2)
    experts = moe().Experts(cfg, 2, 0)
    x = torch.zeros(3, D_MODEL, requires_grad=True)
    W = torch.zeros(8, D_MODEL, requires_grad=True)
    ids, gates = moe().route(x, W, 2, torch.zeros(8))
    out = experts(x, torch.zeros(3, dtype=torch.int64))
    (out.sum() + gates.sum()).backward()
