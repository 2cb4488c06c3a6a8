"""Accelerators the labs may run on: peak dense FLOP/s per compute dtype, and the precision
each one trains in best.

Model FLOPs utilisation (Chowdhery et al. 2022, App. B) divides the FLOP/s a run achieves
by the peak of the arithmetic it actually used. A T4 training in fp32 runs on its CUDA
cores (about 8 TFLOP/s), not on its fp16 tensor cores (65 TFLOP/s); an A100 training in
fp32 with PyTorch's defaults (TF32 off for matmuls) runs at 19.5, not at the bf16 312. So
the table holds one peak per dtype, and none where the GPU has no native support (bf16 on
a T4 or V100 is emulated).

Peaks are dense (no 2:4 sparsity) as the vendors' datasheets state them; "fp32" is the
non-tensor FP32 figure. ``device_names`` are the exact strings ``torch.cuda.get_device_name``
reports: :func:`lookup` matches them exactly (after trimming spaces), so that "Quadro T400"
is not taken for a T4, nor an "H100 NVL" for an H100 SXM. A GPU not listed gets no peak,
and the labs say "unknown GPU: MFU not computed".

The 16-bit peaks of the GPUs in :data:`solutions.facts.GPUS` are taken from there (one
source); the others carry their own citation keys from ``book/references.bib``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .facts import GPUS

__all__ = ["DTYPES", "Accelerator", "ACCELERATORS", "lookup", "Peak", "peak_flops", "choose_dtype",
           "UNKNOWN_GPU"]

#: Compute dtypes the labs train in (parameters and optimizer state stay fp32).
DTYPES = ("fp32", "fp16", "bf16")

UNKNOWN_GPU = "unknown GPU: MFU not computed"


@dataclass(frozen=True)
class Accelerator:
    """Peak dense FLOP/s per dtype (``None``: no native support) and where they come from."""

    name: str
    device_names: tuple
    peak_flops_per_s: dict = field(hash=False)
    cite: str
    note: str = ""


def _acc(name, device_names, fp32, fp16, bf16, cite, note=""):
    peaks = {"fp32": fp32, "fp16": fp16, "bf16": bf16}
    return Accelerator(name, tuple(device_names), peaks, cite, note)


_T4 = GPUS["T4"].peak_flops_per_s            # fp16 tensor, 65 TFLOP/s
_A100 = GPUS["A100 80GB"].peak_flops_per_s   # bf16 = fp16 dense, 312 TFLOP/s (40 GB and 80 GB alike)
_H100_SXM = GPUS["H100 SXM"].peak_flops_per_s
_H100_PCIE = GPUS["H100 PCIe"].peak_flops_per_s
_H200 = GPUS["H200"].peak_flops_per_s

ACCELERATORS = {
    a.name: a
    for a in (
        _acc("T4", ["Tesla T4"], 8.1e12, _T4, None, "nvidia2018t4",
             "Turing (compute capability 7.5): fp16 tensor cores, no bf16"),
        _acc("V100 SXM2", ["Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"], 15.7e12, 125e12, None,
             "nvidia2017v100", "Volta (7.0): fp16 tensor cores, no bf16"),
        _acc("V100 PCIe", ["Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"], 14e12, 112e12, None,
             "nvidia2017v100", "Volta (7.0): fp16 tensor cores, no bf16"),
        _acc("L4", ["NVIDIA L4"], 30.3e12, 121e12, 121e12, "nvidia2023l4",
             "Ada (8.9); the datasheet's 242 TFLOP/s is with 2:4 sparsity"),
        _acc("A10G", ["NVIDIA A10G"], 35e12, 70e12, 70e12, "baseten2023a10g",
             "AWS's variant of the A10 (8.6); NVIDIA publishes no datasheet for it"),
        _acc("A100 SXM", ["NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB"], 19.5e12, _A100, _A100,
             "nvidia2020a100"),
        _acc("A100 PCIe", ["NVIDIA A100-PCIE-40GB", "NVIDIA A100 80GB PCIe"], 19.5e12, _A100, _A100,
             "nvidia2020a100"),
        _acc("H100 SXM", ["NVIDIA H100 80GB HBM3"], 67e12, _H100_SXM, _H100_SXM, GPUS["H100 SXM"].cite),
        _acc("H100 PCIe", ["NVIDIA H100 PCIe"], 51e12, _H100_PCIE, _H100_PCIE, "nvidia2022h100"),
        _acc("H100 NVL", ["NVIDIA H100 NVL"], 60e12, 835.5e12, 835.5e12, "nvidia2022h100",
             "half the datasheet's 1,671 TFLOP/s, which is with 2:4 sparsity"),
        _acc("H200", ["NVIDIA H200"], 67e12, _H200, _H200, "nvidia2024h200"),
        _acc("H200 NVL", ["NVIDIA H200 NVL"], 60e12, 835.5e12, 835.5e12, "nvidia2024h200",
             "half the datasheet's 1,671 TFLOP/s, which is with 2:4 sparsity"),
        _acc("B200", ["NVIDIA B200"], 75e12, 2.25e15, 2.25e15, "nvidia2024b200",
             "HGX B200 at 1,000 W; half the datasheet's 4.5 PFLOP/s, which is with 2:4 sparsity"),
        _acc("MI300X", ["AMD Instinct MI300X", "AMD Instinct MI300X VF"], 163.4e12, 1307.4e12, 1307.4e12,
             "amd2023mi300x", "fp32 is the vector figure; the matrix fp32 figure is the same"),
    )
}

_BY_DEVICE_NAME = {n: a for a in ACCELERATORS.values() for n in a.device_names}


def lookup(device_name: str) -> Accelerator | None:
    """The accelerator whose reported name is exactly ``device_name`` (spaces trimmed), else ``None``."""
    if not isinstance(device_name, str):
        raise ValueError(f"device_name must be a string, got {device_name!r}")
    return _BY_DEVICE_NAME.get(device_name.strip())


@dataclass(frozen=True)
class Peak:
    flops_per_s: float
    gpu: str
    dtype: str
    cite: str

    @property
    def source(self) -> str:
        return f"solutions.hardware.ACCELERATORS[{self.gpu!r}], {self.dtype} dense ({self.cite})"


def peak_flops(device_name: str, dtype: str) -> Peak | None:
    """Peak dense FLOP/s of ``device_name`` computing in ``dtype`` ('fp32', 'fp16' or 'bf16'),
    or ``None`` when the GPU is not in the table or has no native ``dtype`` arithmetic."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    acc = lookup(device_name)
    if acc is None or acc.peak_flops_per_s[dtype] is None:
        return None
    return Peak(acc.peak_flops_per_s[dtype], acc.name, dtype, acc.cite)


