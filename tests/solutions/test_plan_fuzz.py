"""The planner's command line under random flags keeps its contract (tests/solutions/plan_fuzz.py),
and each input the fuzzer found breaking it stays fixed."""
from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, given, settings

from solutions import after_chinchilla, plan, scaling
from solutions._validate import count_with_suffix
from tests.solutions.plan_fuzz import argvs, check, run

EXAMPLES = int(os.environ.get("PLAN_FUZZ_EXAMPLES", "60"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(argvs())
def test_any_command_line_is_a_plan_or_one_line(argv):
    check(argv)


def _error(*argv):
    status, out, err, _ = run(["--model", "7e9", "--tokens", "1e12", *argv])
    assert status == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, (status, err)
    return err


@pytest.mark.parametrize("argv, message", [
    # 6 N D overflowed, and the line blamed a 'C' the command line has no flag for
    (["--tokens", "1e308"], "tokens 1e+308 at 7e+09 parameters is more training compute (6 N D) than a float holds; "
                            "give fewer --tokens"),
    # the days to train overflowed: 'inf days' in the text, Infinity (not JSON) in --json
    (["--tokens", "1e290", "--mfu", "1e-300", "--json"], "the days to train come to inf"),
    (["--mfu", "5e-324", "--json"], "give fewer --tokens or another --mfu"),
    (["--tokens", "5e-324"], "the days to train come to 0"),
    # a network too slow for a float: the line blamed an internal 'tokens_per_s'
    (["--count", "64", "--network-gbps", "5e-324"], "--network-gbps 4.94e-324 is too slow"),
    # serving beyond what the over-training search resolves: warnings, 'inf FLOPs' and 'nan% less'
    (["--inference-tokens", "1e300"], "--inference-tokens 1e+300 is more than the search resolves"),
    (["--inference-tokens", "1e40"], "give fewer inference tokens"),
    # an empty name was read as the default (DeepEP) or as no overlap at all
    (["--overlap", ""], "overlap must be 'default', 'none', 'all' or axes among"),
    (["--overlap", ","], "got ','"),
    (["--arch", "Mixtral 8x7B", "--ep-dispatch", ""], "--ep-dispatch must be one of"),
])
def test_inputs_the_fuzzer_found_are_one_line(argv, message):
    if argv[:1] == ["--arch"]:  # a named design: no --model
        status, out, err, _ = run(["--tokens", "1e12", *argv])
        assert status == 2 and err.count("\n") == 1, err
    else:
        err = _error(*argv)
    assert message in err, err


def test_the_cheapest_model_for_more_inference_keeps_training_longer_until_the_search_refuses():
    """Before, past some 1e36 tokens served the answer stopped moving (the search's resolution
    near the smallest model that reaches the loss): 1e58 tokens got 1e36's model and data."""
    c = scaling.CONSTANT_SETS["epoch_2024"]
    last_n, last_d = math.inf, 0.0
    for exponent in range(20, 60):
        try:
            n, d, flops = after_chinchilla.inference_aware_optimal(2.068, 10.0 ** exponent, c)
        except ValueError as exc:
            assert "more than the search resolves" in str(exc)
            break
        assert n < last_n and d > last_d and math.isfinite(flops)
        last_n, last_d = n, d
    else:
        pytest.fail("no demand was refused")
    assert exponent < 40


def test_a_layout_without_a_pipeline_has_no_schedule_in_the_json_and_its_flags_plan_it_again():
    """The JSON of a pp=1 plan said schedule '1f1b', while --schedule 1f1b --pp 1 is refused (a
    schedule needs pipeline stages) and the printout says 'no pipeline'. Now it says null, and the
    layout it reports, given back as flags, is accepted and planned the same."""
    status, out, _, _ = run(["--model", "7e9", "--tokens", "1e12", "--count", "8", "--pp", "1", "--json"])
    assert status == 0
    data = json.loads(out)
    lay = data["layout"]
    assert lay["pp"] == 1 and lay["schedule"] is None
    assert all(a["layout"]["schedule"] is None for a in data["alternatives"] if a["layout"]["pp"] == 1)
    flags = [f"--{k.replace('_', '-')}={v}" for k, v in lay.items()
             if v is not None and k in ("tp", "cp", "pp", "dp", "zero", "micro_batch", "recompute", "schedule",
                                        "virtual_stages")]
    status, again, err, _ = run(["--model", "7e9", "--tokens", "1e12", "--count", "8", *flags, "--json"])
    assert status == 0, err
    assert json.loads(again)["layout"] == lay
    assert "needs pipeline stages" in _error("--count", "8", "--pp", "1", "--schedule", "1f1b")
    piped = json.loads(run(["--model", "7e9", "--tokens", "1e12", "--count", "8", "--pp", "2", "--json"])[1])
    assert piped["layout"]["schedule"] in ("1f1b", "interleaved")


#: Words that say what a number counts or measures, one of which every numeric flag's help names.
UNITS = ("FLOPs", "parameters", "tokens", "GPUs", "stages", "sequences", "layers", "features", "heads", "experts",
         "Gb/s", "ratio", "stage 0-3", "chunks", "MFU", "layer")


def test_every_flag_says_what_it_takes_and_the_help_fits_80_columns(monkeypatch):
    """--heads, --ffn-hidden and --vocab had no help at all, and --hidden read 'd_model'."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = plan.build_parser()
    for action in parser._actions:
        assert action.help, action.option_strings
        if action.type in (int, float) or action.type is count_with_suffix:
            assert any(unit in action.help for unit in UNITS), (action.option_strings, action.help)
    assert max(map(len, parser.format_help().splitlines())) <= 80


def test_a_budget_too_small_to_split_is_one_line_naming_the_budget():
    # the split underflowed: a numpy warning and then an error about an internal 'N'
    status, out, err, _ = run(["--budget", "5e-324"])
    assert status == 2 and out == "" and err.count("\n") == 1 and "Warning" not in err, err
    assert "budget 4.94e-324 FLOPs is too small to split" in err and "--budget" in err


def test_what_the_user_typed_comes_back_as_typed_not_as_a_flag():
    # '--gpu top_k' is a GPU name the user typed; the message's own words still name flags
    err = _error("--gpu", "top_k")
    assert "got 'top_k'" in err and "--top-k" not in err, err
    assert "--global-batch must be" in _error("--global-batch", "0")
