"""The labs' JSON report: configuration, measurements, and a list of checks.

Every check is ``{name, predicted, measured, ratio, ok}`` (the course's lab contract) plus
``unit`` and ``rule``, which say how ``ok`` was decided:

* ``"exact"``: ``measured == predicted`` (byte counts; replicas that must be bit-identical);
* ``"within X%"``: ``|measured / predicted - 1| <= X/100`` (memory with padding);
* ``"at most"``: ``measured <= predicted``, where ``predicted`` is a bound (a tolerance on
  the largest difference between two runs).

``ratio`` is ``measured / predicted``; when both are zero it is 1 (they agree), and when only
``predicted`` is zero it is ``None``.

Two renderings of the checks share one formatting of their cells (:func:`check_cells`): a plain
text table for a terminal (:func:`format_checks`) and an HTML table for a notebook or the book
(:func:`checks_html`), with the run's log folded under it (:func:`run_html`).
"""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

from solutions._format import plural

__all__ = ["check_exact", "check_skipped", "check_within", "check_factor", "check_at_most", "write_report", "read_report",
           "check_cells", "format_checks", "checks_html", "run_html", "table_html", "table_text", "all_ok"]


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


def check_factor(name: str, predicted, measured, factor: float, unit: str = "") -> dict:
    """Measured within a ``factor`` of predicted, either way: a prediction too fast and one
    too slow by the same factor are judged alike (the ratio shown is measured / predicted)."""
    predicted, measured = _num(predicted), _num(measured)
    ratio = _ratio(predicted, measured)
    ok = ratio is not None and ratio > 0 and max(ratio, 1 / ratio) <= factor
    return {"name": name, "predicted": predicted, "measured": measured, "ratio": ratio,
            "ok": bool(ok), "unit": unit, "rule": f"within a factor of {factor:g} either way"}


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


def check_cells(c: dict) -> tuple[str, str, str, str, str]:
    """``(name, predicted, measured, ratio, verdict)`` of one check, as the tables show them.
    A difference bounded by a tolerance shows as ``<= bound`` when it passes, so that a table
    is the same on every machine (the exact size of a rounding difference depends on the CPU's
    vector units); the verdict is ``pass``, ``FAIL`` or ``skipped``."""
    unit = f" {c['unit']}" if c.get("unit") else ""
    if c["rule"] == "skipped":
        predicted = "-" if c["predicted"] is None else f"{_fmt(c['predicted'])}{unit}"
        return c["name"], predicted, "-", "-", "skipped"
    if c["rule"] == "at most":
        predicted = f"<= {_fmt(c['predicted'])}{unit}"
        measured = f"<= {_fmt(c['predicted'])}{unit}" if c["ok"] else f"{_fmt(c['measured'])}{unit}"
        ratio = "<= 1" if c["ok"] else _fmt(c["ratio"])
    else:
        predicted = f"{_fmt(c['predicted'])}{unit}"
        measured = f"{_fmt(c['measured'])}{unit}"
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.4f}"
    return c["name"], predicted, measured, ratio, "pass" if c["ok"] else "FAIL"


def format_checks(report: dict) -> str:
    """A plain-text table of the checks (what a lab prints in a terminal)."""
    rows = [("check", "predicted", "measured", "ratio", "ok")]
    for c in report["checks"]:
        *cells, verdict = check_cells(c)
        rows.append((*cells, {"pass": "yes", "FAIL": "NO"}.get(verdict, verdict)))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(r, widths)))
             for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


#: Column headings of the HTML table (also the labels a phone shows beside each value).
HTML_COLUMNS = ("check", "predicted", "measured", "ratio", "verdict")


def checks_html(report: dict) -> str:
    """The checks as an HTML table (class ``lab-checks``), one row per check: the prediction, the
    measurement, their ratio and the verdict, with the rule that decided it (exact, within X%, at
    most) as the verdict's tooltip. Styled by the book's ``course.css``; plain HTML elsewhere."""
    e = html.escape
    head = "".join(f'<th scope="col">{e(h)}</th>' for h in HTML_COLUMNS)
    rows = []
    for c in report["checks"]:
        name, predicted, measured, ratio, verdict = (x.replace("<= ", "\u2264 ") for x in check_cells(c))
        rule = c.get("skipped") or c["rule"]
        rows.append(
            f'<tr><th scope="row" data-label="check">{e(name)}</th>'
            + "".join(f'<td data-label="{label}">{e(value)}</td>'
                      for label, value in zip(HTML_COLUMNS[1:4], (predicted, measured, ratio)))
            + f'<td data-label="verdict" class="verdict-{verdict.lower()}" title="{e(rule)}">{e(verdict)}</td></tr>')
    passed = sum(c["ok"] for c in report["checks"] if c["rule"] != "skipped")
    counted = sum(c["rule"] != "skipped" for c in report["checks"])
    skipped = len(report["checks"]) - counted
    where = ", ".join(filter(None, (
        plural(report['world_size'], 'rank') if "world_size" in report else "",
        f"backend {report['backend']}" if report.get("backend") else "",
        report.get("device") or "")))
    caption = (f"{passed} of {counted} checks pass" + (f", {skipped} skipped" if skipped else "")
               + (f" ({where})" if where else ""))
    return (f'<table class="lab-checks"><caption>{e(caption)}</caption><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table>')


def run_html(report: dict, log: str, summary: str = "The lab's full output") -> str:
    """The checks table, then the run's printed log folded under ``summary`` (a ``<details>``
    that a reader opens; its lines wrap instead of widening the page)."""
    lines = log.rstrip("\n").count("\n") + 1 if log.strip() else 0
    fold = (f'<details class="lab-log"><summary>{html.escape(summary)} ({lines} lines)</summary>'
            f'<pre>{html.escape(log.rstrip())}</pre></details>') if lines else ""
    return f'<div class="lab-run">{checks_html(report)}{fold}</div>'


def table_text(header, rows) -> str:
    """Rows of cells as aligned plain text: the first column left-aligned, the others right."""
    cells = [[str(x) for x in header]] + [[str(x) for x in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(r, widths)))
                     for r in cells)


def table_html(header, rows, caption: str | None = None) -> str:
    """Rows of cells as an HTML table (class ``lab-table``): the first cell of each row is its
    heading, the others are values (right-aligned by the book's style)."""
    e = html.escape
    head = "".join(f'<th scope="col">{e(str(h))}</th>' for h in header)
    body = "".join(f'<tr><th scope="row">{e(str(row[0]))}</th>' + "".join(f"<td>{e(str(x))}</td>" for x in row[1:])
                   + "</tr>" for row in rows)
    cap = f"<caption>{e(caption)}</caption>" if caption else ""
    return f'<table class="lab-table">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
