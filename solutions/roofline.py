"""The roofline: when a GPU is limited by its arithmetic and when by its memory, and where
a real run's utilisation goes.

(R1) **Ridge point.** A kernel that does ``F`` FLOPs and moves ``Q`` bytes between the GPU's
     memory (HBM) and its chips has an *arithmetic intensity* ``I = F / Q`` FLOPs per byte.
     At peak ``C`` FLOP/s and memory bandwidth ``W_hbm`` bytes/s it takes at least
     ``max(F / C, Q / W_hbm)``; the two are equal at the ridge point ``I* = C / W_hbm``.
     Below it a kernel is memory-bound, above it compute-bound (Williams et al. 2009).
(R2) **A matrix product** of ``T`` tokens by a ``d_in x d_out`` weight, in ``e``-byte
     elements, does ``2 T d_in d_out`` FLOPs and reads and writes at least
     ``e (T d_in + d_in d_out + T d_out)`` bytes, so
     ``I = 2 T d_in d_out / (e (T d_in + d_in d_out + T d_out))``. For 16-bit elements and
     weights much wider than ``T`` this is about ``T``: a matmul is compute-bound once it
     sees more tokens than the ridge point.
(R3) **Attainable rate** ``min(C, I W_hbm)``: the roof.
(R4) **Where a run's utilisation goes.** The step-time model of :mod:`solutions.steptime`
     writes the MFU of a predicted step as a product of four shares, each at most one:
     ``MFU = eta x balance x busy x model/hardware``, where ``eta`` is the matrix products'
     efficiency (S3), ``balance`` the share of the busiest stage's compute that every GPU
     also does (the output layer sits on one stage), ``busy`` the share of the step spent
     computing (the rest is exposed communication and the pipeline bubble), and
     ``model/hardware`` the share of the FLOPs run that MFU counts (recomputation is not
     counted; Chowdhery et al. 2022, App. B).

References: williams2009roofline, nvidia2022h100, nvidia2020a100, nvidia2024h200,
chowdhery2022palm.
"""
from __future__ import annotations

import numpy as np

from . import steptime
from ._validate import positive

__all__ = [
    "HBM_BYTES_PER_S",
    "ridge_point",
    "matmul_intensity",
    "attainable_flops",
    "MFU_SHARES",
    "mfu_shares",
]

#: HBM bandwidth per GPU in bytes/s, from the vendors' datasheets (SXM parts):
#: H100 SXM 3.35 TB/s (HBM3; nvidia2022h100), H200 4.8 TB/s (HBM3e; nvidia2024h200),
#: A100 80GB 2,039 GB/s and A100 40GB 1,555 GB/s (HBM2e / HBM2; nvidia2020a100).
HBM_BYTES_PER_S = {
    "H100 SXM": 3.35e12,
    "H200": 4.8e12,
    "A100 80GB": 2.039e12,
    "A100 40GB": 1.555e12,
}


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def ridge_point(peak_flops_per_s, memory_bytes_per_s):
    """(R1): ``I* = C / W_hbm``, FLOPs per byte. An H100 SXM: 989.4e12 / 3.35e12, about 295."""
    c = positive("peak_flops_per_s", peak_flops_per_s)
    w = positive("memory_bytes_per_s", memory_bytes_per_s)
    return _out(np.asarray(c) / np.asarray(w))


def matmul_intensity(tokens, d_in, d_out, bytes_per_element=2):
    """(R2): FLOPs per byte of a ``(tokens x d_in) @ (d_in x d_out)`` product that reads
    its two inputs and writes its output once, ``2 T d_in d_out / (e (T d_in + d_in d_out
    + T d_out))``. Elementwise over arrays."""
    t = np.asarray(positive("tokens", tokens), dtype=np.float64)
    a = np.asarray(positive("d_in", d_in), dtype=np.float64)
    b = np.asarray(positive("d_out", d_out), dtype=np.float64)
    e = positive("bytes_per_element", bytes_per_element)
    return _out(2 * t * a * b / (e * (t * a + a * b + t * b)))


def attainable_flops(intensity, peak_flops_per_s, memory_bytes_per_s):
    """(R3): the roof, ``min(C, I W_hbm)`` FLOP/s."""
    i = positive("intensity", intensity)
    c = positive("peak_flops_per_s", peak_flops_per_s)
    w = positive("memory_bytes_per_s", memory_bytes_per_s)
    return _out(np.minimum(np.asarray(c), np.asarray(i) * np.asarray(w)))


#: The four shares of (R4), in the order they are applied to the peak.
MFU_SHARES = ("eta", "balance", "busy", "model_share")


def mfu_shares(shape: steptime.Shape, lay: steptime.Layout, st: steptime.StepTime) -> dict:
    """(R4): the shares whose product is ``st.mfu`` for a step that
    :func:`solutions.steptime.step_time` predicted for ``shape`` on layout ``lay``:

    * ``eta``: the matrix products' efficiency (S3), ``st.efficiency``;
    * ``balance``: hardware utilisation while computing, over ``eta``:
      ``HFU x step / (eta x compute time)`` (below one when the busiest stage computes more
      than the average GPU, such as the stage that holds the output layer, and when
      communication overlapped with the computation takes some of the GPU's multiprocessors:
      the compute time includes that loss, ``Calibration.contention`` x the hidden seconds);
    * ``busy``: ``compute time / step``;
    * ``model_share``: model FLOPs over hardware FLOPs (recomputation is not counted).
    """
    steptime.check_recompute(lay.recompute)
    compute_s = st.breakdown_s["compute"]
    busy = compute_s / st.step_s
    balance = st.hfu * st.step_s / (st.efficiency * compute_s)
    model_share = steptime.model_flops_per_token(shape) / steptime.hardware_flops_per_token(shape, lay.recompute)
    shares = {"eta": st.efficiency, "balance": balance, "busy": busy, "model_share": model_share}
    product = float(np.prod(list(shares.values())))
    if not np.isclose(product, st.mfu, rtol=1e-9):  # pragma: no cover - one model, two spellings
        raise AssertionError(f"the shares multiply to {product}, not the step's MFU {st.mfu}")
    return shares
