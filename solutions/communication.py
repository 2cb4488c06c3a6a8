"""Communication volume and time: ring collectives, Exercise 4's two estimates
(part (a), the first estimate; part (b), per axis, as sections 5-7 teach),
and a per-axis breakdown for 3D (data x tensor x pipeline) parallelism.

Units: bytes, bytes/s and seconds, except Exercise 4's bandwidths: part (a)'s
``bandwidth_tb_s`` in TB/s and part (b)'s ``intra_node_gb_s`` and
``inter_node_gb_s`` in GB/s, as the exercise states.

Ring collectives on ``n`` ranks move, per rank, a multiple of the buffer size
(nccl-tests PERFORMANCE.md, "bus bandwidth"; Patarasuk & Yuan 2009):

* all-reduce: ``2 (n-1)/n``  (reduce-scatter then all-gather)
* all-gather, reduce-scatter: ``(n-1)/n``

References: nccltests, patarasuk2009bandwidth, shoeybi2019megatron,
narayanan2021megatron, korthikanti2022reducing, rajbhandari2020zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validate import divides, nonnegative_integer, one_of, positive, positive_integer

__all__ = [
    "ring_allreduce_factor",
    "allgather_factor",
    "reduce_scatter_factor",
    "ring_allreduce_steps",
    "allreduce_bytes_per_rank",
    "allgather_bytes_per_rank",
    "reduce_scatter_bytes_per_rank",
    "RingStep",
    "RingAllReduceResult",
    "simulate_ring_allreduce",
    "communication_time_per_step",
    "communication_time_per_step_by_axis",
    "pipeline_sends_per_microbatch",
    "DEFAULT_INTRA_NODE_BW",
    "DEFAULT_INTER_NODE_BW",
    "tensor_parallel_bytes_per_layer",
    "communication_breakdown",
]


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


# --------------------------------------------------------------------------
# Ring collectives
# --------------------------------------------------------------------------


def ring_allreduce_factor(n):
    """Bytes each rank sends in a ring all-reduce, per byte of buffer:
    ``2 (n-1) / n`` (nccl-tests PERFORMANCE.md). Tends to 2 as n grows: the
    bandwidth term is nearly constant in the number of ranks."""
    n = positive_integer("n", n)
    return _out(2.0 * (np.asarray(n) - 1) / n)


def allgather_factor(n):
    """Bytes each rank sends in a ring all-gather per byte of the *full*
    (gathered) buffer: ``(n-1)/n`` (nccl-tests PERFORMANCE.md)."""
    n = positive_integer("n", n)
    return _out((np.asarray(n) - 1.0) / n)


def reduce_scatter_factor(n):
    """Bytes each rank sends in a ring reduce-scatter per byte of the full
    (input) buffer: ``(n-1)/n`` (nccl-tests PERFORMANCE.md)."""
    return allgather_factor(n)


def ring_allreduce_steps(n):
    """Sequential steps of a ring all-reduce: ``n-1`` reduce-scatter steps plus
    ``n-1`` all-gather steps. The latency term grows with ``n``."""
    n = positive_integer("n", n)
    return 2 * (n - 1)


def allreduce_bytes_per_rank(size_bytes, n):
    """Bytes each rank sends to all-reduce a ``size_bytes`` buffer on ``n`` ranks."""
    size_bytes = positive("size_bytes", size_bytes)
    return _out(np.asarray(size_bytes) * ring_allreduce_factor(n))


def allgather_bytes_per_rank(size_bytes, n):
    """Bytes each rank sends to all-gather a buffer of ``size_bytes`` in total."""
    size_bytes = positive("size_bytes", size_bytes)
    return _out(np.asarray(size_bytes) * allgather_factor(n))


def reduce_scatter_bytes_per_rank(size_bytes, n):
    """Bytes each rank sends to reduce-scatter a ``size_bytes`` input buffer."""
    size_bytes = positive("size_bytes", size_bytes)
    return _out(np.asarray(size_bytes) * reduce_scatter_factor(n))


@dataclass(frozen=True)
class RingStep:
    """One step of the ring: in ``phase`` ('reduce-scatter' or 'all-gather'),
    rank ``r`` sends chunk ``sends[r]`` to rank ``(r+1) % n``; ``state`` is every
    rank's buffer after the step, shape ``(n_ranks, n_chunks, ...)``."""

    phase: str
    index: int
    sends: tuple
    state: np.ndarray = field(repr=False)


@dataclass(frozen=True)
class RingAllReduceResult:
    """Outcome of :func:`simulate_ring_allreduce`."""

    steps: list
    final: np.ndarray
    bytes_sent_per_rank: np.ndarray
    buffer_bytes: int


