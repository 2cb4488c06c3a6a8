"""The exercises written out plainly, from the exercise text, as a student would.

The grading checks take what to expect from these functions, never from ``solutions/``: a
bug planted in the reference then cannot become every student's "expected" answer. Instead
``tests/grading/test_independent.py`` checks that the reference and these functions agree
on thousands of random inputs, so a bug on either side fails a test.

Nothing here imports ``solutions`` or the course's other packages: only the standard library
(``math``) and numpy for the grid of Exercise 2. The constants are the exercise's:
Hoffmann et al. (2022), eq. 2, with A and B rounded as the exercise states; Kaplan et al.
(2020), sec. 2.1, for 6 FLOPs per parameter per token; 12 bytes per parameter (Micikevicius
et al. 2018); Exercise 4's first estimate of communication time (part (a)) and its
estimate per axis (part (b): the ring's 2(n-1)/n, nccl-tests; Megatron's four all-reduces
per layer, Shoeybi et al. 2019; the pipeline's point-to-point sends, Huang et al. 2019).
"""
from __future__ import annotations

import math

import numpy as np

# Exercise 1: L(N, D) = E + A / N**alpha + B / D**beta
E, A, B = 1.69, 406.0, 410.0
ALPHA, BETA = 0.34, 0.28

# Exercise 2: the iso-FLOP line 6 N D = C, searched over a grid of ratios r = D / N.
FLOPS_PER_PARAM_TOKEN = 6.0
GRID_START, GRID_STOP, GRID_POINTS = -1.0, 3.3, 200  # np.logspace(-1, 3.3, 200)

# Exercise 3: bf16 weights (2) + bf16 gradients (2) + fp32 Adam m and v (4 + 4)
BYTES_PER_PARAM = 12
SHARDED = ("tp", "pp", "fsdp")

# Exercise 4
FP16_BYTES = 2
ALLREDUCE_FACTOR = 2
TP_ALLREDUCES_PER_LAYER = 2
BYTES_PER_S_PER_TB_S = 1e12

# Exercise 4, part (b)
BF16_BYTES = 2
TP_ALLREDUCES_PER_LAYER_FWD_BWD = 4
BYTES_PER_S_PER_GB_S = 1e9


def chinchilla_loss(N: float, D: float) -> float:
    """Exercise 1 for one (N, D) pair."""
    return E + A / N ** ALPHA + B / D ** BETA


def default_ratios(points: int = GRID_POINTS) -> list:
    """The exercise's grid, as plain floats (``points`` other than 200: a wrong grid)."""
    return [float(r) for r in np.logspace(GRID_START, GRID_STOP, points)]


def compute_optimal(C: float, ratios=None, loss=chinchilla_loss) -> tuple:
    """Exercise 2: the grid point of lowest loss along 6 N D = C; the first one on a tie.

    ``loss`` may be another loss function (the student's own Exercise 1, for instance).
    """
    ratios = default_ratios() if ratios is None else [float(r) for r in ratios]
    best = None
    for r in ratios:
        N = math.sqrt(C / (FLOPS_PER_PARAM_TOKEN * r))
        D = r * N
        value = float(loss(N, D))
        if best is None or value < best[3]:
            best = (N, D, r, value)
    return best


def memory_per_gpu(model_params: float, strategy: str, num_gpus: int) -> float:
    """Exercise 3, in bytes: DP replicates; TP, PP and FSDP split the state evenly."""
    full = BYTES_PER_PARAM * model_params
    if strategy == "dp":
        return full
    if strategy in SHARDED:
        return full / num_gpus
    raise ValueError(f"strategy must be one of 'dp', 'tp', 'pp', 'fsdp', got {strategy!r}")


def communication_time_per_step(model_params, dp_rank, tp_rank, num_layers, seq_len,
                                batch_size, d_model, bandwidth_tb_s) -> float:
    """Exercise 4's first estimate, in seconds (the parallel degrees are not used)."""
    dp_bytes = ALLREDUCE_FACTOR * FP16_BYTES * model_params
    tp_bytes_per_layer = TP_ALLREDUCES_PER_LAYER * FP16_BYTES * batch_size * seq_len * d_model
    return (dp_bytes + num_layers * tp_bytes_per_layer) / (bandwidth_tb_s * BYTES_PER_S_PER_TB_S)


def ring_allreduce(n: int) -> float:
    """Bytes one of n GPUs sends per byte of buffer in a ring all-reduce: 2(n-1)/n."""
    return 2 * (n - 1) / n


def communication_time_per_step_by_axis(model_params, dp_degree, tp_degree, pp_degree, num_layers,
                                        seq_len, micro_batch, num_microbatches, d_model,
                                        intra_node_gb_s, inter_node_gb_s) -> tuple:
    """Exercise 4, part (b): (DP, TP, PP) seconds per step for one GPU."""
    activation = BF16_BYTES * micro_batch * seq_len * d_model
    dp_bytes = ring_allreduce(dp_degree) * BF16_BYTES * model_params / (tp_degree * pp_degree)
    tp_bytes = (num_layers // pp_degree) * num_microbatches * TP_ALLREDUCES_PER_LAYER_FWD_BWD \
        * ring_allreduce(tp_degree) * activation
    sends = 0 if pp_degree == 1 else (1 if pp_degree == 2 else 2)
    pp_bytes = sends * num_microbatches * activation
    intra = intra_node_gb_s * BYTES_PER_S_PER_GB_S
    inter = inter_node_gb_s * BYTES_PER_S_PER_GB_S
    return (dp_bytes / inter, tp_bytes / intra, pp_bytes / inter)


FUNCTIONS = {
    "chinchilla_loss": chinchilla_loss,
    "compute_optimal": compute_optimal,
    "memory_per_gpu": memory_per_gpu,
    "communication_time_per_step": communication_time_per_step,
    "communication_time_per_step_by_axis": communication_time_per_step_by_axis,
}


def chinchilla_loss_vectorised(N, D):
    """Exercise 1 on arrays (same formula; used for array probes)."""
    return E + A / np.asarray(N, dtype=float) ** ALPHA + B / np.asarray(D, dtype=float) ** BETA
