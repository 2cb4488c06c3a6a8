"""Assignment 5 inside a rank: the student's ``one_f_one_b`` on a grid of pipelines (rank 0),
and ``pipeline_step`` on this rank's stage of a small GPT, with the stage module watched:
each pass logs a fingerprint of the data it ran on, which the grader (and only the grader)
matches against the micro-batches' (see :mod:`.rank_common`). ``model`` (``labs/model.py``)
and ``stage`` (the labs' ``Stage``) are loaded beside this module."""
from __future__ import annotations

import base64

import numpy as np

from .rank_common import course_model, error_text, failure, student, unpack

#: The model the run trains one step of (small: CPU ranks); b sequences per micro-batch.
MODEL = {"vocab_size": 32, "block_size": 8, "n_layer": 4, "n_head": 2, "d_model": 16}
MICRO_BATCH = 2
#: Values of a tensor a fingerprint keeps besides its sum and absolute sum.
FINGERPRINT_VALUES = 6


def build_case(m: int):
    """``(model, inputs, targets)`` drawn from torch's global generator (seed it first): the
    unsplit model and ``m`` micro-batches of token ids."""
    import torch

    model_module = course_model()
    cfg = model_module.GPTConfig(**MODEL)
    model = model_module.GPT(cfg)
    for p in model.parameters():  # biases and norms too, so that a wrong gradient shows
        p.data.add_(0.05 * torch.randn_like(p))
    tokens = torch.randint(0, cfg.vocab_size, (m, MICRO_BATCH, cfg.block_size + 1))
    return model, [t[:, :-1].clone() for t in tokens], [t[:, 1:].clone() for t in tokens]


def case_seed(seed: int, salt: int) -> int:
    return (seed * 1_000_003 + salt) % 2**31


def stage_class():
    """The labs' ``Stage``: in a rank, the copy loaded beside this module; else the labs'."""
    try:
        from .stage import Stage
    except ImportError:
        from labs.pipeline_parallel import Stage
    return Stage


