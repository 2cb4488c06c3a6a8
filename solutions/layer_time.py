"""The compute time of one transformer layer on one GPU, from the shapes it actually runs.

Every layer is four kinds of work, each timed by what limits it (a roofline, Williams et
al. 2009, with the GPU's measured matmul ceiling in place of its peak):

1. **Matrix products** (the linear layers; the experts; the output layer), with the shapes
   one GPU sees *after* the tensor-parallel split: ``M`` tokens of the micro-batch (all of
   them under sequence parallelism, gathered before the product), ``K`` in, ``N`` out, the
   TP-split dimension divided by ``tp``. A product of ``2 M K N`` FLOPs moves at least
   ``e (M K + K N) + 2 M N`` bytes (inputs of ``e`` bytes, a 16-bit output). Its time is
   ``2 M K N / C + kappa x bytes / B``: ``C`` the ceiling of its precision
   (:meth:`solutions.hardware.GPUSpec.ceiling`), ``B`` the HBM bandwidth, and ``kappa`` the
   share of that traffic the kernel fails to hide (calibrated). So narrow products, which
   tensor parallelism makes and fine-grained experts make narrower, run further below the
   ceiling: their bytes per FLOP grow like ``1/M + 1/K + 1/N``. The backward pass runs two
   products of the same size (the gradients of the input and of the weight).
2. **Attention's core**. FlashAttention computes ``softmax(Q K^T) V`` without storing the
   scores and skips the blocks a causal mask hides (Dao et al. 2022; Dao 2023): forward
   ``2 s_ctx (d_qk + d_v)`` FLOPs per token and head with ``s_ctx`` the mean number of keys a
   query sees (``s/2`` causal, about the window for sliding-window layers), backward 2.5
   times that (it recomputes the scores). It runs at ``epsilon`` of the BF16 ceiling
   (calibrated), or of the FP8 ceiling where both products run in FP8 (Transformer Engine's
   FP8 dot-product attention; the exponentials are the same). Standard attention (the runs of
   2021-22) is two batched products over the full ``s x s`` scores and memory-bound softmax and
   dropout passes over them.
3. **Elementwise work**: norms, residual additions, dropout and its masks, the MLP's
   activation (GeLU, SwiGLU), rotary embeddings, quantisation to FP8/FP4, the MoE
   permutations, the loss. Their bytes are counted per token (a few times ``h`` and ``f``,
   against the products' ``h^2`` FLOPs: the elementwise share falls like ``1/h``) and cost
   ``beta x bytes / B`` (``beta`` = 1: the counted bytes move at the HBM's bandwidth).
   Sequence parallelism splits the ``h``-wide ones ``tp`` ways; without it (Megatron-LM
   before 2022) every TP rank repeats them.
   A mixture whose experts clamp their GLU's halves and carry biases (gpt-oss) pays, in
   Megatron-Core's grouped experts, passes of their own for both (:func:`eager_expert_bytes`).
4. **Work per local expert** of a MoE layer outside its grouped products (the fitted seconds
   per expert: per-expert launches, splits and quantisation of Megatron-Core's grouped GEMM),
   unless the experts run as a fused grouped MLP: one launch over every local expert with the
   activation in the products' epilogue (Transformer Engine's CuTe DSL grouped MLP, replayed
   in a full-iteration CUDA graph), which has neither that work nor the activation's pass.

The backward pass is twice the forward's elementwise work; recomputation adds a forward:
of every layer (full), of the attention core, the norms and the MLP's activation
(``'selective'``, Korthikanti et al. 2022 with the norms and activation Megatron-Core's recipes
add), or of the modules a recipe names (:data:`RECOMPUTE_MODULES`, Megatron-Core's
``recompute_modules``: DeepSeek-V3's recipes redo MLA's up-projections, gpt-oss-120b's the norms
and the experts' activation, neither the attention core).
A result is a :class:`Terms`: per component, seconds (or counts) for the forward and the
backward pass, so that the calibrated constants multiply them linearly.

References: williams2009roofline, dao2022flashattention, dao2023flashattention2, nvidia2025megatronbridge,
shah2024flashattention3, korthikanti2022reducing, narayanan2021megatron.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .moe_step import busiest

__all__ = ["COMPONENTS", "RECOMPUTE", "RECOMPUTE_MODULES", "recompute_modules", "Terms", "gemm_terms", "flash_terms", "layer_terms",
           "output_terms", "coefficients", "eager_expert_bytes"]

#: Megatron-Core's modules of selective recomputation (``recompute_modules``) that the model
#: times, each redone in the backward pass: ``core_attn`` the attention core (FlashAttention's
#: forward); ``layernorm`` the norms; ``moe_act`` the routed experts' activation; ``mla_up_proj``
#: MLA's query and key-value up-projections (products); ``mlp`` a dense layer's MLP (its
#: products and activation).
RECOMPUTE_MODULES = ("core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp")
#: The settings named as a whole: nothing, the attention core with the norms and activation, every layer.
RECOMPUTE = ("none", "selective", "full")


def recompute_modules(recompute: str):
    """The modules a ``recompute`` setting names (``'layernorm,moe_act'``), or None for
    ``'none'``, ``'selective'`` and ``'full'``; a one-line ``ValueError`` for anything else."""
    if recompute in RECOMPUTE:
        return None
    mods = frozenset(m.strip() for m in str(recompute).split(",") if m.strip())
    if not mods or not mods <= set(RECOMPUTE_MODULES):
        raise ValueError(f"recompute must be one of {list(RECOMPUTE)} or modules among "
                         f"{list(RECOMPUTE_MODULES)} joined by commas, got {recompute!r}")
    return mods


#: The components of a :class:`Terms`, and what multiplies each in the time.
COMPONENTS = ("gemm", "gemm_traffic", "elementwise", "attention", "units", "experts")


def coefficients(kappa, beta, epsilon, unit_s=0.0, expert_s=0.0) -> np.ndarray:
    """The vector that turns :class:`Terms` into seconds: ``1``, ``kappa``, ``beta``,
    ``1 / epsilon``, the seconds per layer (a layer's fixed cost: its kernels' launches) and
    per local expert of a MoE layer (the grouped products' per-expert work), each per
    micro-batch, forward and backward together."""
    return np.array([1.0, kappa, beta, 1.0 / epsilon, unit_s, expert_s])


@dataclass
class Terms:
    """Seconds at full efficiency (or unit counts) per component (rows, :data:`COMPONENTS`)
    for the forward and the backward pass (columns)."""

    a: np.ndarray

    @classmethod
    def zero(cls):
        return cls(np.zeros((len(COMPONENTS), 2)))

    def __add__(self, other):
        return Terms(self.a + other.a)

    def __mul__(self, k):
        return Terms(self.a * k)

    __rmul__ = __mul__

    def seconds(self, coeffs) -> tuple[float, float]:
        """``(forward, backward)`` seconds under the calibrated coefficients."""
        f, b = coeffs @ self.a
        return float(f), float(b)


def _add(t: Terms, comp: str, fwd: float, bwd: float) -> None:
    i = COMPONENTS.index(comp)
    t.a[i, 0] += fwd
    t.a[i, 1] += bwd


def gemm_terms(M, K, N, count, ceiling, hbm, elem_bytes=2.0, recompute=False) -> Terms:
    """``count`` products of ``(M x K) (K x N)``: forward, and backward (input and weight
    gradients), with a recomputed forward when ``recompute``."""
    t = Terms.zero()
    flops = 2.0 * M * K * N * count / ceiling
    e = elem_bytes
    fwd_bytes = (e * (M * K + K * N) + 2 * M * N) * count / hbm
    bwd_bytes = (e * (M * N + K * N) + 2 * M * K + e * (M * K + M * N) + 2 * K * N) * count / hbm
    _add(t, "gemm", flops, 2 * flops + (flops if recompute else 0.0))
    _add(t, "gemm_traffic", fwd_bytes, bwd_bytes + (fwd_bytes if recompute else 0.0))
    return t


def flash_terms(tokens, context, heads, qk_dim, v_dim, ceiling, exp_per_s, recompute=False) -> Terms:
    """FlashAttention for ``tokens`` queries of ``heads`` heads that see ``context`` keys on
    average: forward ``2 x context x (d_qk + d_v)`` FLOPs per query and head on the tensor
    cores and one exponential per score on the special-function units (FlashAttention-3's
    point: an H100 has 989 TFLOP/s of matmul and 3.9e12 exponentials/s); the backward pass
    2.5 times the FLOPs and the exponentials again (it recomputes the scores)."""
    t = Terms.zero()
    scores = tokens * context * heads
    f = 2.0 * scores * (qk_dim + v_dim) / ceiling
    e = scores / exp_per_s
    _add(t, "attention", f + e, 2.5 * f + e + ((f + e) if recompute else 0.0))
    return t


def _elementwise(t: Terms, fwd_bytes, hbm, recompute=False):
    _add(t, "elementwise", fwd_bytes / hbm, (2.0 + (1.0 if recompute else 0.0)) * fwd_bytes / hbm)


def _split(low_share, fn_low, fn_bf16):
    """A product whose FLOPs are ``low_share`` in low precision and the rest in BF16."""
    out = Terms.zero()
    if low_share > 0:
        out = out + fn_low() * low_share
    if low_share < 1:
        out = out + fn_bf16() * (1 - low_share)
    return out


def eager_expert_bytes(cfg, expert_ffn, hidden) -> tuple[float, float, float]:
    """Bytes per routed copy of a token that Megatron-Core's grouped experts (``TEGroupedMLP``,
    releases 0.15 to 0.19) move outside their fused kernels when the experts clamp their GLU
    (``cfg.clamped_glu``) and carry biases (``cfg.expert_bias``): ``(forward, backward,
    forward again when the activation is recomputed)``. Each eager PyTorch operation reads its
    inputs and writes its output once, 2 bytes an element; ``f`` the expert's width (after
    ETP), ``h`` the model's.

    - Clamped GLU (``weighted_bias_quick_geglu_impl``): the first product's two halves are
      clamped (each read and written: ``8 f``) and concatenated again (``8 f``) before the
      fused gating, ``16 f`` forward; backward, each clamp's mask applied to its gradient
      (the gradient and the saved input read, the result written: ``6 f`` each) and the two
      gradients concatenated (``8 f``), ``20 f``. A recomputed activation redoes the ``16 f``.
    - The second product's bias (``_apply_bias``), expert by expert: ``bias x weight`` written
      (``2 h``), added to the output (``4 h`` read, ``2 h`` written) and the pieces
      concatenated (``4 h``), ``12 h`` forward; backward, the gradients of the bias and of the
      routing weights, each the output's gradient times the other summed (``6 h`` each),
      ``12 h``. (The first product's bias is added inside the fused gating.)

    References: megatroncore2025experts (Megatron-Core 0.15: ``experts.py``,
    ``fused_bias_geglu.py``)."""
    f, h = float(expert_ffn), float(hidden)
    fwd = (16.0 * f if cfg.clamped_glu else 0.0) + (12.0 * h if cfg.expert_bias else 0.0)
    bwd = (20.0 * f if cfg.clamped_glu else 0.0) + (12.0 * h if cfg.expert_bias else 0.0)
    again = 16.0 * f if cfg.clamped_glu else 0.0
    return fwd, bwd, again


def layer_terms(shape, lay, gpu, recipe, moe_layer=False, imbalance=None) -> Terms:
    """One layer (dense, or MoE when ``moe_layer``) of ``shape`` for one micro-batch on one GPU
    of layout ``lay``, trained in ``recipe``: its products, attention core and elementwise
    bytes, forward and backward (see the module docstring)."""
    b, s, h, cp, tp = lay.micro_batch, shape.seq_len, shape.hidden, lay.cp, lay.tp
    T = b * s / cp                     # tokens of the micro-batch on this GPU (all of them inside a product)
    sp = tp > 1 and lay.sequence_parallel
    a, g = shape.heads / tp, max(1.0, shape.kv / tp)
    d_qk, d_v = shape.qk_dim, shape.v_dim
    full = lay.recompute == "full"
    hbm = gpu.hbm_bytes_per_s
    c16 = gpu.ceiling("bf16") if gpu.supports("bf16") else gpu.ceiling("fp16" if gpu.supports("fp16") else "fp32")
    low = recipe.name not in ("bf16", "fp16")
    c_low = gpu.ceiling(recipe.name) if low else c16
    low_share = (1.0 - recipe.bf16_share) if low else 0.0
    e_low = recipe.gemm_bytes

    mods = recompute_modules(lay.recompute) or frozenset()

    def product(M, K, N, count=1, again=False):
        rec = full or again
        return _split(low_share, lambda: gemm_terms(M, K, N, count, c_low, hbm, e_low, rec),
                      lambda: gemm_terms(M, K, N, count, c16, hbm, 2.0, rec))

    t = Terms.zero()
    gemm_in = gemm_out = 0.0  # widths quantised per token (inputs forward, output gradients backward)
    # attention projections: (K, N, an MLA up-projection?)
    if shape.q_lora or shape.kv_lora:
        q_in = shape.q_lora or h
        parts = [(h, shape.q_lora, False)] if shape.q_lora else []
        parts += [(q_in, a * d_qk, bool(shape.q_lora)), (h, shape.kv_lora + shape.qk_rope, False),
                  (shape.kv_lora, a * (d_qk - shape.qk_rope + d_v), True), (a * d_v, h, False)]
    else:
        parts = [(h, (a + 2 * g) * d_qk, False), (a * d_v, h, False)]
    for K, N, up_projection in parts:
        t = t + product(T, K, N, again=up_projection and "mla_up_proj" in mods)
        gemm_in, gemm_out = gemm_in + K, gemm_out + N
    # attention core
    if lay.attention == "flash":
        ctx = shape.mean_context
        c_attn = gpu.ceiling("fp8") if lay.attention_precision == "fp8" else c16  # FP8 attention: both products
        t = t + flash_terms(T, ctx, a, d_qk, d_v, c_attn, gpu.exponentials_per_s,
                            recompute=full or lay.recompute == "selective" or "core_attn" in mods)
        scores = 0.0
    else:
        seqs = b * a / cp
        rec = full or lay.recompute == "selective" or "core_attn" in mods
        t = t + gemm_terms(s / cp, d_qk, s, seqs, c16, hbm, 2.0, rec) + gemm_terms(s / cp, s, d_v, seqs, c16, hbm, 2.0, rec)
        scores = (4.0 + (5.0 if shape.dropout else 0.0)) * a * s * T  # scale-mask-softmax (and dropout) on the scores
    # MLP or experts
    up = 2 if shape.mlp == "swiglu" else 1
    act = 6.0 if shape.mlp == "swiglu" else 4.0
    if moe_layer:
        m = shape.moe
        k_imb = busiest(m, lay.ep) if imbalance is None else imbalance
        Tm = T / tp  # the sequence-parallel shard each GPU dispatches
        local = m.experts // lay.ep
        # the copies this GPU's experts run: its ETP group gathers its members' copies, and each
        # member runs all of them on 1/ETP of every expert's width (the FLOPs do not depend on ETP)
        copies = Tm * m.top_k * k_imb * lay.etp
        rows = copies / local
        fe = m.expert_ffn / lay.etp
        t = t + product(Tm, h, m.experts)  # router
        t = t + product(rows, h, up * fe, local) + product(rows, fe, h, local)
        fused = lay.expert_kernels == "fused"
        if not fused:  # the work per local expert outside the grouped products (fitted)
            _add(t, "experts", local / 3.0, 2.0 * local / 3.0)
            # a clamped GLU and biased experts: passes of their own (counted, not fitted)
            e_fwd, e_bwd, e_again = eager_expert_bytes(m, fe, h)
            act_again = full or lay.recompute == "selective" or "moe_act" in mods
            _add(t, "elementwise", copies * e_fwd / hbm,
                 copies * (e_bwd + (e_fwd if full else e_again if act_again else 0.0)) / hbm)
        if m.shared_experts:
            fs = m.shared_experts * m.expert_ffn / tp
            t = t + product(T, h, up * fs) + product(T, fs, h)
            gemm_in, gemm_out = gemm_in + h + fs, gemm_out + up * fs + h
        # a fused grouped MLP applies the activation in its products' epilogue: no pass of its own
        routed_act = 0.0 if fused else act * fe
        mlp_bytes = copies * (routed_act + 8.0 * h) + (act * m.shared_experts * m.expert_ffn / tp) * T
        quant_mlp = copies * (h + fe), copies * (up * fe + h)
    else:
        f = shape.ffn / tp
        again = "mlp" in mods
        t = t + product(T, h, up * f, again=again) + product(T, f, h, again=again)
        mlp_bytes = act * f * T
        quant_mlp = (T * (h + f), T * (up * f + h))
    # elementwise bytes of the forward pass
    rep = tp if sp else 1
    hidden_bytes = (8.0 + 12.0 + (10.0 if shape.dropout else 0.0)) * h * T / rep
    rope = 4.0 * (a + g) * d_qk * T if shape.mlp == "swiglu" else 0.0
    quant = 0.0
    if low:
        quant = recipe.quant_bytes * (low_share * (T * gemm_in + quant_mlp[0]) + low_share * (T * gemm_out + quant_mlp[1])) / 2
    _elementwise(t, hidden_bytes + mlp_bytes + rope + scores + quant, hbm, full)
    if lay.recompute == "selective" and lay.attention == "flash":  # the norms and the activation again
        _add(t, "elementwise", 0.0, (8.0 * h * T / rep + mlp_bytes) / hbm)
    # the named modules' elementwise passes again: the norms, the experts' or a dense MLP's activation
    again_bytes = (8.0 * h * T / rep if "layernorm" in mods else 0.0) \
        + (copies * routed_act if moe_layer and "moe_act" in mods else 0.0) \
        + (mlp_bytes if not moe_layer and "mlp" in mods else 0.0)
    _add(t, "elementwise", 0.0, again_bytes / hbm)
    _add(t, "units", 1.0 / 3.0, 2.0 / 3.0)
    return t


def output_terms(shape, lay, gpu, recipe) -> Terms:
    """The output layer and the loss for one micro-batch on one GPU (vocabulary split over
    TP, Megatron's vocab-parallel cross-entropy); always in BF16 (every recipe keeps it)."""
    b, s = lay.micro_batch, shape.seq_len
    T = b * s / lay.cp
    V = shape.vocab / lay.tp
    c16 = gpu.ceiling("bf16") if gpu.supports("bf16") else gpu.ceiling("fp16" if gpu.supports("fp16") else "fp32")
    t = gemm_terms(T, shape.hidden, V, 1, c16, gpu.hbm_bytes_per_s, 2.0, False)
    _elementwise(t, 10.0 * V * T, gpu.hbm_bytes_per_s)
    _add(t, "units", 1.0 / 3.0, 2.0 / 3.0)
    return t
