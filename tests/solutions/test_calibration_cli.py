"""``python -m solutions.calibration``: the calibration set with every run's error and its
leave-one-out error, the held-out rows and the other stacks' rows, as text or JSON."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from solutions import calibration, facts


def _run(*args):
    return subprocess.run([sys.executable, "-m", "solutions.calibration", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_table_prints_every_run_with_its_leave_one_out_error(capsys):
    assert calibration.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "left out" in out[2] and out[1].startswith("constants (fitted on the course's table)")
    body = out[3:-1]
    assert [line[:56].rstrip() for line in body] == [r.name for r in facts.PUBLISHED_RUNS]
    # the errors under the shipped constants; two leave-one-out errors refitted here by hand
    rows = {r.name: r for r in calibration.heldout(facts.PUBLISHED_RUNS)}
    printed = {}
    for line in body:
        name, *numbers = line[:56].rstrip(), *line[56:].split()
        printed[name] = tuple(float(x.rstrip("%")) / 100 for x in numbers[2:4])
        assert printed[name][0] == pytest.approx(rows[name].error, abs=6e-4)
    runs = facts.PUBLISHED_RUNS
    for i in (0, len(runs) - 1):
        cal = calibration.fit(runs[:i] + runs[i + 1:])
        loo = calibration.predict(runs[i], cal) / rows[runs[i].name].published - 1
        assert printed[runs[i].name][1] == pytest.approx(loo, abs=2e-3)
    assert out[-1].startswith(f"{len(body)} runs: median |error|")


@pytest.mark.parametrize("which, runs", [("heldout", facts.HELDOUT_RUNS), ("other-stacks", facts.OTHER_STACK_RUNS)])
def test_json_of_the_rows_never_fitted(which, runs):
    out = _run("--set", which, "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert [r["name"] for r in data["rows"]] == [r.name for r in runs]
    expected = calibration.summary(calibration.heldout(runs))
    assert data["summary"]["median"] == pytest.approx(expected["median"], rel=1e-9)
    assert data["summary"]["within_20"] == expected["within_20"]
    assert all(r["error"] == pytest.approx(r["loo_error"], rel=1e-12) for r in data["rows"])


def test_a_bad_set_is_one_line_and_exit_2():
    out = _run("--set", "everything")
    assert out.returncode == 2 and out.stdout == ""
    assert len(out.stderr.strip().splitlines()) == 1 and "invalid choice" in out.stderr
