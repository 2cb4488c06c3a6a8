"""Design problems: multi-step questions at the end of the sections, worked out step by step.

Each function is one problem. It fixes the problem's inputs as keyword defaults (a model, a
cluster, a budget; published figures come from :mod:`solutions.facts`) and returns a dict of
the inputs and of every intermediate value the worked answer shows, computed with the
course's own formulas and rules of thumb (:mod:`solutions.rules`, :mod:`solutions.roofline`)
and, where the problem ends by asking the planner, with :func:`solutions.plan.make_plan`.
The section notebooks glue these values into the question and its hidden answer;
``tests/solutions/test_design.py`` checks each against a calculation by hand.

Units: model-state memory in GB = 1e9 bytes, bandwidth in bytes/s, time in seconds.
"""
from __future__ import annotations

import math

from solutions import (after_chinchilla, communication, compute, context, efficiency, facts, memory, pipeline,
                       roofline, rules, scaling, steptime)

GB = 1e9
SECONDS_PER_DAY = 86_400
H100 = facts.GPUS["H100 SXM"]
NVLINK = facts.INTERCONNECTS["NVLink (H100 SXM)"].bytes_per_s
NIC = facts.INTERCONNECTS["400 Gb/s NIC"].bytes_per_s
GPUS_PER_SERVER = steptime.GPUS_PER_SERVER
#: The utilisation the problems assume: Llama 3 405B's on 16,384 H100s (Dubey et al. 2024, Table 4).
LLAMA_MFU = next(l for l in facts.LAYOUTS if l.model == "Llama 3 405B" and l.num_gpus == 16384 and l.cp == 1).mfu
#: Llama 3's batch early in training (4M tokens) and late (16M tokens), with their sequence lengths.
BATCH_4M, SEQ_4M = facts.LLAMA3_405B_BATCH_SCHEDULE.stages[0][:2]
BATCH_16M, SEQ_8K = facts.LLAMA3_405B_BATCH_SCHEDULE.stages[-1][:2]


def _days(flops, gpus, mfu=LLAMA_MFU):
    return compute.training_time_seconds(flops, H100.peak_flops_per_s, mfu, gpus) / SECONDS_PER_DAY


# --- Section 1: can one server train a 7B model in a month? -----------------------------------

def d01_one_server(arch="Llama 3 8B", params=7e9, tokens=1e12, gpus=8, deadline_days=30, mfu=0.4):
    """A 7B model (Llama 3 8B's layer shape) on 1T tokens, on one server of eight H100s.

    1. model state at ZeRO's 16 bytes/param, on one GPU and sharded over the server (ZeRO-3);
    2. the largest matrix product of a layer for one 4,096-token sequence against the H100's
       ridge point (R1, R2): compute-bound or memory-bound?;
    3. days at ``mfu``: ``6 N D / (gpus x peak x MFU)``;
    4. the GPUs that would meet the deadline."""
    a = facts.ARCHITECTURES[arch]
    state = memory.zero_memory_per_gpu(params, 0, 1, "zero_16")
    sharded = memory.zero_memory_per_gpu(params, 3, gpus, "zero_16")
    ridge = roofline.ridge_point(H100.peak_flops_per_s, roofline.HBM_BYTES_PER_S[H100.name])
    seq = SEQ_4M
    intensity = roofline.matmul_intensity(seq, a.d_model, a.ffn_hidden)
    flops = scaling.training_flops(params, tokens)
    days = _days(flops, gpus, mfu)
    needed = math.ceil(gpus * days / deadline_days)
    return dict(params=params, tokens=tokens, gpus=gpus, deadline_days=deadline_days, mfu=mfu, arch=arch,
                gpu_gb=H100.memory_gb, state_gb=state / GB, sharded_gb=sharded / GB,
                seq=seq, d_model=a.d_model, ffn=a.ffn_hidden, intensity=intensity, ridge=ridge,
                flops=flops, days=days, gpus_needed=needed,
                servers_needed=math.ceil(needed / GPUS_PER_SERVER))


# --- Section 2: ten times GPT-3's budget, Kaplan's way and Chinchilla's ----------------------------

