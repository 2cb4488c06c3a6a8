"""The field in 2025-26: published figures the course quotes beside its own models.

Each entry is a figure as its source prints it, with the bibtex key (``book/references.bib``)
of that source; nothing here is fitted or computed. The sections that quote them: low
precision after per-tensor FP8 (``12-precision-and-kernels``), optimizers that need whole
matrices (``07-fsdp``), over-training (``11-after-chinchilla``), post-training with
reinforcement learning (``08-when-to-use-what``).
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = [
    "BlockScaledFormat",
    "BLOCK_SCALED_FORMATS",
    "LowPrecisionRun",
    "LOW_PRECISION_RUNS",
    "KIMI_K2",
    "OvertrainedModel",
    "OVERTRAINED_SMALL_MODELS",
    "RL_SCALING_STUDY",
]


@dataclass(frozen=True)
class BlockScaledFormat:
    """A format in which a block of ``block`` consecutive elements shares one scale factor,
    stored in ``scale_format``; ``tensor_scale`` says whether one more scale per tensor
    sits on top."""

    name: str
    element: str
    block: int
    scale_format: str
    tensor_scale: bool
    cite: str


#: Transformer Engine's documentation of its Blackwell recipes (nvidia2025te): MXFP8 (the OCP
#: microscaling format: 32 elements share a power-of-two E8M0 scale) and NVFP4 (E2M1
#: elements, 16 share an FP8 E4M3 scale, under one FP32 scale per tensor).
BLOCK_SCALED_FORMATS = MappingProxyType({
    f.name: f
    for f in (
        BlockScaledFormat("MXFP8", "E4M3 or E5M2", 32, "E8M0", False, "nvidia2025te"),
        BlockScaledFormat("NVFP4", "E2M1", 16, "E4M3", True, "nvidia2025te"),
    )
})


@dataclass(frozen=True)
class LowPrecisionRun:
    """A pre-training run in a format narrower than BF16, as reported: ``params`` (total),
    ``tokens``, the precision of its matrix products, and (where given) ``gpus`` as the
    source prints them and ``tflops_per_gpu``."""

    name: str
    params: float
    tokens: float
    precision: str
    cite: str
    gpus: str = ""
    tflops_per_gpu: float | None = None
    note: str = ""


LOW_PRECISION_RUNS = MappingProxyType({
    r.name: r
    for r in (
        # Mishra et al. 2025 (arXiv 2506.08027), abstract: MXFP8 (E4M3) pre-training of an
        # 8B model on 15T tokens matches BF16, with scales rounded towards infinity.
        LowPrecisionRun("MXFP8 8B", 8e9, 15e12, "MXFP8", "mishra2025mxfp8"),
        # NVIDIA 2025 (arXiv 2509.25149), abstract: a 12B hybrid Mamba-Transformer on 10T
        # tokens in NVFP4, the longest publicly documented 4-bit run.
        LowPrecisionRun("NVFP4 12B", 12e9, 10e12, "NVFP4", "nvidia2025nvfp4",
                        note="hybrid Mamba-Transformer"),
        # Meta's Llama 4 announcement (April 2025): Behemoth pre-trained in FP8 on 32K GPUs at
        # 390 TFLOP/s per GPU, on a mixture of more than 30 trillion tokens; about 2T total
        # parameters (288B active).
        LowPrecisionRun("Llama 4 Behemoth", 2e12, 30e12, "FP8", "meta2025llama4", gpus="32K",
                        tflops_per_gpu=390, note="more than 30T tokens; 288B active parameters"),
    )
})

#: Kimi K2 (Kimi Team 2025, arXiv 2507.20534): a mixture of experts of 1.04T parameters,
#: 32B active, pre-trained on 15.5T tokens with MuonClip (Muon with QK-Clip) without a
#: loss spike.
KIMI_K2 = MappingProxyType({"total_params": 1.04e12, "active_params": 32e9, "tokens": 15.5e12,
                            "optimizer": "MuonClip", "cite": "kimi2025k2"})


@dataclass(frozen=True)
class OvertrainedModel:
    """A small model trained far past compute-optimal: parameters and tokens as reported."""

    name: str
    params: float
    tokens: float
    cite: str

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


OVERTRAINED_SMALL_MODELS = (
    # Allal et al. 2025 (arXiv 2502.02737), abstract: SmolLM2, 1.7B, on about 11T tokens.
    OvertrainedModel("SmolLM2 1.7B", 1.7e9, 11e12, "allal2025smollm2"),
    # Hugging Face's Smol Training Playbook (2025): SmolLM3, 3B, on 11T tokens.
    OvertrainedModel("SmolLM3 3B", 3e9, 11e12, "hf2025smolplaybook"),
    # Qwen3 (Yang et al. 2025, arXiv 2505.09388): every model of the family, the 0.6B one
    # included, pre-trained on about 36T tokens.
    OvertrainedModel("Qwen3 0.6B", 0.6e9, 36e12, "yang2025qwen3"),
)

#: Khatri et al. 2025 (arXiv 2510.13786), abstract: more than 400,000 GPU-hours of RL
#: experiments fitted with sigmoidal compute-performance curves, and one run of their recipe
#: (ScaleRL) scaled to 100,000 GPU-hours, its validation performance predicted from the start.
RL_SCALING_STUDY = MappingProxyType({"gpu_hours": 400_000, "largest_run_gpu_hours": 100_000,
                                     "cite": "khatri2025rl"})
