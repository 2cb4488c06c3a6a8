"""The planner's command line under random flags keeps its contract (tests/solutions/plan_fuzz.py),
and each input the fuzzer found breaking it stays fixed."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings

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
    # an empty name was read as the default (DeepEP) or as no overlap at all
    (["--overlap", ""], "overlap must be 'default', 'none', 'all' or axes among"),
    (["--overlap", ","], "got ','"),
    (["--arch", "Mixtral 8x7B", "--ep-dispatch", ""], "ep_dispatch must be one of"),
])
def test_inputs_the_fuzzer_found_are_one_line(argv, message):
    if argv[:1] == ["--arch"]:  # a named design: no --model
        status, out, err, _ = run(["--tokens", "1e12", *argv])
        assert status == 2 and err.count("\n") == 1, err
    else:
        err = _error(*argv)
    assert message in err, err

