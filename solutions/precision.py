"""Training precisions as recipes: what each one changes in the step time and the memory.

A recipe says which peak the matrix products of the linear layers run at, how many bytes
their inputs take (so how memory-bound a small product is), the elementwise work of
quantising them, the extra bytes per parameter it keeps, which collectives it makes
smaller, and which layers it leaves in BF16. The attention core (FlashAttention), the
norms, the optimizer and every reduction stay in 16 or 32 bits in all of them.

* ``bf16``: mixed precision (Micikevicius et al. 2018), the course's reference.
* ``fp8``: Transformer Engine's FP8 (E4M3 forward, E5M2 gradients) with per-tensor
  (delayed or current) scaling on Hopper, or DeepSeek-V3's 1x128 / 128x128 block scales.
  On Hopper the FP8 tensor cores take only the "TN" layout, so TE keeps each weight and
  its transpose in FP8 for the step: two bytes per parameter on top of the master state
  (NVIDIA Transformer Engine user guide, "FP8 primer"). Megatron-Core can gather the
  ZeRO-sharded weights in FP8 (``--fp8-param-gather``): one byte per element on the wire,
  and the model then keeps its compute weights in FP8 only ("keep the compute param in fp8
  (do not use any other intermediate dtype)", Megatron-Core's DDP config), with no BF16 copy:
  the FP32 master weights are the optimizer's. Megatron-Bridge's FP8 and MXFP8 recipes set
  it (``bf16_with_fp8_current_scaling_mixed``, ``bf16_with_mxfp8_mixed``); its NVFP4 recipe
  of 2026 keeps BF16 weights (``fp8_param_gather = False``).
* ``mxfp8``: OCP microscaling FP8 (Rouhani et al. 2023): one E8M0 scale per 32 elements,
  along the contraction dimension, so a tensor used in two products is quantised twice
  (row- and column-wise): 2 (1 + 1/32) bytes per parameter. Blackwell and CDNA 4 run it at
  the FP8 rate.
* ``nvfp4``: NVIDIA's FP4 with one FP8 scale per 16 elements and a per-tensor FP32 scale,
  as in NVIDIA's 12B model trained on 10T tokens (NVIDIA 2025, "Pretraining Large Language
  Models with NVFP4"): two quantised copies of 0.5 + 1/16 bytes per parameter, random
  Hadamard transforms on the weight-gradient inputs, and about 15% of the linear layers
  (the last blocks) kept in BF16.

DeepSeek-V3 (report sec. 3.3) dispatches its MoE tokens in FP8 and combines them in BF16:
:data:`RECIPES` ``[...].dispatch_bytes``.

References: micikevicius2018mixed, micikevicius2022fp8, nvidia2025te, rouhani2023mx,
nvidia2025nvfp4, liu2024deepseekv3.
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import PRECISION_PEAK

__all__ = ["Recipe", "RECIPES", "recipe"]


@dataclass(frozen=True)
class Recipe:
    """What training in ``name`` changes (bytes are per element or per parameter)."""

    name: str
    #: bytes per element of a linear layer's GEMM inputs (1 for FP8, 0.5 + 1/16 for NVFP4).
    gemm_bytes: float
    #: bytes per parameter of the quantised copies of the weights kept for the step.
    weight_copy_bytes: float
    #: bytes per element of the ZeRO weight all-gather.
    param_gather_bytes: float
    #: bytes per element of the MoE dispatch (towards the experts); combines stay 2.
    dispatch_bytes: float
    #: share of the linear layers' FLOPs left in BF16.
    bf16_share: float
    #: bytes read and written per element to quantise a GEMM input (cast, scales, the
    #: second layout for the other product), 0 for BF16.
    quant_bytes: float
    cite: str
    note: str = ""
    #: the compute weights live only in the quantised copies (Megatron-Core's
    #: ``fp8_param_gather``): no 16-bit weights beside them.
    quantised_weights_only: bool = False

    def weight_bytes(self, sixteen_bit: float) -> float:
        """Bytes per parameter of the weights the step holds: the ``sixteen_bit`` ones (a
        memory convention's) and the quantised copies, or the copies alone."""
        return self.weight_copy_bytes + (0.0 if self.quantised_weights_only else sixteen_bit)

    @property
    def peak(self) -> str:
        """The :class:`solutions.hardware.GPUSpec` peak the linear layers run at."""
        return PRECISION_PEAK[self.name]


RECIPES = {
    r.name: r
    for r in (
        Recipe("bf16", 2.0, 0.0, 2.0, 2.0, 1.0, 0.0, "micikevicius2018mixed", "the course's reference"),
        Recipe("fp16", 2.0, 0.0, 2.0, 2.0, 1.0, 0.0, "micikevicius2018mixed", "with a loss scaler"),
        Recipe("fp8", 1.0, 2.0, 1.0, 1.0, 0.0, 2.0 + 2.0, "nvidia2025te",
               "per-tensor or block-scaled E4M3/E5M2; the weight and its transpose in FP8, no BF16 weights",
               quantised_weights_only=True),
        Recipe("mxfp8", 1.0 + 1 / 32, 2 * (1.0 + 1 / 32), 1.0 + 1 / 32, 1.0 + 1 / 32, 0.0, 2.0 + 2 * (1 + 1 / 32),
               "rouhani2023mx", "row- and column-wise MX copies, one E8M0 scale per 32 elements, no BF16 weights",
               quantised_weights_only=True),
        Recipe("nvfp4", 0.5 + 1 / 16, 2 * (0.5 + 1 / 16), 0.5 + 1 / 16, 1.0, 0.15, 2.0 + 2 * (0.5 + 1 / 16) + 2.0,
               "nvidia2025nvfp4", "16-element FP8 scales; Hadamard transforms on wgrad inputs; last blocks in BF16"),
    )
}


def recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"precision must be one of {list(RECIPES)}, got {name!r}")
    return RECIPES[name]
