"""public_expected.json holds exactly what the reference (and the planted mistakes) compute now."""
from __future__ import annotations

import json

from tests.grading import load_checks
from tests.grading.framework import PUBLIC_EXPECTED_PATH, PUBLIC_SPECS
from tests.grading.public_expected import compute, dumps


def test_stored_file_matches_the_reference():
    stored = PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8")
    assert stored == dumps(compute()), (
        "public_expected.json is out of date: run `python -m tests.grading.public_expected`")


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


def test_stored_expectations_are_independent_of_the_code_under_test():
    """Spot-check the stored values against the exercise text, not against solutions/."""
    stored = json.loads(PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8"))["checks"]
    gpt3 = stored["ex1_gpt3"][0]["expected"]["value"]
    chinchilla = stored["ex1_chinchilla"][0]["expected"]["value"]
    assert round(gpt3, 3) == 2.002 and round(chinchilla, 3) == 1.936  # quoted by the exercise
    dp = stored["ex3_bytes_per_param"][0]
    assert dp["args"] == [7e9, "dp", 1] and dp["expected"]["value"] == 12 * 7e9
    assert stored["ex3_unknown_strategy"][0]["expected"] == {"raises": "ValueError"}
    cfg = stored["ex4_config_70b"][0]
    P, _, _, L, s, b, d, bw = cfg["args"]
    by_hand = (4 * P + L * 4 * b * s * d) / (bw * 1e12)
    assert abs(cfg["expected"]["value"] - by_hand) <= 1e-12 * by_hand