def loss_of(logits, targets):
    """A micro-batch's loss: mean next-token cross-entropy (``labs.model.GPT``'s)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def fingerprint(t) -> list:
    """A few numbers that tell one micro-batch's tensor from another's (its sum, absolute
    sum and first values, in float64), or ``[]`` for what is not a tensor."""
    import torch

    if not isinstance(t, torch.Tensor):
        return []
    x = t.detach().reshape(-1).to(torch.float64)
    return [float(x.sum()), float(x.abs().sum())] + [float(v) for v in x[:FINGERPRINT_VALUES]]


def watched(stage, log):
    """The stage module as the student gets it: the real stage, which also logs each
    forward pass (``["F", fingerprint of its input]``) and, when the output's gradient
    arrives, ``["B", k, fingerprint of the gradient]`` (k: the forward pass's entry)."""
    import torch.nn as nn

    class Watched(nn.Module):
        def __init__(self):
            super().__init__()
            self.stage = stage

        def forward(self, x):
            k = len(log)
            log.append(["F", fingerprint(x)])
            out = self.stage(x)
            if getattr(out, "requires_grad", False):
                out.register_hook(lambda g, k=k: log.append(["B", k, fingerprint(g)]))
            out.microbatch = k
            return out

    return Watched()


def order_grid(fn, grid) -> dict:
    """``one_f_one_b(p, m, s)`` for every stage of every ``(p, m)`` of ``grid``, as plain data."""
    orders = {}
    for p, m in grid:
        row = []
        for s in range(p):
            try:
                got = fn(p, m, s)
                row.append([list(x) if isinstance(x, tuple) else x for x in got][:4 * m + 8]
                           if isinstance(got, (list, tuple)) else repr(got)[:40])
            except NotImplementedError:
                row = "NotImplementedError"
                break
            except Exception as exc:  # noqa: BLE001
                row = f"stage {s}: {error_text(exc)[:150]}"
                break
        orders[f"{p},{m}"] = row
    return orders


def own_stage(rank: int, n: int, m: int, arrays: list):
    """``(stage, inputs, targets)`` from what the grader sent this rank: its stage's
    parameters (the rest of the model holds zeros: a rank has no other stage's weights), the
    micro-batches' token ids on the first stage and their targets on the last (None
    elsewhere)."""
    import torch

    model_module = course_model()
    model = model_module.GPT(model_module.GPTConfig(**MODEL))
    stage = stage_class()(model, rank, n)
    with torch.no_grad():
        for q in model.parameters():
            q.zero_()
        values, offset = torch.from_numpy(arrays[0]), 0
        for q in stage.parameters():
            q.copy_(values[offset:offset + q.numel()].view_as(q))
            offset += q.numel()
    shape = (m, MICRO_BATCH, MODEL["block_size"])
    tokens = iter(arrays[1:])
    xs = list(torch.from_numpy(next(tokens)).long().view(shape)) if rank == 0 else None
    ys = list(torch.from_numpy(next(tokens)).long().view(shape)) if rank == n - 1 else None
    return stage, xs, ys


def run_step(fns, rank, n, m, arrays) -> dict:
    """One ``pipeline_step`` of this rank's stage; what the grader checks."""
    import torch

    stage, xs, ys = own_stage(rank, n, m, arrays)
    log, pairs = [], []

    def loss_fn(logits, targets):
        mine = next((k for k, y in enumerate(ys or []) if targets is y or (
            isinstance(targets, torch.Tensor) and targets.shape == y.shape and torch.equal(targets, y))), -1)
        pairs.append([getattr(logits, "microbatch", -1), mine])
        return loss_of(logits, targets)

    last = rank == n - 1
    message = {}
    try:
        loss = fns["pipeline_step"](watched(stage, log), m, (MICRO_BATCH, MODEL["block_size"], MODEL["d_model"]),
                                    inputs=xs if rank == 0 else None, targets=ys if last else None,
                                    loss_fn=loss_fn if last else None)
        if last:
            message["loss"] = float(loss) if loss is not None else None
    except Exception as exc:  # noqa: BLE001 - the student's code
        message = failure(exc)
    grads = [q.grad for q in stage.parameters()]
    if "error" not in message and all(g is not None for g in grads):
        flat = torch.cat([g.reshape(-1) for g in grads]).float().numpy()
        message["grads"] = base64.b64encode(np.ascontiguousarray(flat).tobytes()).decode()
    message.update(log=log[:4 * m + 8], pairs=pairs[:m + 4], no_grad=sum(g is None for g in grads))
    return message


def main(ctx) -> None:
    header, arrays = unpack(ctx.payload)
    fns = student(ctx)
    if fns is None:
        return
    offset = 0
    for index in header["cases"]:
        run = header["runs"][index]
        count = 0 if run == "grid" else 1 + (ctx.rank == 0) + (ctx.rank == ctx.world_size - 1)
        mine, offset = arrays[offset:offset + count], offset + count
        if run == "grid":
            message = {}
            if ctx.rank == 0:
                try:
                    message = {"orders": order_grid(fns["one_f_one_b"], [tuple(x) for x in header["grid"]])}
                except Exception as exc:  # noqa: BLE001 (a failure the grid's own guard missed)
                    message = {"orders": f"one_f_one_b: {error_text(exc)}"}
        else:
            message = run_step(fns, ctx.rank, ctx.world_size, run["m"], mine)
        try:
            ctx.report(dict(message, case=index))
        except (TypeError, ValueError):  # an order that is not plain data
            ctx.report({"case": index, "orders": "not JSON: the passes must be ('F' | 'B', int) pairs"})
        if ctx.checkpoint("case", case=index, raised="error" in message) == "stop":
            return


def warm() -> None:
    import torch

    model_module = course_model()
    model = model_module.GPT(model_module.GPTConfig(**MODEL))
    stage = stage_class()(model, 0, 1)
    x = torch.zeros(MICRO_BATCH, MODEL["block_size"], dtype=torch.long)
    out = watched(stage, [])(x)
    loss_of(out, x).backward()
