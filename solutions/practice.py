"""Worked problems at the end of Sections 1-8: each scenario's inputs and its answers.

Every function here is one problem: it fixes the problem's inputs (a model, a cluster, a
budget) as keyword defaults and returns a dict holding those inputs and the answers, computed
with the course's own formulas (nothing is re-derived here). The section notebooks glue the
inputs into the question and the answers into its hidden solution; ``tests/solutions/test_practice.py``
checks each answer against an independent calculation.

Units follow the course: model-state memory in GB = 1e9 bytes, bandwidth in bytes/s, time in
seconds.
"""
from __future__ import annotations

import math

from solutions import communication, compute, facts, memory, model_parallel, pipeline, scaling

GB = 1e9
SECONDS_PER_DAY = 86_400

H100 = facts.GPUS["H100 SXM"]
NVLINK = facts.INTERCONNECTS["NVLink (H100 SXM)"]
NIC = facts.INTERCONNECTS["400 Gb/s NIC"]


def scientific(x, digits=1):
    """``4.2e22 -> '4.2×10²²'``, ``1e24 -> '10²⁴'``: plain text that a problem can glue into a
    sentence."""
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    sup = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")
    mantissa = "" if mantissa.rstrip("0").rstrip(".") == "1" else f"{mantissa}×"
    return f"{mantissa}10{str(int(exponent)).translate(sup)}"


# --- Section 1: a single GPU is not enough ----------------------------------------------

def s01_state(params=13e9):
    """Model state of one model under the course's 12 bytes/param and ZeRO's 16
    (weights, gradients, Adam moments; ZeRO adds the fp32 master copy), against one H100."""
    state12 = memory.zero_memory_per_gpu(params, 0, 1, "chapter_12")
    state16 = memory.zero_memory_per_gpu(params, 0, 1, "zero_16")
    return dict(params=params, gpu=H100.name, gpu_gb=H100.memory_gb,
                state12_gb=state12 / GB, state16_gb=state16 / GB,
                fits12=state12 <= H100.memory_gb * GB, fits16=state16 <= H100.memory_gb * GB)


def s01_largest_model(convention="zero_16"):
    """Largest model whose model state alone fills one H100: memory / bytes per parameter."""
    per_param = memory.get_convention(convention).total
    return dict(gpu=H100.name, gpu_gb=H100.memory_gb, bytes_per_param=per_param,
                params=H100.memory_gb * GB / per_param)


def s01_training_days(params=1e9, tokens=20e9, mfu=0.4):
    """Days to train on one H100 at a given utilisation: 6ND / (peak x MFU) (Eq. 6ND)."""
    flops = scaling.training_flops(params, tokens)
    seconds = compute.training_time_seconds(flops, H100.peak_flops_per_s, mfu)
    return dict(params=params, tokens=tokens, mfu=mfu, gpu=H100.name, flops=flops,
                days=seconds / SECONDS_PER_DAY)


# --- Section 2: Kaplan ---------------------------------------------------------------------

def s02_tenfold_params(factor=10):
    """Kaplan's L(N) ~ N^-0.076: the loss ratio when N grows by ``factor``."""
    alpha = facts.KAPLAN_LOSS_LAWS["N"].exponent
    return dict(factor=factor, alpha=alpha, loss_ratio=factor ** -alpha,
                per_doubling=scaling.loss_reduction_per_doubling(alpha))


def s02_kaplan_split(budget_factor=10):
    """Kaplan's allocation N ~ C^0.73, D ~ C^0.27: how N and D grow with the budget."""
    n_growth, d_growth = scaling.kaplan_allocation(budget_factor, 1, 1)
    d_growth *= scaling.FLOPS_PER_PARAM_PER_TOKEN  # kaplan_allocation returns D = C/(6N)
    return dict(budget_factor=budget_factor, n_exponent=scaling.KAPLAN_N_EXPONENT,
                n_growth=n_growth, d_growth=d_growth)


def s02_gpt3_ratio(model="GPT-3"):
    """Tokens per parameter of a published run, and its 6ND compute."""
    m = facts.MODELS[model]
    return dict(model=model, params=m.params, tokens=m.tokens, ratio=m.tokens / m.params,
                flops=scaling.training_flops(m.params, m.tokens),
                chinchilla_ratio=scaling.CHINCHILLA_TOKENS_PER_PARAM)


# --- Section 3: Chinchilla ------------------------------------------------------------------

