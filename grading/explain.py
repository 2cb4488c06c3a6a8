"""Why a known wrong answer is wrong, keyed by the mistake's id.

The wrong implementations themselves live in :mod:`grading.mistakes` (instructor side);
these explanations ship with the student release, so a check can explain a mistake it
recognises from the stored outcomes alone.
"""

WHY = {
    # Exercise 1
    "ex1_paper_rounded_constants": (
        "your numbers match A = 406.4 and B = 410.7, the constants as printed in Hoffmann et al. "
        "(2022). This exercise fixes A = 406.0 and B = 410.0; only those reproduce its "
        "GPT-3 2.002 and Chinchilla 1.936."),
    "ex1_paper_precise_constants": (
        "your numbers match the unrounded fit from the paper's source (E = 1.69337, "
        "alpha = 0.33917...). Use the exercise's constants: E = 1.69, A = 406.0, B = 410.0, "
        "alpha = 0.34, beta = 0.28."),
    "ex1_swapped_exponents": (
        "your numbers match the formula with the exponents swapped. alpha = 0.34 belongs to the "
        "model-size term A / N**alpha and beta = 0.28 to the data term B / D**beta."),
    "ex1_multiplies_instead_of_divides": (
        "your loss grows with N and D: it matches A * N**alpha + B * D**beta. The penalty "
        "terms shrink as the model and the data grow: A / N**alpha and B / D**beta."),
    "ex1_not_vectorised": (
        "the function fails when N and D are numpy arrays. Use numpy-friendly arithmetic "
        "(`**`, `np.power`) instead of `math.pow`, `float(...)` or Python loops, so one call "
        "evaluates a whole grid."),
    "ex1_n_term_grows": (
        "your model-size term grows with N: it matches A * N**alpha (a positive exponent). "
        "The exponent is negative, -alpha: write the term as A / N**alpha."),
    "ex1_d_term_grows": (
        "your data term grows with D: it matches B * D**beta (a positive exponent). "
        "The exponent is negative, -beta: write the term as B / D**beta."),
    "ex1_tokens_in_billions": (
        "your numbers match D counted in billions of tokens (300 for GPT-3's 300e9). The fit "
        "takes plain counts: D is the number of tokens itself, as the tests pass it."),
    "ex1_params_in_billions": (
        "your numbers match N counted in billions of parameters (175 for GPT-3's 175e9). The "
        "fit takes plain counts: N is the number of parameters itself, as the tests pass it."),
    "ex1_both_in_billions": (
        "your numbers match N and D both counted in billions (175 and 300 for GPT-3). The fit "
        "takes plain counts of parameters and tokens, as the tests pass them."),
    # Exercise 2
    "ex2_returns_last_point": (
        "you returned the last point of the grid, not the best one: keep a candidate only when "
        "its loss is lower than the best loss so far (or use np.argmin over all the losses)."),
    "ex2_ignores_ratios": (
        "you searched the default grid although `ratios` was given. Use "
        "np.logspace(-1, 3.3, 200) only when `ratios is None`."),
    "ex2_uses_2ND": (
        "your allocation satisfies 2*N*D = C. Training costs about 6 FLOPs per parameter per "
        "token (2 forward, 4 backward), so the budget line is 6*N*D = C and N = sqrt(C / (6*r))."),
    "ex2_forgets_the_6": (
        "your allocation satisfies N*D = C: the factor 6 is missing. Training costs about "
        "6 FLOPs per parameter per token, so N = sqrt(C / (6*r)) and D = r*N."),
    "ex2_continuous_optimum": (
        "your answer is the exact (continuous) optimum, but the exercise asks for the best "
        "point of the grid `ratios` by brute force: the returned ratio must be one of them."),
    "ex2_wrong_loss_constants": (
        "your search is right, but its losses come from a loss with the paper's rounded "
        "constants (A = 406.4, B = 410.7), not the exercise's (A = 406.0, B = 410.0): "
        "compute_optimal must call Exercise 1's chinchilla_loss, not a copy of its own, and "
        "that function must use the exercise's constants."),
    # Exercise 3
    "ex3_zero_16_bytes": (
        "you count 16 bytes per parameter, ZeRO's convention (it adds an fp32 master copy of "
        "the weights). This exercise uses the course's 12: bf16 weights (2) + bf16 gradients "
        "(2) + fp32 Adam m and v (4 + 4)."),
    "ex3_returns_gigabytes": (
        "you returned gigabytes; the function must return bytes. Divide by 1e9 only when you "
        "print or plot."),
    "ex3_returns_gibibytes": (
        "you returned GiB (bytes / 2**30); the function must return bytes."),
    "ex3_divides_dp": (
        "data parallelism keeps a full replica of the weights, gradients and optimizer state "
        "on every GPU: its memory per GPU does not shrink as GPUs are added."),
    "ex3_fsdp_not_sharded": (
        "FSDP shards the weights, gradients and optimizer state across the GPUs, so each GPU "
        "holds 1/num_gpus of the full state, like TP and PP in this first approximation."),
    "ex3_unknown_strategy_silent": (
        "an unknown strategy must raise ValueError naming the allowed ones ('dp', 'tp', 'pp', "
        "'fsdp'), not fall through to a default branch: a silent wrong number is worse than "
        "an error."),
    # Exercise 4
    "ex4_dp_missing_factor_2": (
        "your DP term counts 2 bytes per parameter: the fp16 gradients once. An all-reduce "
        "moves them twice (reduce-scatter, then all-gather), so the exercise's DP volume is "
        "2 * (2 * model_params) bytes."),
    "ex4_dp_ring_factor": (
        "you used the ring factor 2(n-1)/n with n = dp_rank. That is the better model (see "
        "Data parallelism), but this exercise's first estimate uses the plain factor 2 and "
        "does not depend on dp_rank."),
    "ex4_dp_divided_by_tp": (
        "you divided the DP volume by tp_rank. Sharding by TP is a refinement the exercise "
        "leaves out: its first estimate all-reduces all 2 * model_params gradient bytes, twice."),
    "ex4_tp_forward_and_backward": (
        "your TP term is twice the estimate's: four all-reduces per layer (forward and backward) "
        "where it counts two, or 4-byte (fp32) activations where it counts 2 bytes (fp16) give "
        "this number. Megatron does do four, but this exercise's first estimate counts two: "
        "2 * (2 * batch_size * seq_len * d_model) bytes per layer."),
    "ex4_tp_not_per_layer": (
        "your TP term does not grow with num_layers: every transformer layer all-reduces its "
        "activations, so multiply the per-layer volume by num_layers."),
    "ex4_tp_missing": (
        "your time has no TP term: tensor parallelism all-reduces each layer's activations, "
        "2 * (2 * batch_size * seq_len * d_model) bytes per layer, num_layers times, on top of "
        "the DP gradients."),
    "ex4_bandwidth_gb": (
        "your times are 1000 times too large: 1 TB/s is 1e12 bytes/s (not 1e9), and the "
        "answer is in seconds (not milliseconds)."),
    "ex4_bandwidth_bits": (
        "your times are 8 times too large: bandwidth_tb_s is in terabytes per second, "
        "1e12 bytes/s, not terabits."),
    "ex4_bandwidth_not_converted": (
        "you divided bytes by the bandwidth in TB/s: convert it to bytes/s first "
        "(bandwidth_tb_s * 1e12)."),
    # Exercise 4(b)
    "ex4b_dp_no_ring_factor": (
        "your DP term uses the factor 2 of part (a). A ring all-reduce over n = dp_degree GPUs "
        "sends 2(n-1)/n times the buffer from each GPU (Data parallelism, the ring algorithm): "
        "nothing with one GPU, 1.75 times with eight."),
    "ex4b_dp_whole_model": (
        "your DP term all-reduces the gradients of the whole model. With tensor and pipeline "
        "parallelism each GPU holds only its shard, model_params / (tp_degree * pp_degree), and "
        "its data-parallel group all-reduces that shard."),
    "ex4b_dp_shard_by_tp_only": (
        "your DP term divides the gradients by tp_degree only. Pipeline stages split the model "
        "too: one GPU holds model_params / (tp_degree * pp_degree) parameters."),
    "ex4b_dp_shard_by_all_gpus": (
        "your DP term divides the gradients by every GPU, dp_degree * tp_degree * pp_degree. The "
        "data-parallel group all-reduces one GPU's whole shard, model_params / (tp_degree * "
        "pp_degree): the ring factor 2(n-1)/n already accounts for each GPU sending only part of it."),
    "ex4b_dp_per_microbatch": (
        "your DP term grows with num_microbatches. Gradients are accumulated over the "
        "micro-batches and all-reduced once per optimizer step (ZeRO-1 and ZeRO-2 too)."),
    "ex4b_tp_forward_only": (
        "your TP term is half the right one: two all-reduces per layer, the forward pass only "
        "(part (a)'s count), or four with a ring factor of (n-1)/n instead of 2(n-1)/n give this "
        "number. Megatron's f operators add two all-reduces in the backward pass: four per layer "
        "per micro-batch (Model parallelism, the operators f and g), each sending 2(n-1)/n times "
        "its buffer."),
    "ex4b_tp_all_layers": (
        "your TP term counts all num_layers layers. With pp_degree pipeline stages a GPU holds "
        "and runs only num_layers / pp_degree of them."),
    "ex4b_tp_once_per_step": (
        "your TP term does not grow with num_microbatches. Tensor parallelism all-reduces "
        "activations, so every micro-batch's forward and backward pass pays it again."),
    "ex4b_tp_no_ring_factor": (
        "your TP term uses the factor 2 for every all-reduce. The ring sends 2(n-1)/n times the "
        "buffer with n = tp_degree: nothing with one GPU, 1.75 times with eight."),
    "ex4b_pp_two_sends_with_two_stages": (
        "with two pipeline stages each GPU sends once per micro-batch: the first stage sends "
        "activations forward, the last sends gradients back. Only an interior stage (three "
        "stages or more) sends both."),
    "ex4b_pp_once_per_step": (
        "your PP term does not grow with num_microbatches: every micro-batch's activations go "
        "forward, and their gradients back, through the pipeline."),
    "ex4b_links_swapped": (
        "your links are swapped. Tensor parallelism stays inside a server, on intra_node_gb_s "
        "(NVLink); the data-parallel all-reduce and the pipeline sends cross servers, on "
        "inter_node_gb_s."),
    "ex4b_bandwidth_tb": (
        "your times are 1000 times too small: the bandwidths are in GB/s, 1e9 bytes per second, "
        "not TB/s as in part (a)."),
    "ex4b_bandwidth_bits": (
        "your times are 8 times too large: the bandwidths are in gigabytes per second, "
        "1e9 bytes/s, not gigabits."),
}

#: Wrong answers a check recognises by their form rather than by a planted wrong
#: implementation (so no value of WHY): the id a failed Result carries as ``mistake``, and
#: what it means, for the class report. Ids start with the exercise's.
PATTERNS = {
    "returned_none": "returned None: the function prints its answer (or forgets `return`)",
    "wrong_type": "returned something other than numbers (a dict, a string, a boolean...)",
    "wrong_shape": "returned the right kind of numbers in the wrong shape (1-element arrays, "
                   "too many or too few values)",
    "almost_right": "within 0.1% of the right value: a mistyped or rounded constant",
    "ex2_grid_size": "searched a default grid with another number of points than 200",
    "ex2_skips_last_ratio": "the loop over the ratios stops before the last one",
}


def pattern_text(mistake: str) -> str | None:
    """What a PATTERNS id (with or without its exercise prefix) means, or None."""
    if mistake in PATTERNS:
        return PATTERNS[mistake]
    _, _, rest = mistake.partition("_")
    return PATTERNS.get(rest)
