"""What a grade means: points only for knowing something, each mistake named for what it is,
one slip costing one exercise, and hidden inputs that differ from student to student."""
from __future__ import annotations

import math

import pytest

from tests.grading import grade_callable, load_checks, local_call
from tests.grading.explain import WHY
from tests.grading.mistakes import _comm


def _grade(functions, seed=0, exercise=None):
    checks = [c for c in load_checks(seed=seed) if exercise is None or c.exercise == exercise]
    return grade_callable(lambda name: local_call(functions[name]), checks)


# ------------------------------------------------------------ points for knowing nothing

def _knows_nothing(ex4):
    def chinchilla_loss(N, D):
        return 1 / N + 1 / D

    def compute_optimal(C, ratios=None):  # honours 6ND = C, nothing else
        r = 20.0 if ratios is None else float(ratios[0])
        N = math.sqrt(C / (6 * r))
        return N, r * N, r, 1.0

    def memory_per_gpu(model_params, strategy, num_gpus):  # refuses an unknown strategy
        if strategy not in ("dp", "tp", "pp", "fsdp"):
            raise ValueError(strategy)
        return 1.0 / num_gpus

    return {"chinchilla_loss": chinchilla_loss, "compute_optimal": compute_optimal,
            "memory_per_gpu": memory_per_gpu, "communication_time_per_step": ex4}


@pytest.mark.parametrize("ex4", [lambda *a: 1 / a[-1], lambda *a: 1e-3 / a[-1],
                                 lambda *a: 1.0 / (a[-1] * 1e12)],
                         ids=["1/bandwidth", "1e-3/bandwidth", "1/bytes_per_s"])
@pytest.mark.parametrize("seed", [0, 1])
def test_functions_that_know_nothing_earn_only_the_fair_points(ex4, seed):
    """Refusing an unknown strategy (4) and spending exactly the budget (3) are fair;
    ex4_bandwidth_units pays only right times (or a known volume slip), not 1/bandwidth."""
    passed = {c.name for c, r in _grade(_knows_nothing(ex4), seed) if r.passed}
    assert passed == {"ex3_unknown_strategy", "ex2_on_budget"}


def test_the_bandwidth_check_still_pays_a_known_volume_slip():
    results = _grade({"communication_time_per_step": _comm(dp_bytes_per_param=2.0)}, 0, "ex4")
    assert {c.name: r.passed for c, r in results}["ex4_bandwidth_units"]


# ------------------------------------------------------------ the TP term, missing or not per layer

@pytest.mark.parametrize("mistake, says, not_says", [
    (_comm(tp_allreduces=0), "ex4_tp_missing", "ex4_tp_not_per_layer"),
    (_comm(per_layer=False), "ex4_tp_not_per_layer", "ex4_tp_missing"),
])
def test_a_missing_tp_term_is_not_called_a_term_not_multiplied_by_layers(mistake, says, not_says):
    results = _grade({"communication_time_per_step": mistake}, 0, "ex4")
    feedback = {c.name: r.feedback for c, r in results}
    assert WHY[says] in feedback["ex4_tp_volume"]
    assert not any(WHY[not_says] in f for f in feedback.values())
    if says == "ex4_tp_missing":
        assert "there is no TP term" in feedback["ex4_tp_volume"]
        assert "does not change when num_layers" not in feedback["ex4_tp_volume"]