def s03_twenty_tokens(budget=1e24):
    """The rule of thumb D = 20 N on a budget C = 6ND: N = sqrt(C / 120)."""
    N, D = scaling.twenty_tokens_allocation(budget)
    return dict(budget=budget, tokens_per_param=scaling.CHINCHILLA_TOKENS_PER_PARAM, params=N, tokens=D)


def s03_loss_of(model="Chinchilla"):
    """The parametric loss (Hoffmann et al. 2022, eq. 10, printed constants) of a published run."""
    m = facts.MODELS[model]
    c = scaling.HOFFMANN_ROUNDED
    return dict(model=model, params=m.params, tokens=m.tokens,
                loss=scaling.parametric_loss(m.params, m.tokens, c),
                param_term=c.A / m.params ** c.alpha, data_term=c.B / m.tokens ** c.beta, E=c.E)


def s03_budget_growth(budget_factor=10):
    """Closed-form optimum N ~ C^a, a = beta / (alpha + beta): how N and D grow with the budget."""
    a = scaling.allocation_exponent(scaling.HOFFMANN_ROUNDED)
    return dict(budget_factor=budget_factor, a=a, n_growth=budget_factor ** a,
                d_growth=budget_factor ** (1 - a))


# --- Section 4: why distribute ---------------------------------------------------------------

def s04_fewest_gpus(params=70e9, convention="zero_16"):
    """Fewest 80 GB GPUs whose memory adds up to the model state, before activations."""
    state = memory.zero_memory_per_gpu(params, 0, 1, convention)
    return dict(params=params, gpu=H100.name, gpu_gb=H100.memory_gb, state_gb=state / GB,
                bytes_per_param=memory.get_convention(convention).total,
                gpus=math.ceil(state / (H100.memory_gb * GB)))


def s04_cluster_days(model="Chinchilla", num_gpus=1024, mfu=0.4):
    """Days to train a published run on a cluster of H100s: 6ND / (n x peak x MFU)."""
    m = facts.MODELS[model]
    flops = scaling.training_flops(m.params, m.tokens)
    seconds = compute.training_time_seconds(flops, H100.peak_flops_per_s, mfu, num_gpus)
    return dict(model=model, params=m.params, tokens=m.tokens, num_gpus=num_gpus, mfu=mfu,
                flops=flops, days=seconds / SECONDS_PER_DAY)


