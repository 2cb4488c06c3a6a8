"""The labs' JSON report: configuration, measurements, and a list of checks.

Every check is ``{name, predicted, measured, ratio, ok}`` (the course's lab contract) plus
``unit`` and ``rule``, which say how ``ok`` was decided:

* ``"exact"``: ``measured == predicted`` (byte counts; replicas that must be bit-identical);
* ``"within X%"``: ``|measured / predicted - 1| <= X/100`` (memory with padding);
* ``"at most"``: ``measured <= predicted``, where ``predicted`` is a bound (a tolerance on
  the largest difference between two runs).

``ratio`` is ``measured / predicted``; when both are zero it is 1 (they agree), and when only
``predicted`` is zero it is ``None``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

__all__ = ["check_exact", "check_skipped", "check_within", "check_at_most", "write_report", "read_report",
           "format_checks", "all_ok"]


def _ratio(predicted, measured):
    if predicted == 0:
        return 1.0 if measured == 0 else None
    return measured / predicted


def _num(x):
    """JSON-safe number: ints stay ints, floats stay floats, NaN/inf are refused."""
    if isinstance(x, bool):
        raise ValueError(f"a check value must be a number, got {x!r}")
    if isinstance(x, int):
        return x
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"a check value must be finite, got {x!r}")
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def check_exact(name: str, predicted, measured, unit: str = "bytes") -> dict:
    predicted, measured = _num(predicted), _num(measured)
    return {"name": name, "predicted": predicted, "measured": measured,
            "ratio": _ratio(predicted, measured), "ok": measured == predicted,
            "unit": unit, "rule": "exact"}


def check_skipped(name: str, why: str, predicted=None, unit: str = "bytes") -> dict:
    """A check that could not run (``why``): it counts as no failure, and the table says
    ``skipped`` instead of a measurement (the prediction, when known, is kept)."""
    predicted = None if predicted is None else _num(predicted)
    return {"name": name, "predicted": predicted, "measured": None, "ratio": None, "ok": True,
            "unit": unit, "rule": "skipped", "skipped": why}


def check_within(name: str, predicted, measured, percent: float, unit: str = "bytes") -> dict:
    predicted, measured = _num(predicted), _num(measured)
    ratio = _ratio(predicted, measured)
    ok = ratio is not None and abs(ratio - 1) <= percent / 100
    return {"name": name, "predicted": predicted, "measured": measured, "ratio": ratio,
            "ok": bool(ok), "unit": unit, "rule": f"within {percent:g}%"}


def check_at_most(name: str, bound, measured, unit: str = "") -> dict:
    bound, measured = _num(bound), _num(measured)
    return {"name": name, "predicted": bound, "measured": measured,
            "ratio": _ratio(bound, measured), "ok": measured <= bound,
            "unit": unit, "rule": "at most"}


def all_ok(report: dict) -> bool:
    return bool(report["checks"]) and all(c["ok"] for c in report["checks"])


def write_report(report: dict, path) -> Path:
    path = Path(path)
    if path.parent != Path(""):
        path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False) + "\n", encoding="utf-8")
    return path


def read_report(path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _fmt(x, unit=""):
    if x is None:
        return "-"
    if isinstance(x, int) or (isinstance(x, float) and x.is_integer() and abs(x) < 1e15):
        return f"{int(x):,}"
    return f"{x:.3g}"


def format_checks(report: dict) -> str:
    """A plain-text table of the checks. Differences bounded by a tolerance are shown as
    ``<= bound`` when they pass, so that the table is the same on every machine (the exact
    size of a rounding difference depends on the CPU's vector units)."""
    rows = [("check", "predicted", "measured", "ratio", "ok")]
    for c in report["checks"]:
        unit = f" {c['unit']}" if c.get("unit") else ""
        if c["rule"] == "skipped":
            predicted = "-" if c["predicted"] is None else f"{_fmt(c['predicted'])}{unit}"
            rows.append((c["name"], predicted, "-", "-", "skipped"))
            continue
        if c["rule"] == "at most":
            predicted = f"<= {_fmt(c['predicted'])}{unit}"
            measured = f"<= {_fmt(c['predicted'])}{unit}" if c["ok"] else f"{_fmt(c['measured'])}{unit}"
            ratio = "<= 1" if c["ok"] else _fmt(c["ratio"])
        else:
            predicted = f"{_fmt(c['predicted'])}{unit}"
            measured = f"{_fmt(c['measured'])}{unit}"
            ratio = "-" if c["ratio"] is None else f"{c['ratio']:.4f}"
        rows.append((c["name"], predicted, measured, ratio, "yes" if c["ok"] else "NO"))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
