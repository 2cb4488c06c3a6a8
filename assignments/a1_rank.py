"""Assignment 1 inside a rank: run the student's ``ring_all_reduce`` on this rank's own
inputs, case by case, and report what it left in the tensor (see :mod:`.rank_common`)."""
from __future__ import annotations

from .rank_common import call_counter, encode, failure, student, unpack


def main(ctx) -> None:
    import torch

    header, arrays = unpack(ctx.payload)
    ring = student(ctx, "ring_all_reduce")
    if ring is None:
        return
    for index, op, x in zip(header["cases"], header["ops"], arrays):
        tensor = torch.from_numpy(x.copy())
        counter = call_counter()
        try:
            with counter:
                out = ring(tensor, op=op)
            message = {"calls": dict(counter.calls), "bytes": dict(counter.bytes),
                       "inplace": encode(tensor.detach().reshape(-1).numpy())}
            if isinstance(out, torch.Tensor) and out.numel() == tensor.numel():
                message["returned"] = encode(out.detach().reshape(-1).to(torch.float32).numpy())
        except Exception as exc:  # noqa: BLE001 - the student's code
            message = failure(exc)
        ctx.report(dict(message, case=index))
        if ctx.checkpoint("case", case=index, raised="error" in message) == "stop":
            return