def choose_dtype(requested: str, device_type: str, capability: tuple | None = None) -> tuple[str, str]:
    """``(dtype, reason)``: the compute precision for ``--dtype requested`` on a device of
    type ``device_type`` ('cpu' or 'cuda') with CUDA compute ``capability`` (major, minor).

    ``auto`` picks bf16 where the GPU has bf16 tensor cores (compute capability 8.0 and up:
    Ampere, Ada, Hopper, Blackwell; ROCm's MI300X reports 9.4), fp16 with a gradient scaler
    on GPUs with only fp16 tensor cores (7.x: V100, T4), fp32 on CPU and on older GPUs."""
    if requested not in ("auto", *DTYPES):
        raise ValueError(f"dtype must be one of ('auto', 'fp32', 'fp16', 'bf16'), got {requested!r}")
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
    if device_type == "cuda":
        if capability is None or len(capability) != 2:
            raise ValueError(f"capability must be (major, minor) for a CUDA device, got {capability!r}")
        capability = tuple(int(c) for c in capability)
    if requested != "auto":
        if requested == "bf16" and device_type == "cuda" and capability < (8, 0):
            return "bf16", "requested; this GPU has no bf16 tensor cores, so bf16 is emulated and slow"
        if requested == "fp16" and device_type == "cuda":
            return "fp16", "requested; with a gradient scaler"
        return requested, "requested"
    if device_type == "cpu":
        return "fp32", "CPU"
    if capability >= (8, 0):
        return "bf16", f"GPU with compute capability {capability[0]}.{capability[1]} (bf16 tensor cores)"
    if capability >= (7, 0):
        return "fp16", (f"GPU with compute capability {capability[0]}.{capability[1]} (fp16 tensor cores, "
                        "no bf16): fp16 with a gradient scaler")
    return "fp32", f"GPU with compute capability {capability[0]}.{capability[1]} (no tensor cores)"