def d02_kaplan_or_chinchilla(model="GPT-3", budget_factor=10):
    """Ten times GPT-3's compute. Kaplan's allocation grows N as C^0.73 and D as C^0.27 from
    GPT-3's point (Kaplan et al. 2020, eq. 6.1); the Chinchilla rule takes D = 20 N at the same
    C = 6ND. Both are scored with Hoffmann et al.'s fitted loss (eq. 10, printed constants),
    and their model state is counted at 16 bytes per parameter."""
    m = facts.MODELS[model]
    C0 = scaling.training_flops(m.params, m.tokens)
    C = budget_factor * C0
    n_growth = budget_factor ** scaling.KAPLAN_N_EXPONENT
    N_k = m.params * n_growth
    D_k = C / (6 * N_k)
    N_c, D_c = scaling.twenty_tokens_allocation(C)
    loss_k = scaling.parametric_loss(N_k, D_k)
    loss_c = scaling.parametric_loss(N_c, D_c)
    state = {k: memory.zero_memory_per_gpu(n, 0, 1, "zero_16") / GB for k, n in (("kaplan", N_k), ("chinchilla", N_c))}
    return dict(model=model, params0=m.params, tokens0=m.tokens, flops0=C0, budget_factor=budget_factor, flops=C,
                n_exponent=scaling.KAPLAN_N_EXPONENT, n_growth=n_growth, d_growth=budget_factor / n_growth,
                kaplan_params=N_k, kaplan_tokens=D_k, kaplan_ratio=D_k / N_k,
                chin_params=N_c, chin_tokens=D_c, chin_ratio=D_c / N_c,
                kaplan_loss=loss_k, chin_loss=loss_c,
                kaplan_state_gb=state["kaplan"], chin_state_gb=state["chinchilla"],
                kaplan_gpus=math.ceil(state["kaplan"] / H100.memory_gb),
                chin_gpus=math.ceil(state["chinchilla"] / H100.memory_gb))


# --- Section 3: plan a 10^24 FLOP run -----------------------------------------------------------

def d03_budget(budget=1e24, shrink=4, gpus=1024, mfu=LLAMA_MFU):
    """A budget of 10^24 FLOPs: the compute-optimal N and D (closed form, Hoffmann et al.'s
    printed constants), the 20-tokens rule, the loss a model ``shrink`` times smaller pays on
    the same budget, and the days on ``gpus`` H100s."""
    c = scaling.HOFFMANN_ROUNDED
    N, D, ratio, loss = scaling.compute_optimal_closed_form(budget, c)
    N20, D20 = scaling.twenty_tokens_allocation(budget)
    loss20 = scaling.parametric_loss(N20, D20, c)
    N_small = N / shrink
    D_small = scaling.iso_flop_tokens(budget, N_small)
    loss_small = scaling.parametric_loss(N_small, D_small, c)
    a = scaling.allocation_exponent(c)
    return dict(budget=budget, shrink=shrink, gpus=gpus, mfu=mfu, a=a,
                params=N, tokens=D, ratio=ratio, loss=loss, params20=N20, tokens20=D20, loss20=loss20,
                small_params=N_small, small_tokens=D_small, small_loss=loss_small,
                penalty=loss_small / loss - 1, gpu_days=_days(budget, 1, mfu), days=_days(budget, gpus, mfu))


# --- Section 4: what forces distribution for a 70B model on 15T tokens ---------------------------

