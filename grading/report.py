"""A human-readable grading report, the same text for the notebook's self-check and for the
autograder's console output."""
from __future__ import annotations

from typing import Sequence

from .core import EXERCISES, Check, Part, Result


def fmt_points(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def _indent(text: str, prefix: str) -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def _short(title: str) -> str:
    """ "Exercise 1 (easy): Chinchilla ..." -> "Exercise 1" """
    return title.split(":")[0].split(" (")[0]


def hidden_not_run(results: Sequence[tuple[Check, Result]]) -> list[dict]:
    """The hidden checks of the graded exercises that are not among ``results`` (the
    self-check, the student release, ``--public-only``), from ``public_expected.json``."""
    from .framework import load_public_expected

    exercises = {c.exercise for c, _ in results}
    ran = {c.name for c, _ in results}
    try:
        hidden = load_public_expected().get("hidden", {})
    except (OSError, ValueError):
        return []
    return [dict(h, exercise=e) for e in sorted(exercises) for h in hidden.get(e, [])
            if h["name"] not in ran]


def _why_once(feedback: str, test: str, shown: dict) -> str:
    """``feedback`` with a "Why:" line already given under an earlier test replaced by a
    pointer to it (one explanation of one mistake, however many tests it fails)."""
    lines = []
    for line in feedback.splitlines():
        if line.startswith("Why: ") and shown.setdefault(line, test) != test:
            line = f"Why: the same mistake as under {shown[line]} above."
        lines.append(line)
    return "\n".join(lines)


def score(results: Sequence[tuple[Check, Result]]) -> tuple[float, float]:
    earned = sum(c.points for c, r in results if r.passed)
    possible = sum(c.points for c, _ in results)
    return earned, possible


def format_report(results: Sequence[tuple[Check, Result]], first_problem: str | None = None,
                  parts: Sequence[Part] = EXERCISES) -> str:
    """Per part (the exercises, or an assignment: ``parts``): points, a line per test (✓ or
    ✗), feedback under each failure; then the total and what to fix first."""
    lines: list[str] = []
    by_exercise: dict[str, list] = {}
    for check, result in results:
        by_exercise.setdefault(check.exercise, []).append((check, result))
    order = [p for p in parts if p.id in by_exercise]
    order += [Part(k, k, k, 0.0) for k in by_exercise if k not in {p.id for p in parts}]
    not_implemented: list[str] = []
    why_shown: dict = {}  # each "Why:" paragraph in full once, under the first test that has it
    fix_first: str | None = None  # from the earliest exercise with a failure
    fix_first_in, fix_first_why = None, False  # its exercise; whether it explains the mistake
    for exercise in order:
        group = by_exercise[exercise.id]
        earned, possible = score(group)
        lines.append(f"{exercise.title}: {fmt_points(earned)} / {fmt_points(possible)} points")
        if all(r.not_implemented for _, r in group):
            lines.append("  ✗ not implemented yet: "
                         f"`{group[0][0].function}` still raises NotImplementedError")
            not_implemented.append(_short(exercise.title))
            if fix_first is None:
                fix_first = f"implement {_short(exercise.title)} (`{group[0][0].function}`)."
            lines.append("")
            continue
        if len(group) > 1 and all(not r.passed for _, r in group) and \
                len({r.feedback for _, r in group}) == 1:
            # One cause for every test (a missing function, a crash on import): say it once.
            lines.append(f"  ✗ all {len(group)} tests:")
            lines.append(_indent(group[0][1].feedback, "      "))
            if fix_first is None:
                fix_first = f"{_short(exercise.title)}: {group[0][1].feedback.splitlines()[0]}"
            lines.append("")
            continue
        width = max(len(c.name) for c, _ in group)
        for check, result in group:
            mark = "✓" if result.passed else "✗"
            tag = " (hidden)" if check.hidden else ""
            got = check.points if result.passed else 0
            lines.append(f"  {mark} {check.name:<{width}}  {fmt_points(got)}/{fmt_points(check.points)}{tag}")
            if not result.passed:
                lines.append(_indent(_why_once(result.feedback, check.name, why_shown), "      "))
                feedback = result.feedback.splitlines() or [""]
                why = [line for line in feedback[1:] if line.startswith("Why:")]
                # The first failure of the first failing exercise, unless a later test of that
                # exercise recognised the mistake (a "Why:"): that one says what to change.
                if fix_first is None or (fix_first_in == exercise.id and why and not fix_first_why):
                    fix_first = f"{_short(exercise.title)}, {check.name}: " + \
                        "\n  ".join(feedback[:1] + why)
                    fix_first_in, fix_first_why = exercise.id, bool(why)
        lines.append("")
    earned, possible = score(results)
    hidden = hidden_not_run(results)
    if hidden:
        points = sum(h["points"] for h in hidden)
        lines.append(f"Total: {fmt_points(earned)} / {fmt_points(possible)} public points; "
                     f"{len(hidden)} hidden test{'s' if len(hidden) != 1 else ''} worth {fmt_points(points)} more points run "
                     "when your work is graded:")
        lines += [f"  ? {h['name']}  {fmt_points(h['points'])} points (hidden): {h['description']}"
                  for h in hidden]
    else:
        lines.append(f"Total: {fmt_points(earned)} / {fmt_points(possible)} points")
    if fix_first is not None and first_problem:
        fix_first = first_problem  # the cause (a cell that did not run), not its consequences
    if fix_first is not None:
        lines.append(f"Fix first: {fix_first}")
    if not_implemented:
        lines.append("Not implemented yet: " + ", ".join(not_implemented) + ".")
    if fix_first is None and results:
        lines.append("All public tests passed; the hidden tests use other inputs."
                     if hidden else "All tests passed.")
    return "\n".join(lines)