def simulate_ring_allreduce(chunks_per_rank):
    """Simulate a ring all-reduce with numpy (Patarasuk & Yuan 2009).

    ``chunks_per_rank[r, c]`` is chunk ``c`` of rank ``r``'s buffer; the array
    has shape ``(n, n)`` or ``(n, n, k)`` (each buffer split into ``n`` chunks of
    ``k`` elements). Ranks form a ring ``r -> r+1``.

    * reduce-scatter, step ``s = 0..n-2``: rank ``r`` sends chunk ``(r - s) % n``
      and its successor adds it to its own copy. Afterwards rank ``r`` holds the
      complete sum of chunk ``(r + 1) % n``.
    * all-gather, step ``s = 0..n-2``: rank ``r`` sends chunk ``(r + 1 - s) % n``
      (complete) and its successor overwrites its copy.

    Returns a :class:`RingAllReduceResult`: the per-step record, the final
    buffers (every rank holds the elementwise sum) and bytes sent per rank,
    which equal ``2 (n-1)/n`` times one rank's buffer.
    """
    data = np.array(chunks_per_rank)  # copy; we update it in place
    if data.dtype == bool or not (
        np.issubdtype(data.dtype, np.integer) or np.issubdtype(data.dtype, np.floating)
    ):
        raise ValueError(f"chunks_per_rank must be a numeric array, got dtype {data.dtype}")
    if data.ndim not in (2, 3) or data.shape[0] != data.shape[1] or data.shape[0] < 1:
        raise ValueError(
            "chunks_per_rank must have shape (n, n) or (n, n, k): n ranks, each "
            f"buffer split into n chunks; got shape {data.shape}"
        )
    if np.issubdtype(data.dtype, np.floating) and not np.all(np.isfinite(data)):
        raise ValueError("chunks_per_rank must be finite (no NaN or inf)")
    n = data.shape[0]
    chunk_bytes = data[0, 0].nbytes if data.ndim == 3 else data.itemsize
    sent = np.zeros(n, dtype=np.int64)
    steps = []
    for s in range(n - 1):  # reduce-scatter
        sends = tuple((r - s) % n for r in range(n))
        incoming = [data[r, sends[r]].copy() for r in range(n)]  # all send at once
        for r in range(n):
            data[(r + 1) % n, sends[r]] += incoming[r]
            sent[r] += chunk_bytes
        steps.append(RingStep("reduce-scatter", s, sends, data.copy()))
    for s in range(n - 1):  # all-gather
        sends = tuple((r + 1 - s) % n for r in range(n))
        incoming = [data[r, sends[r]].copy() for r in range(n)]
        for r in range(n):
            data[(r + 1) % n, sends[r]] = incoming[r]
            sent[r] += chunk_bytes
        steps.append(RingStep("all-gather", s, sends, data.copy()))
    return RingAllReduceResult(steps, data, sent, int(chunk_bytes * n))


# --------------------------------------------------------------------------
# Exercise 4
# --------------------------------------------------------------------------


def communication_time_per_step(
    model_params, dp_rank, tp_rank, num_layers, seq_len, batch_size, d_model, bandwidth_tb_s,
):
    """Exercise 4, part (a): the course's first estimate of communication seconds per step.

    Exactly the exercise's template::

        dp_volume = 2 * (2 * model_params)                  # fp16 grads, "all-reduce factor 2"
        tp_volume = num_layers * 2 * (2 * batch_size * seq_len * d_model)
        time = (dp_volume + tp_volume) / (bandwidth_tb_s * 1e12)

    ``dp_rank`` and ``tp_rank`` keep the exercise's names but mean the data- and
    tensor-parallel *degrees* (how many GPUs), not a process's rank. They are
    validated and, as the exercise states, unused. What the estimate leaves out
    (the ring factor 2(n-1)/n, sharding of the DP volume by TP x PP, backward
    TP all-reduces, pipeline sends) is part (b),
    :func:`communication_time_per_step_by_axis`, and :func:`communication_breakdown`.
    """
    P = positive("model_params", model_params)
    positive_integer("dp_rank (the data-parallel degree)", dp_rank)
    positive_integer("tp_rank (the tensor-parallel degree)", tp_rank)
    L = positive_integer("num_layers", num_layers)
    s = positive_integer("seq_len", seq_len)
    b = positive_integer("batch_size", batch_size)
    h = positive_integer("d_model", d_model)
    bw = positive("bandwidth_tb_s", bandwidth_tb_s)
    bandwidth_bytes_s = np.asarray(bw) * 1e12
    dp_volume = 2 * (2 * np.asarray(P))
    tp_per_layer = 2 * (2 * np.asarray(b, dtype=np.float64) * s * h)
    tp_volume = L * tp_per_layer
    return _out((dp_volume + tp_volume) / bandwidth_bytes_s)


