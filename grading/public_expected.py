"""Compute the public checks' expected outcomes from the independent implementation
(:mod:`grading.independent`), and store them.

    python -m grading.public_expected          # rewrite public_expected.json
    python -m grading.public_expected --check  # exit 1 if the file is out of date

The JSON lets the public checks (the notebook's self-check) run in the student release,
which has no ``solutions/`` package. ``tests/grading/test_public_expected.py`` asserts that
the stored file equals what the independent implementation computes now, up to a
stated tolerance (numpy's vectorised maths may differ in the last bit between CPUs).
"""
from __future__ import annotations

import argparse
import json
import math
import sys

from .core import local_call
from .framework import PUBLIC_EXPECTED_PATH, PUBLIC_SPECS, attempt, strip_message


def compute_probe(function: str, args: list) -> dict:
    """The expected outcome (from :mod:`grading.independent`, never from
    ``solutions/``) and every known mistake's outcome for one call."""
    return {"args": args, "expected": expected_outcome(function, args),
            "mistakes": mistake_outcomes(function, args)}


def expected_outcome(function: str, args: list) -> dict:
    """What a correct answer gives, from :mod:`grading.independent`."""
    from . import independent

    expected = strip_message(attempt(local_call(independent.FUNCTIONS[function]), args))
    if "value" not in expected and "raises" not in expected:
        raise RuntimeError(f"the reference cannot answer {function}{tuple(args)}: {expected}")
    return expected


def mistake_outcomes(function: str, args: list) -> dict:
    """What every known mistake gives for the same call (to recognise and explain it)."""
    from . import mistakes

    outcomes = {}
    for mistake in mistakes.for_function(function):
        outcome = strip_message(attempt(local_call(mistake.impl), args))
        if outcome:
            outcomes[mistake.id] = outcome
    return outcomes


def compute() -> dict:
    from . import load_checks

    load_checks(include_hidden=False)  # registers every public check's arguments
    checks = {
        name: [compute_probe(function, args) for args in args_list]
        for name, (function, args_list) in sorted(PUBLIC_SPECS.items())
    }
    hidden: dict = {}
    for check in load_checks(include_hidden=True, seed=0):
        if check.hidden:
            hidden.setdefault(check.exercise, []).append(
                {"name": check.name, "points": check.points, "description": check.description})
    return {
        "about": "Expected outcomes of the public grading checks, computed from "
                 "grading/independent.py by `python -m grading.public_expected`; "
                 "and the names and points of the hidden checks (their inputs are drawn at "
                 "grading time). Do not edit by hand.",
        "checks": checks,
        "hidden": hidden,
    }


#: Stored and freshly computed expectations agree to this relative tolerance: numpy's
#: vectorised maths may round the last bit differently on another CPU, while any real change
#: of an expectation (a constant, a formula) moves it by far more.
STORED_REL_TOL = 1e-12


def differences(stored, fresh, where: str = "", rel: float = STORED_REL_TOL) -> list:
    """Where two JSON trees differ: floats beyond ``rel``, anything else at all."""
    if isinstance(stored, float) or isinstance(fresh, float):
        ok = (isinstance(stored, (int, float)) and isinstance(fresh, (int, float))
              and math.isclose(stored, fresh, rel_tol=rel, abs_tol=0.0))
        return [] if ok else [f"{where}: stored {stored!r}, computed {fresh!r}"]
    if isinstance(stored, dict) and isinstance(fresh, dict):
        if set(stored) != set(fresh):
            return [f"{where}: keys {sorted(set(stored) ^ set(fresh))} differ"]
        return [d for k in sorted(stored) for d in differences(stored[k], fresh[k], f"{where}/{k}", rel)]
    if isinstance(stored, list) and isinstance(fresh, list):
        if len(stored) != len(fresh):
            return [f"{where}: {len(stored)} items stored, {len(fresh)} computed"]
        return [d for i, (a, b) in enumerate(zip(stored, fresh))
                for d in differences(a, b, f"{where}[{i}]", rel)]
    return [] if stored == fresh else [f"{where}: stored {stored!r}, computed {fresh!r}"]


def dumps(data: dict) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, do not write")
    args = parser.parse_args(argv)
    text = dumps(compute())
    if args.check:
        current = (json.loads(PUBLIC_EXPECTED_PATH.read_text(encoding="utf-8"))
                   if PUBLIC_EXPECTED_PATH.exists() else {})
        if differences(current, json.loads(text)):
            print(f"{PUBLIC_EXPECTED_PATH.name} is out of date; run python -m grading.public_expected")
            return 1
        print(f"{PUBLIC_EXPECTED_PATH.name} is up to date")
        return 0
    PUBLIC_EXPECTED_PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PUBLIC_EXPECTED_PATH.name} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
