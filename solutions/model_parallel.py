"""Counts for the tensor- and pipeline-parallel labs: which collectives a
Megatron layer issues, what sequence parallelism moves and saves, and what each
pipeline stage sends.

The volumes build on :mod:`solutions.communication` (ring factors, and
``tensor_parallel_bytes_per_layer``); nothing here repeats a formula from there.

References: shoeybi2019megatron, korthikanti2022reducing, narayanan2021megatron,
huang2019gpipe.
"""

from __future__ import annotations

import numpy as np

from ._validate import nonnegative_integer, positive, positive_integer
from .communication import allgather_bytes_per_rank, reduce_scatter_bytes_per_rank

__all__ = [
    "tensor_parallel_collectives_per_layer",
    "sequence_parallel_bytes_per_layer",
    "norm_activation_elements_per_layer",
    "pipeline_bytes_sent_per_stage",
]


def _out(x):
    return float(x) if np.ndim(x) == 0 else x


def tensor_parallel_collectives_per_layer(sequence_parallel=False):
    """Collectives one transformer layer issues per micro-batch under tensor
    parallelism, by pass: ``{'forward': {kind: count}, 'backward': {...}}``.

    Megatron (Shoeybi et al. 2019, sec. 3): an operator ``g`` after attention
    and after the MLP all-reduces in the forward pass; an operator ``f`` before
    each of them all-reduces the input gradient in the backward pass. Two
    all-reduces each way.

    With sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) each ``f``
    becomes an all-gather (forward) whose backward is a reduce-scatter, and
    each ``g`` a reduce-scatter (forward) whose backward is an all-gather.
    """
    if not isinstance(sequence_parallel, (bool, np.bool_)):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    if sequence_parallel:
        both = {"all_gather": 2, "reduce_scatter": 2}
        return {"forward": dict(both), "backward": dict(both)}
    return {"forward": {"all_reduce": 2}, "backward": {"all_reduce": 2}}


def sequence_parallel_bytes_per_layer(micro_batch, seq_len, d_model, tp, bytes_per_element=2):
    """Bytes one GPU sends per layer per micro-batch with tensor + sequence
    parallelism: four ring all-gathers and four ring reduce-scatters of
    ``b s h`` elements, each ``(t-1)/t`` of the buffer (nccl-tests).

    An all-reduce is a reduce-scatter followed by an all-gather, so this equals
    :func:`solutions.communication.tensor_parallel_bytes_per_layer`
    (Korthikanti et al. 2022, sec. 4.2.2): sequence parallelism saves memory,
    not bandwidth.
    """
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("d_model", d_model)
    t = positive_integer("tp", tp)
    nbytes = positive("bytes_per_element", bytes_per_element)
    buffer = np.asarray(b, dtype=np.float64) * s * h * nbytes
    return _out(4 * allgather_bytes_per_rank(buffer, t) + 4 * reduce_scatter_bytes_per_rank(buffer, t))


def norm_activation_elements_per_layer(micro_batch, seq_len, d_model, tp=1, sequence_parallel=False, norms=2):
    """Elements the layer norms of one transformer layer keep for the backward
    pass on one GPU: per norm, its input (``b s h``) and the mean and inverse
    standard deviation of every token (``2 b s``).

    Tensor parallelism replicates them on every GPU of the group; sequence
    parallelism splits them along the sequence, ``1/t`` each (Korthikanti et al.
    2022, sec. 4.2.2: the norms' inputs are the activations tensor parallelism
    leaves unsplit).
    """
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("d_model", d_model)
    t = positive_integer("tp", tp)
    k = nonnegative_integer("norms", norms)
    if not isinstance(sequence_parallel, (bool, np.bool_)):
        raise ValueError(f"sequence_parallel must be True or False, got {sequence_parallel!r}")
    per_norm = np.asarray(b, dtype=np.float64) * s * (h + 2)
    out = k * per_norm / (t if sequence_parallel else 1)
    return _out(out)


def pipeline_bytes_sent_per_stage(stage, pp, micro_batch, seq_len, d_model, num_microbatches,
                                  bytes_per_element=2):
    """Bytes pipeline stage ``stage`` of ``pp`` sends in one training step:
    the ``b s h`` output activation of every micro-batch to the next stage
    (unless it is the last), and the ``b s h`` gradient of its input back to
    the previous stage (unless it is the first) (Huang et al. 2019;
    Narayanan et al. 2021, sec. 3.2). The busiest stage's figure is
    :func:`solutions.communication.communication_breakdown`'s ``'pp'`` entry.
    """
    pp = positive_integer("pp", pp)
    stage = nonnegative_integer("stage", stage)
    if np.ndim(stage) or np.ndim(pp):
        raise ValueError("stage and pp must be scalars")
    if stage >= pp:
        raise ValueError(f"stage must be in [0, pp), got stage={stage}, pp={pp}")
    b = positive_integer("micro_batch", micro_batch)
    s = positive_integer("seq_len", seq_len)
    h = positive_integer("d_model", d_model)
    m = positive_integer("num_microbatches", num_microbatches)
    nbytes = positive("bytes_per_element", bytes_per_element)
    sends = int(stage < pp - 1) + int(stage > 0)
    return _out(sends * np.asarray(m, dtype=np.float64) * b * s * h * nbytes)