def pipeline_sends_per_microbatch(pp):
    """Point-to-point sends of one micro-batch's boundary tensor (``b s h``
    elements) by the busiest pipeline stage: none without a pipeline; one with
    two stages (the first sends activations forward, the last sends gradients
    back); two from an interior stage (``pp >= 3``), which sends its output
    forward and the gradient of its input backward (Huang et al. 2019)."""
    pp = positive_integer("pp", pp)
    return 0 if pp == 1 else 1 if pp == 2 else 2


def communication_time_per_step_by_axis(
    model_params, dp_degree, tp_degree, pp_degree, num_layers, seq_len, micro_batch,
    num_microbatches, d_model, intra_node_gb_s, inter_node_gb_s,
):
    """Exercise 4, part (b): seconds of communication per optimizer step on each
    axis, ``(dp_seconds, tp_seconds, pp_seconds)``, for one GPU of a
    ``dp x tp x pp`` layout, as sections 5-7 of the course teach. Values are
    bf16, 2 bytes each; ``micro_batch`` is sequences per micro-batch and
    ``num_microbatches`` the micro-batches each replica runs per step.

    * DP: once per step, a ring all-reduce (``2 (d-1)/d`` of the buffer;
      nccl-tests, Patarasuk & Yuan 2009) of the gradients of this GPU's shard,
      ``P / (t p)`` parameters (ZeRO-1 and ZeRO-2 move the same bytes).
    * TP: per micro-batch, on each of the ``num_layers / p`` layers of this
      GPU's stage, four all-reduces (two forward, two backward: Megatron's g
      and f, Shoeybi et al. 2019) of ``b s h`` elements with ring factor
      ``2 (t-1)/t``: ``8 b s h (t-1)/t`` elements per layer (Narayanan et al.
      2021, sec. 3.2).
    * PP: per micro-batch, :func:`pipeline_sends_per_microbatch` sends of
      ``b s h`` elements.

    Tensor parallelism stays inside a server (``intra_node_gb_s``); data- and
    pipeline-parallel traffic crosses servers (``inter_node_gb_s``). Bandwidth
    only: no latency, no overlap. :func:`communication_breakdown` computes the
    same with the bandwidths in bytes/s (and ZeRO-3's extra gathers).
    """
    P = positive("model_params", model_params)
    dp, tp, pp = (positive_integer(name, value) for name, value in
                  (("dp_degree", dp_degree), ("tp_degree", tp_degree), ("pp_degree", pp_degree)))
    layers, seq, mb, microbatches, width = (
        positive_integer(name, value) for name, value in
        (("num_layers", num_layers), ("seq_len", seq_len), ("micro_batch", micro_batch),
         ("num_microbatches", num_microbatches), ("d_model", d_model)))
    intra_bytes_s = positive("intra_node_gb_s", intra_node_gb_s) * 1e9
    inter_bytes_s = positive("inter_node_gb_s", inter_node_gb_s) * 1e9
    divides("pp_degree", pp, "num_layers", layers)
    bf16 = 2  # bytes per value sent
    boundary_bytes = float(mb) * seq * width * bf16  # one micro-batch's activations
    dp_bytes = ring_allreduce_factor(dp) * bf16 * P / (tp * pp)  # this GPU's shard, once
    tp_bytes = (layers // pp) * microbatches * 4 * ring_allreduce_factor(tp) * boundary_bytes
    pp_bytes = pipeline_sends_per_microbatch(pp) * microbatches * boundary_bytes
    return (float(dp_bytes / inter_bytes_s), float(tp_bytes / intra_bytes_s),
            float(pp_bytes / inter_bytes_s))


# --------------------------------------------------------------------------
# Richer model: per-axis breakdown
# --------------------------------------------------------------------------

#: Default intra-node bandwidth per GPU per direction: NVLink 4 on H100 SXM,
#: 900 GB/s total bidirectional (nvidia2022h100), i.e. 450 GB/s each way.
DEFAULT_INTRA_NODE_BW = 450e9
#: Default inter-node bandwidth per GPU: one 400 Gb/s NIC per GPU = 50 GB/s
#: (as in Llama 3's clusters, dubey2024llama3).
DEFAULT_INTER_NODE_BW = 50e9


def tensor_parallel_bytes_per_layer(micro_batch, seq_len, d_model, tp, bytes_per_element=2):
    """Bytes one GPU sends per transformer layer per micro-batch for Megatron
    tensor parallelism: 4 ring all-reduces (2 forward, 2 backward) of
    ``b s h`` elements, i.e. ``8 b s h (t-1)/t`` elements (Narayanan et al.
    2021, sec. 3.2). Zero when ``tp == 1``."""
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("d_model", d_model)
    nbytes = positive("bytes_per_element", bytes_per_element)
    elems = 4 * np.asarray(b, dtype=np.float64) * s * h * ring_allreduce_factor(tp)
    return _out(elems * nbytes)


def communication_breakdown(
    model_params,
    dp,
    tp,
    pp,
    num_layers,
    seq_len,
    micro_batch,
    num_microbatches,
    d_model,
    bytes_per_element=2,
    intra_node_bw=DEFAULT_INTRA_NODE_BW,
    inter_node_bw=DEFAULT_INTER_NODE_BW,
    gpus_per_node=8,
    zero_stage=0,
):
    """Bytes sent per GPU per optimizer step, and the time they take, for each
    parallelism axis of a ``dp x tp x pp`` layout.

    * ``'dp'``: all-reduce of the gradients of this GPU's model shard,
      ``P / (tp pp)`` elements, ring factor ``2 (d-1)/d``. ZeRO stages 1 and 2
      replace it with reduce-scatter + all-gather of the same volume; ZeRO-3
      adds an all-gather of the weights in the backward pass, ``3 (d-1)/d``,
      1.5x plain DP per forward/backward pass (Rajbhandari et al. 2020, sec. 7).
      This figure is for one pass: with gradient accumulation FSDP repeats it
      for every micro-batch, which :func:`solutions.steptime.step_time` counts.
    * ``'tp'``: Megatron's f and g operators: 2 all-reduces in the forward and
      2 in the backward pass per layer and micro-batch, each of ``b s h``
      elements with ring factor ``2 (t-1)/t``, i.e. ``8 b s h (t-1)/t`` per layer
      (Shoeybi et al. 2019; Narayanan et al. 2021, sec. 3.2), over the
      ``num_layers / pp`` layers this GPU holds. Sequence parallelism replaces
      each all-reduce with all-gather + reduce-scatter of the same volume.
    * ``'pp'``: point-to-point sends of ``b s h`` activations forward and
      ``b s h`` gradients backward per micro-batch per stage boundary. Reported
      for the busiest stage: an interior stage sends both (``pp >= 3``); with
      ``pp == 2`` each stage sends one of them.

    Bandwidth assumptions (bytes/s): TP runs on ``intra_node_bw`` when it fits
    in a node (``tp <= gpus_per_node``), otherwise on ``inter_node_bw``; DP and
    PP cross nodes, so they use ``inter_node_bw``. Only bandwidth is modelled
    (no latency term, no overlap with compute); ``total`` seconds assume the
    three run one after another.

    Returns ``{'dp': {'bytes', 'seconds'}, 'tp': {...}, 'pp': {...},
    'total': {...}}``.
    """
    P = positive("model_params", model_params)
    dp = positive_integer("dp", dp)
    tp = positive_integer("tp", tp)
    pp = positive_integer("pp", pp)
    L = positive_integer("num_layers", num_layers)
    s = positive_integer("seq_len", seq_len)
    b = positive_integer("micro_batch", micro_batch)
    m = positive_integer("num_microbatches", num_microbatches)
    h = positive_integer("d_model", d_model)
    nbytes = positive("bytes_per_element", bytes_per_element)
    bw_intra = positive("intra_node_bw", intra_node_bw)
    bw_inter = positive("inter_node_bw", inter_node_bw)
    gpn = positive_integer("gpus_per_node", gpus_per_node)
    stage = nonnegative_integer("zero_stage", zero_stage)
    one_of("zero_stage", stage, (0, 1, 2, 3))
    divides("pp", pp, "num_layers", L)

    P = np.asarray(P, dtype=np.float64)
    shard_elems = P / (tp * pp)
    dp_factor = (3.0 if stage == 3 else 2.0) * (dp - 1) / dp
    dp_bytes = shard_elems * nbytes * dp_factor

    act_elems = float(b) * s * h
    layers_here = L // pp
    tp_bytes = layers_here * m * tensor_parallel_bytes_per_layer(b, s, h, tp, nbytes)

    pp_bytes = pipeline_sends_per_microbatch(pp) * m * act_elems * nbytes

    tp_bw = bw_intra if tp <= gpn else bw_inter
    out = {
        "dp": {"bytes": dp_bytes, "seconds": dp_bytes / bw_inter},
        "tp": {"bytes": tp_bytes, "seconds": tp_bytes / tp_bw},
        "pp": {"bytes": pp_bytes, "seconds": pp_bytes / bw_inter},
    }
    out["total"] = {
        "bytes": sum(v["bytes"] for v in out.values()),
        "seconds": sum(v["seconds"] for v in out.values()),
    }
    return {k: {kk: _out(np.asarray(vv, dtype=np.float64)) for kk, vv in v.items()} for k, v in out.items()}
