"""Red team: raises KeyboardInterrupt inside exercise 1."""


import numpy as np


# Exercise 1: red team: raises KeyboardInterrupt inside exercise 1
def chinchilla_loss(N, D):
    raise KeyboardInterrupt


# Exercise 2: brute-force search along the iso-FLOP curve 6 N D = C.
def compute_optimal(C, ratios=None):
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    ratios = np.asarray(ratios, dtype=float)
    C = np.asarray(C, dtype=float)
    N = np.sqrt(C[..., None] / (6 * ratios))
    D = ratios * N
    # Exercise 1's loss, written out again so that this exercise stands on its own.
    loss = 1.69 + 406.0 / N**0.34 + 410.0 / D**0.28
    best = np.argmin(loss, axis=-1)
    pick = lambda a: np.take_along_axis(a, best[..., None], axis=-1)[..., 0]
    return pick(N), pick(D), ratios[best], pick(loss)


# Exercise 3: model-state memory per GPU, 12 bytes per parameter.
BYTES_PER_PARAM = 12


def memory_per_gpu(model_params, strategy, num_gpus):
    total = BYTES_PER_PARAM * model_params
    if strategy == "dp":
        return total
    if strategy in ("tp", "pp", "fsdp"):
        return total / num_gpus
    raise ValueError(f"strategy must be one of 'dp', 'tp', 'pp', 'fsdp', got {strategy!r}")


# Exercise 4(a): the course's first estimate of communication time per step.
def communication_time_per_step(model_params, dp_rank, tp_rank, num_layers, seq_len,
                                 batch_size, d_model, bandwidth_tb_s):
    dp_volume = 2 * (2 * model_params)
    tp_volume = num_layers * 2 * (2 * batch_size * seq_len * d_model)
    return (dp_volume + tp_volume) / (bandwidth_tb_s * 1e12)


# Exercise 4(b): seconds per step on each axis, for one GPU (bf16, 2 bytes a value).
def communication_time_per_step_by_axis(model_params, dp_degree, tp_degree, pp_degree, num_layers,
                                        seq_len, micro_batch, num_microbatches, d_model,
                                        intra_node_gb_s, inter_node_gb_s):
    def ring(n):
        return 2 * (n - 1) / n

    activation = 2 * micro_batch * seq_len * d_model
    dp_bytes = ring(dp_degree) * 2 * model_params / (tp_degree * pp_degree)
    tp_bytes = (num_layers // pp_degree) * num_microbatches * 4 * ring(tp_degree) * activation
    sends = 0 if pp_degree == 1 else (1 if pp_degree == 2 else 2)
    pp_bytes = sends * num_microbatches * activation
    return (dp_bytes / (inter_node_gb_s * 1e9), tp_bytes / (intra_node_gb_s * 1e9),
            pp_bytes / (inter_node_gb_s * 1e9))
