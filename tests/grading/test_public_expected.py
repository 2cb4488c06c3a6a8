"""public_expected.json holds what the independent implementation (and the planted mistakes)
compute now, compared with a stated tolerance, never as text."""
from __future__ import annotations

import json

from grading import load_checks
from grading.framework import PUBLIC_EXPECTED_PATH, PUBLIC_SPECS
from grading.public_expected import STORED_REL_TOL, compute, differences


def test_stored_file_matches_the_independent_implementation():
    stored = json.loads(PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(compute()))
    diff = differences(stored, fresh)
    assert not diff, ("public_expected.json is out of date "
                      "(run `python -m grading.public_expected`):\n" + "\n".join(diff[:10]))


def test_the_comparison_tolerates_the_last_bit_and_nothing_more():
    """The case seen on another CPU: the stored and computed floats differ in the last digit."""
    assert differences({"x": [2.598599432659206]}, {"x": [2.5985994326592063]}) == []
    assert differences({"x": [2.598599432659206]}, {"x": [2.598599432659206 * (1 + 1e-9)]})
    assert differences({"x": 1.0}, {"x": "1.0"}) and differences({"x": [1.0]}, {"x": [1.0, 2.0]})
    assert STORED_REL_TOL <= 1e-12


def test_every_public_check_has_probes_and_no_hidden_check_is_stored():
    checks = load_checks(seed=0)
    stored = json.loads(PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8"))["checks"]
    public = {c.name for c in checks if not c.hidden}
    assert set(stored) == public == set(PUBLIC_SPECS)
    for name, probes in stored.items():
        assert probes, name
        for probe in probes:
            assert ("value" in probe["expected"]) != ("raises" in probe["expected"])
            assert probe["mistakes"], name  # each public probe can recognise mistakes


def test_stored_expectations_agree_with_the_exercise_text():
    """Spot-check the stored values against numbers worked out from the exercise text."""
    stored = json.loads(PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8"))["checks"]
    gpt3 = stored["ex1_gpt3"][0]["expected"]["value"]
    chinchilla = stored["ex1_chinchilla"][0]["expected"]["value"]
    assert abs(gpt3 - 2.002) < 5e-4 and abs(chinchilla - 1.936) < 5e-4  # quoted by the exercise
    dp = stored["ex3_bytes_per_param"][0]
    assert dp["args"] == [7e9, "dp", 1] and abs(dp["expected"]["value"] - 8.4e10) <= 1e-6
    assert stored["ex3_unknown_strategy"][0]["expected"] == {"raises": "ValueError"}
    cfg = stored["ex4_config_70b"][0]
    assert cfg["args"] == [70e9, 64, 8, 80, 4096, 1, 8192, 0.9]
    # 4 * 70e9 = 2.8e11 bytes of DP; 80 * 4 * 4096 * 8192 = 10737418240 bytes of TP
    by_hand = (2.8e11 + 10737418240) / 0.9e12
    assert abs(cfg["expected"]["value"] - by_hand) <= 1e-12 * by_hand
