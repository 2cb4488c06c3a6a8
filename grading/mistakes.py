"""Plausible wrong answers to the exercises, planted to test the grader.

Each :class:`Mistake` is a complete wrong implementation of one exercise function, the exact
set of checks it must fail (every other check must pass), and, through its id, the
explanation a student sees when a check recognises it (:data:`grading.explain.WHY`).
``tests/grading/test_planted.py`` grades each one and asserts both.

This module is instructor-side: it imports the reference solutions and is left out of the
student release. The checks only need the mistakes' *outcomes*, stored in
``public_expected.json`` for public checks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .explain import WHY


@dataclass(frozen=True)
class Mistake:
    id: str
    function: str
    impl: Callable
    fails: frozenset

    @property
    def exercise(self) -> str:
        return self.id.split("_", 1)[0]

    @property
    def why(self) -> str:
        return WHY[self.id]


def _loss(E, A, B, alpha, beta):
    def chinchilla_loss(N, D):
        return E + A / N**alpha + B / D**beta
    return chinchilla_loss


# --------------------------------------------------------------------------- Exercise 1

def ex1_multiplies(N, D):
    return 1.69 + 406.0 * N**0.34 + 410.0 * D**0.28


def ex1_n_term_grows(N, D):
    """The sign slip on one exponent: A * N**alpha (N**+alpha) in place of A / N**alpha."""
    return 1.69 + 406.0 * N**0.34 + 410.0 / D**0.28


def ex1_d_term_grows(N, D):
    """The same slip on the data term: B * D**beta in place of B / D**beta."""
    return 1.69 + 406.0 / N**0.34 + 410.0 * D**0.28


def ex1_tokens_in_billions(N, D):
    """A unit slip: the token count in billions (300 for GPT-3's 300e9 tokens)."""
    return 1.69 + 406.0 / N**0.34 + 410.0 / (D / 1e9)**0.28


def ex1_params_in_billions(N, D):
    """The same slip on the model size: N in billions of parameters."""
    return 1.69 + 406.0 / (N / 1e9)**0.34 + 410.0 / D**0.28


def ex1_both_in_billions(N, D):
    """Both counts in billions, as tables of models print them."""
    return 1.69 + 406.0 / (N / 1e9)**0.34 + 410.0 / (D / 1e9)**0.28


def ex1_not_vectorised(N, D):
    return 1.69 + 406.0 / math.pow(N, 0.34) + 410.0 / math.pow(D, 0.28)


# --------------------------------------------------------------------------- Exercise 2

def _sweep(C, ratios, loss, flops_per_param_token=6.0, pick="best"):
    if ratios is None:
        ratios = np.logspace(-1, 3.3, 200)
    best = None
    for r in ratios:
        N = np.sqrt(C / (flops_per_param_token * r))
        D = r * N
        value = loss(N, D)
        if pick == "last" or best is None or value < best[3]:
            best = (N, D, r, value)
    return best


def _reference_loss(N, D):
    from .independent import chinchilla_loss
    return chinchilla_loss(N, D)


def ex2_returns_last_point(C, ratios=None):
    return _sweep(C, ratios, _reference_loss, pick="last")


def ex2_ignores_ratios(C, ratios=None):
    return _sweep(C, None, _reference_loss)


def ex2_uses_2ND(C, ratios=None):
    return _sweep(C, ratios, _reference_loss, flops_per_param_token=2.0)


def ex2_forgets_the_6(C, ratios=None):
    return _sweep(C, ratios, _reference_loss, flops_per_param_token=1.0)


def ex2_continuous_optimum(C, ratios=None):
    from solutions.scaling import EXERCISE, compute_optimal_closed_form
    return compute_optimal_closed_form(C, EXERCISE)


def ex2_wrong_loss_constants(C, ratios=None):
    return _sweep(C, ratios, _loss(1.69, 406.4, 410.7, 0.34, 0.28))


# --------------------------------------------------------------------------- Exercise 3

def _memory(bytes_per_param=12, unit=1.0, divide_dp=False, shard_fsdp=True, strict=True):
    def memory_per_gpu(model_params, strategy, num_gpus):
        full = bytes_per_param * model_params / unit
        if strategy == "dp":
            return full / num_gpus if divide_dp else full
        if strategy == "fsdp" and not shard_fsdp:
            return full
        if strategy in ("tp", "pp", "fsdp") or not strict:
            return full / num_gpus
        raise ValueError(f"strategy must be 'dp', 'tp', 'pp' or 'fsdp', got {strategy!r}")
    return memory_per_gpu


# --------------------------------------------------------------------------- Exercise 4

def _comm(dp_bytes_per_param=4.0, ring=False, divide_by_tp=False, tp_allreduces=2,
          per_layer=True, bytes_per_s_per_tb=1e12):
    def communication_time_per_step(model_params, dp_rank, tp_rank, num_layers, seq_len,
                                     batch_size, d_model, bandwidth_tb_s):
        dp_volume = dp_bytes_per_param * model_params
        if ring:
            dp_volume = 2 * model_params * 2 * (dp_rank - 1) / dp_rank
        if divide_by_tp:
            dp_volume = dp_volume / tp_rank
        tp_per_layer = tp_allreduces * (2 * batch_size * seq_len * d_model)
        tp_volume = num_layers * tp_per_layer if per_layer else tp_per_layer
        return (dp_volume + tp_volume) / (bandwidth_tb_s * bytes_per_s_per_tb)
    return communication_time_per_step


# --------------------------------------------------------------------------- Exercise 4(b)

def _by_axis(dp_ring=True, dp_shard="tp*pp", dp_per_microbatch=False, tp_allreduces=4,
             tp_layers="stage", tp_per_microbatch=True, tp_ring=True, pp_sends="busiest",
             pp_per_microbatch=True, links_swapped=False, bytes_per_s_per_gb=1e9):
    def communication_time_per_step_by_axis(model_params, dp_degree, tp_degree, pp_degree,
                                            num_layers, seq_len, micro_batch, num_microbatches,
                                            d_model, intra_node_gb_s, inter_node_gb_s):
        m = num_microbatches
        activation = 2 * micro_batch * seq_len * d_model
        shard = {"tp*pp": tp_degree * pp_degree, "none": 1, "tp": tp_degree,
                 "all": dp_degree * tp_degree * pp_degree}[dp_shard]
        dp_factor = 2 * (dp_degree - 1) / dp_degree if dp_ring else 2
        dp_bytes = dp_factor * 2 * model_params / shard * (m if dp_per_microbatch else 1)
        tp_factor = 2 * (tp_degree - 1) / tp_degree if tp_ring else 2
        layers = num_layers // pp_degree if tp_layers == "stage" else num_layers
        tp_bytes = layers * (m if tp_per_microbatch else 1) * tp_allreduces * tp_factor * activation
        if pp_sends == "busiest":
            sends = 0 if pp_degree == 1 else (1 if pp_degree == 2 else 2)
        else:  # "two": every stage of a pipeline sends both ways, even the first and the last
            sends = 0 if pp_degree == 1 else 2
        pp_bytes = sends * (m if pp_per_microbatch else 1) * activation
        intra, inter = intra_node_gb_s * bytes_per_s_per_gb, inter_node_gb_s * bytes_per_s_per_gb
        if links_swapped:
            intra, inter = inter, intra
        return (dp_bytes / inter, tp_bytes / intra, pp_bytes / inter)
    return communication_time_per_step_by_axis


EX1_VALUES = {"ex1_gpt3", "ex1_chinchilla", "ex1_hidden_random"}
EX2_VALUES = {"ex2_grid_minimum", "ex2_several_budgets", "ex2_hidden_budgets", "ex2_hidden_ratios"}
EX4_VALUES = {"ex4_config_7b", "ex4_config_70b", "ex4_hidden_random"}
EX4B_VALUES = {"ex4b_config_70b", "ex4b_config_7b", "ex4b_hidden_random"}
# Property checks pay only values within 5 % of the right ones (framework.PROPERTY_GATE_REL),
# so a mistake that moves every value by more fails them too.
EX1_PROPERTIES = {"ex1_decreasing_in_n", "ex1_decreasing_in_d", "ex1_vectorised"}
EX3_PROPERTIES = {"ex3_dp_replicates", "ex3_sharded_divide", "ex3_fsdp_times_gpus_equals_dp"}

MISTAKES = [
    Mistake("ex1_paper_rounded_constants", "chinchilla_loss",
            _loss(1.69, 406.4, 410.7, 0.34, 0.28), frozenset(EX1_VALUES)),
    Mistake("ex1_paper_precise_constants", "chinchilla_loss",
            _loss(1.69337, 406.401, 410.723, 0.33917084, 0.2849083), frozenset(EX1_VALUES)),
    Mistake("ex1_swapped_exponents", "chinchilla_loss",
            _loss(1.69, 406.0, 410.0, 0.28, 0.34), frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_multiplies_instead_of_divides", "chinchilla_loss", ex1_multiplies,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_not_vectorised", "chinchilla_loss", ex1_not_vectorised,
            frozenset({"ex1_vectorised"})),
    Mistake("ex1_n_term_grows", "chinchilla_loss", ex1_n_term_grows,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_d_term_grows", "chinchilla_loss", ex1_d_term_grows,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_tokens_in_billions", "chinchilla_loss", ex1_tokens_in_billions,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_params_in_billions", "chinchilla_loss", ex1_params_in_billions,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),
    Mistake("ex1_both_in_billions", "chinchilla_loss", ex1_both_in_billions,
            frozenset(EX1_VALUES | EX1_PROPERTIES)),

    Mistake("ex2_returns_last_point", "compute_optimal", ex2_returns_last_point,
            frozenset(EX2_VALUES | {"ex2_custom_ratios", "ex2_returns_four_numbers"})),
    Mistake("ex2_ignores_ratios", "compute_optimal", ex2_ignores_ratios,
            frozenset({"ex2_custom_ratios", "ex2_hidden_ratios"})),
    Mistake("ex2_uses_2ND", "compute_optimal", ex2_uses_2ND,
            frozenset(EX2_VALUES | {"ex2_on_budget", "ex2_returns_four_numbers"})),
    Mistake("ex2_forgets_the_6", "compute_optimal", ex2_forgets_the_6,
            frozenset(EX2_VALUES | {"ex2_on_budget", "ex2_returns_four_numbers"})),
    Mistake("ex2_continuous_optimum", "compute_optimal", ex2_continuous_optimum,
            frozenset(EX2_VALUES | {"ex2_custom_ratios"})),
    Mistake("ex2_wrong_loss_constants", "compute_optimal", ex2_wrong_loss_constants,
            frozenset(EX2_VALUES)),

    Mistake("ex3_zero_16_bytes", "memory_per_gpu", _memory(bytes_per_param=16),
            frozenset({"ex3_bytes_per_param", "ex3_hidden_random"} | EX3_PROPERTIES)),
    Mistake("ex3_returns_gigabytes", "memory_per_gpu", _memory(unit=1e9),
            frozenset({"ex3_bytes_per_param", "ex3_hidden_random"} | EX3_PROPERTIES)),
    Mistake("ex3_returns_gibibytes", "memory_per_gpu", _memory(unit=2.0**30),
            frozenset({"ex3_bytes_per_param", "ex3_hidden_random"} | EX3_PROPERTIES)),
    Mistake("ex3_divides_dp", "memory_per_gpu", _memory(divide_dp=True),
            frozenset({"ex3_dp_replicates", "ex3_fsdp_times_gpus_equals_dp", "ex3_hidden_random"})),
    Mistake("ex3_fsdp_not_sharded", "memory_per_gpu", _memory(shard_fsdp=False),
            frozenset({"ex3_sharded_divide", "ex3_fsdp_times_gpus_equals_dp", "ex3_hidden_random"})),
    Mistake("ex3_unknown_strategy_silent", "memory_per_gpu", _memory(strict=False),
            frozenset({"ex3_unknown_strategy"})),

    Mistake("ex4_dp_missing_factor_2", "communication_time_per_step",
            _comm(dp_bytes_per_param=2.0),
            frozenset(EX4_VALUES | {"ex4_dp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_dp_ring_factor", "communication_time_per_step", _comm(ring=True),
            frozenset(EX4_VALUES | {"ex4_dp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_dp_divided_by_tp", "communication_time_per_step", _comm(divide_by_tp=True),
            frozenset(EX4_VALUES | {"ex4_dp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_tp_forward_and_backward", "communication_time_per_step",
            _comm(tp_allreduces=4),
            frozenset(EX4_VALUES | {"ex4_tp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_tp_not_per_layer", "communication_time_per_step", _comm(per_layer=False),
            frozenset(EX4_VALUES | {"ex4_tp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_tp_missing", "communication_time_per_step", _comm(tp_allreduces=0),
            frozenset(EX4_VALUES | {"ex4_tp_volume", "ex4_ignores_degrees"})),
    Mistake("ex4_bandwidth_gb", "communication_time_per_step", _comm(bytes_per_s_per_tb=1e9),
            frozenset(EX4_VALUES | {"ex4_bandwidth_units"})),
    Mistake("ex4_bandwidth_bits", "communication_time_per_step",
            _comm(bytes_per_s_per_tb=1e12 / 8), frozenset(EX4_VALUES | {"ex4_bandwidth_units"})),
    Mistake("ex4_bandwidth_not_converted", "communication_time_per_step",
            _comm(bytes_per_s_per_tb=1.0), frozenset(EX4_VALUES | {"ex4_bandwidth_units"})),

    Mistake("ex4b_dp_no_ring_factor", "communication_time_per_step_by_axis", _by_axis(dp_ring=False),
            frozenset(EX4B_VALUES | {"ex4b_dp_shard", "ex4b_degree_one"})),
    Mistake("ex4b_dp_whole_model", "communication_time_per_step_by_axis", _by_axis(dp_shard="none"),
            frozenset(EX4B_VALUES | {"ex4b_dp_shard", "ex4b_degree_one"})),
    Mistake("ex4b_dp_shard_by_tp_only", "communication_time_per_step_by_axis", _by_axis(dp_shard="tp"),
            frozenset(EX4B_VALUES | {"ex4b_dp_shard", "ex4b_degree_one"})),
    Mistake("ex4b_dp_shard_by_all_gpus", "communication_time_per_step_by_axis", _by_axis(dp_shard="all"),
            frozenset(EX4B_VALUES | {"ex4b_dp_shard", "ex4b_degree_one"})),
    Mistake("ex4b_dp_per_microbatch", "communication_time_per_step_by_axis",
            _by_axis(dp_per_microbatch=True), frozenset(EX4B_VALUES | {"ex4b_dp_shard", "ex4b_degree_one"})),
    Mistake("ex4b_tp_forward_only", "communication_time_per_step_by_axis", _by_axis(tp_allreduces=2),
            frozenset(EX4B_VALUES | {"ex4b_tp_allreduces", "ex4b_degree_one"})),
    Mistake("ex4b_tp_all_layers", "communication_time_per_step_by_axis", _by_axis(tp_layers="all"),
            frozenset(EX4B_VALUES | {"ex4b_tp_allreduces", "ex4b_degree_one"})),
    Mistake("ex4b_tp_once_per_step", "communication_time_per_step_by_axis",
            _by_axis(tp_per_microbatch=False), frozenset(EX4B_VALUES | {"ex4b_tp_allreduces", "ex4b_degree_one"})),
    Mistake("ex4b_tp_no_ring_factor", "communication_time_per_step_by_axis", _by_axis(tp_ring=False),
            frozenset(EX4B_VALUES | {"ex4b_tp_allreduces", "ex4b_degree_one"})),
    Mistake("ex4b_pp_two_sends_with_two_stages", "communication_time_per_step_by_axis",
            _by_axis(pp_sends="two"), frozenset({"ex4b_config_7b", "ex4b_hidden_random", "ex4b_pp_sends", "ex4b_degree_one"})),
    Mistake("ex4b_pp_once_per_step", "communication_time_per_step_by_axis",
            _by_axis(pp_per_microbatch=False), frozenset(EX4B_VALUES | {"ex4b_pp_sends", "ex4b_degree_one"})),
    Mistake("ex4b_links_swapped", "communication_time_per_step_by_axis", _by_axis(links_swapped=True),
            frozenset(EX4B_VALUES | {"ex4b_bandwidth_units", "ex4b_degree_one"})),
    Mistake("ex4b_bandwidth_tb", "communication_time_per_step_by_axis",
            _by_axis(bytes_per_s_per_gb=1e12), frozenset(EX4B_VALUES | {"ex4b_bandwidth_units"})),
    Mistake("ex4b_bandwidth_bits", "communication_time_per_step_by_axis",
            _by_axis(bytes_per_s_per_gb=1e9 / 8), frozenset(EX4B_VALUES | {"ex4b_bandwidth_units"})),
]

MISTAKE_BY_ID = {m.id: m for m in MISTAKES}


def for_function(function: str) -> list[Mistake]:
    return [m for m in MISTAKES if m.function == function]