def d04_three_reasons(params=70e9, tokens=15e12, deadline_days=60, mfu=LLAMA_MFU,
                      batch_tokens=BATCH_4M, seq=SEQ_8K, micro_batch=1):
    """A 70B model on 15T tokens in 60 days (the token count of the Llama 3 models): which of
    memory, speed and batch size forces which kind of parallelism?

    1. memory: fewest H100s whose memory holds the state (16 bytes/param);
    2. speed: GPUs for the deadline at ``mfu``;
    3. batch: sequences per step, and sequences per GPU on that many GPUs."""
    state = memory.zero_memory_per_gpu(params, 0, 1, "zero_16")
    fewest = math.ceil(state / (H100.memory_gb * GB))
    flops = scaling.training_flops(params, tokens)
    gpu_days = _days(flops, 1, mfu)
    gpus = math.ceil(gpu_days / deadline_days)
    gpus_servers = GPUS_PER_SERVER * math.ceil(gpus / GPUS_PER_SERVER)
    sequences = batch_tokens // seq
    return dict(params=params, tokens=tokens, deadline_days=deadline_days, mfu=mfu, batch_tokens=batch_tokens,
                seq=seq, state_gb=state / GB, gpu_gb=H100.memory_gb, fewest_gpus=fewest, flops=flops,
                gpu_days=gpu_days, gpus=gpus, gpus_servers=gpus_servers, sequences=sequences,
                seqs_per_gpu=sequences / gpus_servers, tokens_per_gpu=batch_tokens / gpus_servers,
                dp_max=sequences // micro_batch, model_parallel=math.ceil(gpus_servers / (sequences // micro_batch)))


# --- Section 5: data parallelism for a 7B model over the network --------------------------------

def d05_data_parallel(params=7e9, gpus=256, batch_tokens=BATCH_4M, mfu=LLAMA_MFU, link=NIC):
    """Data parallelism of a 7B model on ``gpus`` H100s across servers (one 400 Gb/s port per
    GPU), batch of 4M tokens, bf16 gradients:

    1. tokens per GPU per step and the rule (D1): compute-bound?;
    2. the step's compute and all-reduce times;
    3. the largest data-parallel degree that stays compute-bound at this batch;
    4. memory: plain DDP against ZeRO-1, which sends the same bytes."""
    tokens = batch_tokens / gpus
    threshold = rules.dp_min_tokens_per_gpu(H100.peak_flops_per_s, mfu, link, gpus)
    F = rules.sustained_flops(H100.peak_flops_per_s, mfu)
    compute_s = 6 * params * tokens / F
    comm_s = communication.allreduce_bytes_per_rank(2 * params, gpus) / link
    dp_max = int(batch_tokens // rules.dp_min_tokens_per_gpu(H100.peak_flops_per_s, mfu, link))
    ddp = memory.zero_memory_per_gpu(params, 0, gpus, "zero_16")
    zero1 = memory.zero_memory_per_gpu(params, 1, gpus, "zero_16")
    return dict(params=params, gpus=gpus, batch_tokens=batch_tokens, mfu=mfu, link_gb_s=link / GB,
                tokens_per_gpu=tokens, threshold=threshold, ratio=threshold / tokens,
                sustained_tflops=F / 1e12, compute_s=compute_s, comm_s=comm_s, dp_max=dp_max,
                ddp_gb=ddp / GB, zero1_gb=zero1 / GB, gpu_gb=H100.memory_gb)


# --- Section 6: tensor and pipeline degrees for a 70B model on eight servers ----------------------

def d06_tp_pp(arch="Llama 3 70B", gpus=64, batch_tokens=BATCH_4M, tokens=15e12, mfu=LLAMA_MFU):
    """Llama 3 70B on 64 H100s (eight servers), 4M tokens per step in sequences of its
    training length:

    1. tensor parallelism: the largest degree the rule (T1) allows over NVLink and over the
       network, and the share of the compute its all-reduces take at TP8 and TP4 when nothing
       overlaps them;
    2. layout A, TP8 x DP8 with ZeRO-1: state and activations per GPU (one sequence per
       micro-batch, no recomputation; :func:`solutions.steptime.step_time`'s memory model);
    3. layout B, TP4 x PP2 x DP8: the same check with ZeRO-1 and with ZeRO-2, and the 1F1B
       bubble with one sequence per micro-batch;
    4. both steps as the step-time model predicts them, and the planner's choice."""
    from solutions import plan

    a = facts.ARCHITECTURES[arch]
    peak = H100.peak_flops_per_s
    shape = steptime.shape_of(a)
    cluster = plan.cluster_for(H100.name)
    sequences = batch_tokens // a.seq_len
    layouts = {"A": steptime.Layout(8, 1, 1, gpus // 8, 1, 1, "none"),
               "B1": steptime.Layout(4, 1, 2, gpus // 8, 1, 1, "none"),
               "B": steptime.Layout(4, 1, 2, gpus // 8, 2, 1, "none")}
    # Tensor parallelism's all-reduces exposed, as without Megatron-Core's --tp-comm-overlap:
    # the traffic that the degree decides, which the overlap then hides for the most part.
    no_tp_overlap = steptime.DEFAULT_OVERLAP - {"tp"}
    st = {k: steptime.step_time(shape, lay, cluster, sequences, overlap=no_tp_overlap) for k, lay in layouts.items()}
    m = st["B"].microbatches
    p = plan.make_plan(model=a.params, tokens=tokens, gpu="H100", count=gpus, arch=arch, batch_tokens=batch_tokens)
    out = dict(arch=arch, params=a.params, d_model=a.d_model, layers=a.layers, gpus=gpus, batch_tokens=batch_tokens,
               seq=a.seq_len, mfu=mfu, sequences=sequences, gpu_gb=H100.memory_gb,
               tp_nvlink=rules.tp_max_degree(a.d_model, peak, mfu, NVLINK),
               tp_net=rules.tp_max_degree(a.d_model, peak, mfu, NIC),
               tp8_share=rules.tp_comm_ratio(8, a.d_model, peak, mfu, NVLINK),
               tp4_share=rules.tp_comm_ratio(4, a.d_model, peak, mfu, NVLINK),
               microbatches=m, bubble=pipeline.bubble_fraction(2, m, "relative_to_ideal"),
               plan_layout=f"TP{p.tp} × PP{p.pp} × DP{p.dp}", plan_zero=p.zero, plan_step_s=p.step.step_s,
               plan_mfu=p.step.mfu, plan_recompute=p.recompute, plan_mb=p.micro_batch)
    for k, x in st.items():
        out.update({f"{k}_state_gb": x.state_bytes / GB, f"{k}_act_gb": x.activation_bytes / GB,
                    f"{k}_total_gb": x.memory_bytes / GB, f"{k}_fits": x.fits, f"{k}_step_s": x.step_s,
                    f"{k}_tp_s": x.breakdown_s["tp"], f"{k}_compute_s": x.breakdown_s["compute"]})
    return out


# --- Section 7: FSDP across servers, and hybrid sharding --------------------------------------------

def d07_fsdp(params=13e9, gpus=128, batch_tokens=2 * 2**20, seq=SEQ_4M, mfu=LLAMA_MFU):
    """FSDP of a 13B model on 128 H100s (16 servers), 2M tokens per step in sequences of 4,096:

    1. state per GPU under full sharding;
    2. the rule (D2) for micro-batches: tokens per GPU per micro-batch above which the
       per-micro-batch gathers and reduce-scatter can hide, over the network;
    3. the micro-batch (in sequences) that gets there, and the accumulation steps left;
    4. hybrid sharding: shard inside each server (NVLink), replicate across servers: state per
       GPU, and the ratio of the cross-server gradient all-reduce (of each GPU's 1/8 shard)
       to the step's compute."""
    peak = H100.peak_flops_per_s
    state = memory.zero_memory_per_gpu(params, 3, gpus, "zero_16")
    threshold = rules.dp_min_tokens_per_gpu(peak, mfu, NIC, gpus, zero_stage=3)
    sequences = batch_tokens // seq
    per_gpu = sequences // gpus
    mb = next(b for b in range(1, per_gpu + 1) if per_gpu % b == 0 and b * seq >= threshold)
    ratio_1 = threshold / seq
    ratio_mb = threshold / (mb * seq)
    # hybrid: shard over the 8 GPUs of a server, all-reduce each shard across the servers once a step
    servers = gpus // GPUS_PER_SERVER
    hybrid_state = memory.zero_memory_per_gpu(params, 3, GPUS_PER_SERVER, "zero_16")
    F = rules.sustained_flops(peak, mfu)
    step_compute = 6 * params * per_gpu * seq / F
    cross = communication.allreduce_bytes_per_rank(2 * params / GPUS_PER_SERVER, servers) / NIC
    inside_threshold = rules.dp_min_tokens_per_gpu(peak, mfu, NVLINK, GPUS_PER_SERVER, zero_stage=3)
    return dict(params=params, gpus=gpus, batch_tokens=batch_tokens, seq=seq, mfu=mfu, state_gb=state / GB,
                threshold=threshold, sequences=sequences, per_gpu=per_gpu, ratio_1=ratio_1, mb=mb,
                ratio_mb=ratio_mb, accumulation=per_gpu // mb, servers=servers, hybrid_gb=hybrid_state / GB,
                step_compute_s=step_compute, cross_s=cross, cross_ratio=cross / step_compute,
                inside_threshold=inside_threshold)


# --- Section 8: 405B on 2,048 H100s with a 4M-token batch ------------------------------------------

def d08_405b(arch="Llama 3 405B", gpus=2048, batch_tokens=BATCH_4M, seq=SEQ_8K, mfu=LLAMA_MFU, tokens=15.6e12):
    """Llama 3 405B on 2,048 H100s with a batch of 4M tokens of 8,192-token sequences:

    1. tokens per GPU against one sequence: why data parallelism alone cannot spread it;
    2. tensor parallelism inside the server (rule T1) and what is left: replicas, sequences each;
    3. option A, pipeline stages with ZeRO-1 (the fewest that put the state under a quarter of
       the GPU): micro-batches per replica and the 1F1B bubble;
    4. option B, ZeRO-3 across servers with one micro-batch per step: the rule (D2) for the
       replica's tokens, and the state per GPU;
    5. the step at ``mfu`` with no bubble, and the planner's answer."""
    from solutions import plan

    a = facts.ARCHITECTURES[arch]
    peak = H100.peak_flops_per_s
    sequences = batch_tokens // seq
    tokens_per_gpu = batch_tokens / gpus
    tp = GPUS_PER_SERVER
    tp_nvlink = rules.tp_max_degree(a.d_model, peak, mfu, NVLINK)
    replicas = gpus // tp
    seqs_per_replica = sequences / replicas
    # option A: PP with ZeRO-1
    limit = 0.25 * H100.memory_gb * GB
    pp = 1
    while memory.memory_per_gpu_3d(a.params, tp, pp, gpus // (tp * pp), 1) > limit:
        pp *= 2
    dp_a = gpus // (tp * pp)
    m_a = sequences // dp_a
    bubble_a = pipeline.bubble_fraction(pp, m_a, "relative_to_ideal")
    state_a = memory.memory_per_gpu_3d(a.params, tp, pp, dp_a, 1)
    # option B: TP8 x ZeRO-3 over the replicas, one micro-batch of all the replica's sequences
    dp_b = replicas
    tokens_mb = seqs_per_replica * seq  # a replica's tokens in its one micro-batch
    threshold_b = rules.dp_min_tokens_per_gpu(peak, mfu, NIC, dp_b, zero_stage=3)
    state_b = memory.memory_per_gpu_3d(a.params, tp, 1, dp_b, 3)
    step_s = compute.training_time_seconds(6 * a.params * batch_tokens, peak, mfu, gpus)
    p = plan.make_plan(model=a.params, tokens=tokens, gpu="H100", count=gpus, arch=arch, batch_tokens=batch_tokens)
    return dict(arch=arch, params=a.params, gpus=gpus, batch_tokens=batch_tokens, seq=seq, mfu=mfu,
                sequences=sequences, tokens_per_gpu=tokens_per_gpu, tp=tp, tp_nvlink=tp_nvlink,
                replicas=replicas, seqs_per_replica=seqs_per_replica,
                pp_a=pp, dp_a=dp_a, m_a=m_a, bubble_a=bubble_a, state_a_gb=state_a / GB,
                dp_b=dp_b, tokens_mb=tokens_mb, threshold_b=threshold_b, ratio_b=threshold_b / tokens_mb,
                state_b_gb=state_b / GB, step_s=step_s, step_a_s=step_s * (1 + bubble_a),
                plan_layout=f"TP{p.tp} × PP{p.pp} × DP{p.dp}", plan_zero=p.zero, plan_mb=p.micro_batch,
                plan_recompute=p.recompute, plan_step_s=p.step.step_s, plan_mfu=p.step.mfu,
                plan_memory_gb=p.memory_total / GB, plan_days=p.days)


# --- Section 10: 128K-token context for Llama 3 405B -------------------------------------------------

def d10_long_context(arch="Llama 3 405B", seq=131_072, tp=8, cp=16, mfu=LLAMA_MFU):
    """Llama 3 405B's long-context stage (128K-token sequences, TP8 x CP16 across servers):

    1. attention against the MLP (rule A1): the crossover length and the ratio at 128K;
    2. the CP rule (C1): each GPU's share of the sequence against the threshold, over the network;
    3. the K/V traffic per GPU per layer and its ratio to the attention compute;
    4. why CP and not more TP: the TP rule across servers (T1)."""
    a = facts.ARCHITECTURES[arch]
    peak = H100.peak_flops_per_s
    cross = rules.attention_mlp_crossover(a.d_model, a.ffn_hidden, a.mlp)
    attn = 6 * seq * a.d_model  # causal, per token and layer, training
    mlp = 18 * a.d_model * a.ffn_hidden
    kv = context.kv_width(a.d_model, a.heads, a.kv_heads)
    share = seq / cp
    threshold = rules.cp_min_tokens_per_gpu(a.d_model, kv, cp, peak, mfu, NIC)
    cp_bytes = context.context_parallel_bytes_per_layer(1, seq, kv, cp, tp=tp)
    ratio = context.context_parallel_overlap_ratio(seq, a.d_model, kv, cp, peak, NIC, mfu, tp=tp)
    tp_net = rules.tp_max_degree(a.d_model, peak, mfu, NIC)
    return dict(arch=arch, d_model=a.d_model, ffn=a.ffn_hidden, heads=a.heads, kv_heads=a.kv_heads, seq=seq,
                tp=tp, cp=cp, mfu=mfu, crossover=cross, crossover_h=cross / a.d_model, attn_over_mlp=attn / mlp,
                kv=kv, share=share, threshold=threshold, cp_mb=cp_bytes / 1e6, cp_ratio=ratio, tp_net=tp_net)


# --- Section 11: training for a model that will be served ----------------------------------------

def d11_serve(model="Chinchilla", inference_tokens=2e13, unique_tokens=4e12):
    """A model with Chinchilla's budget, to serve 2 x 10^13 tokens:

    1. the compute-optimal model and its loss (closed form, rounded constants);
    2. the model that reaches that loss with the fewest lifetime FLOPs (Sardana et al. 2024),
       its tokens and the lifetime FLOPs saved;
    3. the data: with ``unique_tokens`` of text, the epochs it needs and the effective tokens
       (Muennighoff et al. 2023)."""
    m = facts.MODELS[model]
    C = scaling.training_flops(m.params, m.tokens)
    c = scaling.HOFFMANN_ROUNDED
    N, D, ratio, loss = scaling.compute_optimal_closed_form(C, c)
    base = after_chinchilla.lifetime_flops(N, D, inference_tokens)
    n2, d2, f2 = after_chinchilla.inference_aware_optimal(loss, inference_tokens, c)
    epochs = d2 / unique_tokens
    effective = after_chinchilla.effective_data(unique_tokens, d2)
    base = float(base)
    return dict(model=model, budget=C, inference_tokens=inference_tokens, unique_tokens=unique_tokens,
                params=N, tokens=D, ratio=ratio, loss=loss, base_flops=base, train_flops=6 * N * D,
                serve_flops=2 * N * inference_tokens, new_params=n2, new_tokens=d2, new_ratio=d2 / n2,
                new_flops=f2, new_train_flops=6 * n2 * d2, saving=1 - f2 / base,
                epochs=epochs, effective=float(effective), effective_share=float(effective / d2))


# --- Section 12: FP8, FlashAttention and a zero-bubble pipeline -------------------------------------

def d12_faster(arch="Llama 3 70B", matmul_share=0.8, seq=SEQ_8K, p=8, m=16):
    """Three ways to speed up a 70B run on H100s, and what each buys:

    1. FP8 matrix products: twice the peak for a ``matmul_share`` of the step (Amdahl);
    2. FlashAttention: activation memory of one 8,192-token sequence, all layers, standard
       attention against FlashAttention;
    3. ZB-H1 instead of 1F1B: the bubble at ``p`` stages and ``m`` micro-batches, both relative
       to the ideal step, and the simulated makespans."""
    a = facts.ARCHITECTURES[arch]
    speedup = H100.fp8_flops_per_s / H100.peak_flops_per_s
    ratio = efficiency.amdahl_time_ratio(matmul_share, speedup)
    kw = dict(ffn_hidden=a.ffn_hidden, mlp=a.mlp, heads=a.heads, kv_heads=a.kv_heads, dropout=a.dropout)
    std = efficiency.activation_bytes_per_layer(seq, 1, a.d_model, attention="standard", **kw) * a.layers
    flash = efficiency.activation_bytes_per_layer(seq, 1, a.d_model, attention="flash", **kw) * a.layers
    b1 = efficiency.pipeline_bubble(p, m, "1f1b")
    bz = efficiency.pipeline_bubble(p, m, "zb-h1")
    span_1 = pipeline.makespan(pipeline.pipeline_schedule(p, m, "1f1b", 1.0, 2.0))
    span_z = pipeline.makespan(pipeline.pipeline_schedule(p, m, "zb-h1", 1.0, 2.0))
    return dict(arch=arch, matmul_share=matmul_share, fp8_speedup=speedup, time_ratio=ratio, speed=1 / ratio,
                seq=seq, layers=a.layers, std_gb=std / GB, flash_gb=flash / GB, gpu_gb=H100.memory_gb,
                p=p, m=m, bubble_1f1b=b1, bubble_zb=bz, span_1f1b=span_1, span_zb=span_z,
                ideal=3.0 * m)