def s04_accumulation(batch_tokens=4 * 2**20, seq_len=4096, num_gpus=64, micro_batch=2):
    """Gradient-accumulation steps for a global batch: sequences / (GPUs x micro-batch)."""
    sequences = batch_tokens // seq_len
    per_pass = num_gpus * micro_batch
    if sequences % per_pass:
        raise ValueError(f"{sequences} sequences do not split into passes of {per_pass}")
    return dict(batch_tokens=batch_tokens, seq_len=seq_len, num_gpus=num_gpus, micro_batch=micro_batch,
                sequences=sequences, steps=sequences // per_pass)


# --- Section 5: data parallelism -------------------------------------------------------------

def s05_ring_bytes(params=7e9, num_gpus=8, bytes_per_grad=2):
    """Bytes each GPU sends in a ring all-reduce of the bf16 gradients: 2(n-1)/n x buffer."""
    buffer = params * bytes_per_grad
    sent = communication.allreduce_bytes_per_rank(buffer, num_gpus)
    return dict(params=params, num_gpus=num_gpus, buffer_gb=buffer / GB, sent_gb=sent / GB)


def s05_ring_time(params=7e9, num_gpus=8, bytes_per_grad=2):
    """The same all-reduce's bandwidth time on NVLink and on a 400 Gb/s NIC."""
    sent = communication.allreduce_bytes_per_rank(params * bytes_per_grad, num_gpus)
    return dict(params=params, num_gpus=num_gpus, nvlink_gb_s=NVLINK.bytes_per_s / GB,
                nic_gb_s=NIC.bytes_per_s / GB, nvlink_s=sent / NVLINK.bytes_per_s, nic_s=sent / NIC.bytes_per_s)


def s05_ring_steps(small=8, large=1024):
    """Steps of a ring all-reduce, 2(n-1): the latency term grows with the ring."""
    return dict(small=small, large=large, steps_small=communication.ring_allreduce_steps(small),
                steps_large=communication.ring_allreduce_steps(large),
                factor_small=communication.ring_allreduce_factor(small),
                factor_large=communication.ring_allreduce_factor(large))


# --- Section 6: model parallelism ------------------------------------------------------------

def s06_bubble(stages=4, microbatches=8):
    """GPipe's bubble as a share of the step: (p-1) / (m+p-1)."""
    return dict(stages=stages, microbatches=microbatches,
                bubble=pipeline.bubble_fraction(stages, microbatches))


def s06_microbatches_for(stages=8, target=0.15):
    """Fewest micro-batches that bring the GPipe bubble down to ``target``."""
    m = 1
    while pipeline.bubble_fraction(stages, m) > target:
        m += 1
    return dict(stages=stages, target=target, microbatches=m, bubble=pipeline.bubble_fraction(stages, m))


def s06_tp_bytes(micro_batch=1, seq_len=4096, d_model=8192, tp=8, layers=80):
    """Bytes one GPU sends per layer and micro-batch under Megatron TP: 8bsh(t-1)/t elements
    of two bytes (four ring all-reduces), and over all layers."""
    per_layer = communication.tensor_parallel_bytes_per_layer(micro_batch, seq_len, d_model, tp)
    collectives = model_parallel.tensor_parallel_collectives_per_layer()
    return dict(micro_batch=micro_batch, seq_len=seq_len, d_model=d_model, tp=tp, layers=layers,
                allreduces=sum(p["all_reduce"] for p in collectives.values()),
                per_layer_gb=per_layer / GB, per_model_gb=per_layer * layers / GB)


# --- Section 7: FSDP --------------------------------------------------------------------------

def s07_zero3(params=70e9, num_gpus=64):
    """Model state per GPU under full sharding (ZeRO-3 / FSDP), 16 bytes per parameter."""
    return dict(params=params, num_gpus=num_gpus,
                state_gb=memory.zero_memory_per_gpu(params, 3, num_gpus) / GB)


def s07_zero1(params=70e9, num_gpus=64):
    """Model state per GPU when only the optimizer state is sharded (ZeRO-1): (2+2)P + 12P/n."""
    return dict(params=params, num_gpus=num_gpus,
                state_gb=memory.zero_memory_per_gpu(params, 1, num_gpus) / GB,
                zero3_gb=memory.zero_memory_per_gpu(params, 3, num_gpus) / GB)


def s07_traffic_ratio(params=7e9, num_gpus=8, bytes_per_value=2, microbatches=8):
    """FSDP's traffic per forward and backward pass (all-gather forward, all-gather backward,
    reduce-scatter of the gradients) against DDP's one all-reduce, bytes sent per GPU; and per
    optimizer step with ``microbatches`` micro-batches of gradient accumulation, where FSDP2's
    defaults repeat all three for every micro-batch while DDP (``no_sync``) all-reduces once
    (Rajbhandari et al. 2020, sec. 7; PyTorch's ``fully_shard``)."""
    size = params * bytes_per_value
    fsdp = (2 * communication.allgather_bytes_per_rank(size, num_gpus)
            + communication.reduce_scatter_bytes_per_rank(size, num_gpus))
    ddp = communication.allreduce_bytes_per_rank(size, num_gpus)
    return dict(params=params, num_gpus=num_gpus, fsdp_gb=fsdp / GB, ddp_gb=ddp / GB, ratio=fsdp / ddp,
                microbatches=microbatches, fsdp_step_gb=microbatches * fsdp / GB,
                ratio_step=microbatches * fsdp / ddp)


# --- Section 8: when to use what ---------------------------------------------------------------

def s08_layout(world=1024, tp=8, pp=8):
    """The data-parallel degree that a TP x PP layout leaves on a cluster: world / (tp pp)."""
    if world % (tp * pp):
        raise ValueError(f"world size {world} is not a multiple of tp x pp = {tp * pp}")
    return dict(world=world, tp=tp, pp=pp, dp=world // (tp * pp))


def s08_state_3d(params=405e9, world=1024, tp=8, pp=8, zero_stage=1):
    """Model state per GPU under TP x PP x DP with the optimizer sharded over DP (16 bytes/param)."""
    dp = s08_layout(world, tp, pp)["dp"]
    state = memory.memory_per_gpu_3d(params, tp, pp, dp, zero_stage)
    return dict(params=params, world=world, tp=tp, pp=pp, dp=dp, zero_stage=zero_stage,
                gpu_gb=H100.memory_gb, state_gb=state / GB)


def s08_tp_allreduces(layers=80, microbatches=8):
    """All-reduces one tensor-parallel GPU joins per step: 4 per layer per micro-batch."""
    collectives = model_parallel.tensor_parallel_collectives_per_layer()
    per_layer = sum(p["all_reduce"] for p in collectives.values())
    return dict(layers=layers, microbatches=microbatches, per_layer=per_layer,
                per_step=per_layer * layers * microbatches)
