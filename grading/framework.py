"""Probes, comparisons and messages shared by the exercise checks.

A *probe* is one call of an exercise function: its arguments, the expected outcome (from
:mod:`grading.independent`, never from ``solutions/``), and the outcome of every known
wrong implementation (:mod:`grading.mistakes`) on the same arguments. Public probes
are stored in ``public_expected.json`` (so the student release needs no reference code);
hidden probes are computed at grading time.

An *outcome* is a small dict: ``{"value": plain}`` or ``{"raises": "ValueError"}``; for a
student's call also ``{"error": kind, "message": ...}`` when the call could not be made.
Comparing a student's outcome with a mistake's outcome is how a check recognises a known
wrong answer and explains it.
"""
from __future__ import annotations

import contextvars
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from .core import Check, Result, SubmissionError, describe_exception
from .explain import WHY

PUBLIC_EXPECTED_PATH = Path(__file__).with_name("public_expected.json")

#: Relative tolerance for "the same number". The exercises are closed-form, so a correct
#: answer agrees to rounding error; a wrong constant or unit is off by far more.
REL_TOL = 1e-9
#: Looser tolerance for quantities derived from differences of two answers.
DERIVED_REL_TOL = 1e-6
#: A property check (monotone, proportional, independent of the degrees...) pays only a
#: function whose values are also right to within this relative difference: a constant or
#: an echo of the arguments has every property and earns nothing, while a slip in a
#: constant (0.1 %) keeps the points of the properties it really has.
PROPERTY_GATE_REL = 0.05


@dataclass(frozen=True)
class Probe:
    args: list
    expected: dict
    mistakes: Mapping  # mistake id -> outcome


# --------------------------------------------------------------------------- outcomes

def attempt(call: Callable[..., Any], args: Sequence) -> dict:
    """Call the submission once and record what happened; never raises."""
    try:
        return {"value": call(*args)}
    except SubmissionError as err:
        if err.kind == "raised":
            return {"raises": err.exception_type or "Exception", "message": err.message}
        return {"error": err.kind, "message": err.message}
    except Exception as exc:  # a broken call wrapper must not crash the grader
        return {"error": "crashed", "message": describe_exception(exc)}


def is_number(x) -> bool:
    return type(x) is float and math.isfinite(x)


def same(a, b, rel: float = REL_TOL) -> bool:
    """Plain values equal up to ``rel``; NaN and infinities are never equal to anything."""
    a = float(a) if isinstance(a, float) else a  # numpy float64 from the grader's own arithmetic
    b = float(b) if isinstance(b, float) else b
    if type(a) is float and type(b) is float:
        if not (math.isfinite(a) and math.isfinite(b)):
            return False
        return math.isclose(a, b, rel_tol=rel, abs_tol=1e-300)
    if type(a) is list and type(b) is list:
        return len(a) == len(b) and all(same(x, y, rel) for x, y in zip(a, b))
    if type(a) is str and type(b) is str:
        return a == b
    return False


def same_outcome(a: dict, b: dict, rel: float = REL_TOL) -> bool:
    if "value" in a and "value" in b:
        return same(a["value"], b["value"], rel)
    if "raises" in a and "raises" in b:
        return a["raises"] == b["raises"]
    return False


def strip_message(outcome: dict) -> dict:
    return {k: v for k, v in outcome.items() if k in ("value", "raises")}


# --------------------------------------------------------------------------- formatting

def fmt_number(x: float, digits: int = 6) -> str:
    if type(x) is not float:
        return repr(x)
    if not math.isfinite(x):
        return str(x)
    if x == int(x) and abs(x) < 1e5:
        return str(int(x))
    return f"{x:.{digits}g}"


def fmt_value(value, digits: int = 6) -> str:
    if type(value) is float:
        return fmt_number(value, digits)
    if type(value) is list:
        if len(value) > 6:
            return f"a list of {len(value)} values"
        return "[" + ", ".join(fmt_value(v, digits) for v in value) + "]"
    if type(value) is str:
        return repr(value)
    return repr(value)


def fmt_pair(got, expected) -> tuple[str, str]:
    """Format two numbers with enough digits that they visibly differ."""
    for digits in (6, 9, 12, 17):
        g, e = fmt_value(got, digits), fmt_value(expected, digits)
        if g != e:
            return g, e
    return fmt_value(got, 17), fmt_value(expected, 17)


def fmt_arg(a) -> str:
    if type(a) is list:
        if len(a) <= 6:
            return "np.array([" + ", ".join(fmt_number(float(x)) for x in a) + "])"
        return f"np.array([{fmt_number(float(a[0]))}, ..., {fmt_number(float(a[-1]))}]) ({len(a)} values)"
    if type(a) is int:
        return str(a)
    if type(a) is float:
        return fmt_number(a)
    return repr(a)


def fmt_call(function: str, args: Sequence) -> str:
    return f"{function}(" + ", ".join(fmt_arg(a) for a in args) + ")"


def fmt_outcome(outcome: dict) -> str:
    if "value" in outcome:
        return "returned " + fmt_value(outcome["value"])
    if "raises" in outcome:
        msg = outcome.get("message")
        return msg if msg else f"raised {outcome['raises']}"
    return outcome.get("message", "failed")


# --------------------------------------------------------------------------- shapes

def unwrap_single(value):
    """``[x]`` -> ``x`` and ``[[a], [b]]`` -> ``[a, b]``: what a student meant when numpy
    handed back 1-element arrays; None when the value is not of that shape."""
    if type(value) is list and len(value) == 1 and type(value[0]) is float:
        return value[0]
    if type(value) is list and value and all(type(v) is list and len(v) == 1
                                             and type(v[0]) is float for v in value):
        return [v[0] for v in value]
    return None


def shape_problem(where: str, got, expected) -> str | None:
    """A message for a value of the wrong type or shape, naming that cause (and whether
    the numbers inside are right), or None when the shape is fine."""
    inner = unwrap_single(got)
    if type(expected) is float and type(got) is list:
        if inner is not None:
            right = "the value inside is right" if same(inner, expected) else \
                f"the value inside, {fmt_value(inner)}, is not right either (expected {fmt_value(expected)})"
            return (f"{where} returned a 1-element array [{fmt_value(inner)}]; return a single "
                    f"number (e.g. `float(x)` or `x.item()`): {right}.")
        return (f"{where} returned {fmt_value(got)} ({len(got)} values); expected a single "
                f"number, {fmt_value(expected)}.")
    if type(expected) is list and type(got) is list and inner is not None \
            and type(inner) is list and len(inner) == len(expected):
        right = "the values inside are right" if same(inner, expected) else \
            "the values inside are not right either"
        return (f"{where} returned {len(got)} 1-element arrays; return {len(expected)} plain "
                f"numbers (e.g. `float(N)`): {right}.")
    if type(expected) is list and type(got) is not list:
        return f"{where} returned {fmt_value(got)}; expected {len(expected)} numbers, {fmt_value(expected)}."
    if type(expected) is list and type(got) is list and len(got) != len(expected):
        return (f"{where} returned {len(got)} values; expected {len(expected)}: "
                f"{fmt_value(expected)}.")
    if type(got) is str:
        return f"{where} returned the text {got!r}; return a number, not a string."
    return None


# --------------------------------------------------------------------------- results

def in_words(expected) -> str:
    """What a check expects, in plain words: "a single number", "a tuple of 4 numbers"."""
    if type(expected) is float:
        return "a single number"
    if type(expected) is list:
        return f"a tuple of {len(expected)} numbers"
    return "a number"


def call_failure(function: str, args: Sequence, outcome: dict, expected=None) -> Result | None:
    """A Result for a call that could not produce a value, or None when it returned one.
    ``expected``: the right value, to say in plain words what was asked for."""
    if "value" in outcome:
        return None
    where = fmt_call(function, args)
    if outcome.get("raises") == "NotImplementedError":
        return Result(False, f"Not implemented yet: `{function}` raises NotImplementedError.",
                      not_implemented=True)
    if "raises" in outcome:
        return Result(False, f"{where} {fmt_outcome(outcome)}.")
    kind = outcome.get("error")
    if kind == "missing":
        return Result(False, outcome.get("message", f"no function `{function}` found") + ".")
    if kind == "timeout":
        return Result(False, f"{where} took too long: {outcome.get('message', 'timed out')}.")
    if kind == "not_plain":
        text = outcome.get('message', 'returned something that is not a number')
        text = text.replace("a builtins.", "a ")  # "a builtins.dict": Python's name for a dict
        text = text.replace("returned a NoneType", "returned None")
        pattern(function, "returned_none" if "returned None" in text else "wrong_type")
        if expected is not None and ", expected " in text:
            head, _, tail = text.partition(", expected ")
            hint = tail[tail.index(" ("):] if " (" in tail else ""  # "(did you forget `return`?)"
            text = f"{head}; expected {in_words(expected)}{hint}"
        return Result(False, f"{where} {text}.")
    return Result(False, f"{where} failed: {outcome.get('message', 'unknown error')}.")


class Why(str):
    """A known mistake's explanation (a value of WHY) that knows the mistake's id."""

    mistake: str = ""


def why_of(mistake_id: str) -> Why | None:
    text = WHY.get(mistake_id)
    if text is None:
        return None
    why = Why(text)
    why.mistake = mistake_id
    return why


def pattern(function: str, kind: str) -> None:
    """Note that the running check recognised a wrong answer by its form
    (:data:`grading.explain.PATTERNS`): its Result's ``mistake`` unless a known
    mistake's "Why:" is given."""
    seen = _SEEN.get()
    if seen is not None:
        from .core import EXERCISES

        exercise = next((e.id for e in EXERCISES if e.function == function), "")
        seen["pattern"] = kind if kind.startswith("ex") else f"{exercise}_{kind}"


def keep_answer() -> None:
    """Make the last answer seen the one a passing Result carries (the first probe that
    passed only under the student's own loss, which autograde.grade compares)."""
    seen = _SEEN.get()
    if seen is not None and not seen.get("kept"):
        seen["kept"] = seen["got"]


#: What one running check has seen: the last answer of the checked function and the last
#: diagnosis given (make_check attaches both to a failed Result).
_SEEN: contextvars.ContextVar = contextvars.ContextVar("grading_seen", default=None)


def recognise(student: dict, probe: Probe, rel: float = REL_TOL) -> str | None:
    """The explanation of a known mistake that reproduces the student's outcome, if any."""
    if same_outcome(student, probe.expected, rel):
        return None
    for mistake_id, outcome in probe.mistakes.items():
        if same_outcome(student, outcome, rel) and not same_outcome(outcome, probe.expected, rel):
            return why_of(mistake_id)
    return None


def recognise_derived(student_q, probes: Sequence[Probe], derive, expected_q,
                      rel: float = DERIVED_REL_TOL) -> str | None:
    """Like :func:`recognise`, for a quantity ``derive(values)`` computed from several
    probes' values (a factor, a slope, a chosen ratio)."""
    for mistake_id in mistake_ids(probes):
        values = mistaken_values(probes, mistake_id)
        if values is None:
            continue
        try:
            q = derive(values)
        except Exception:
            continue
        if q is not None and same(q, student_q, rel) and not same(q, expected_q, rel):
            return why_of(mistake_id)
    return None


def with_why(text: str, why: str | None, hint: str | None = None) -> str:
    """``text`` with the diagnosis ``why`` (or else ``hint``) under it. The last diagnosis
    a check gives is the one its Result carries as ``mistake`` (see :func:`make_check`)."""
    seen = _SEEN.get()
    if seen is not None:
        seen["why"] = why if why else None
    if why:
        return f"{text}\nWhy: {why}"
    if hint:
        return f"{text}\nHint: {hint}"
    return text


def value_mismatch(function: str, probe: Probe, student: dict, hint: str | None = None) -> Result:
    got = student.get("value")
    expected = probe.expected.get("value")
    where = fmt_call(function, probe.args)
    if "raises" in probe.expected:
        text = f"{where} {fmt_outcome(student)}, but it should raise {probe.expected['raises']}."
    elif shape_problem(where, got, expected) is not None:
        # The cause is the type or shape: say so, without the algorithm's hint.
        pattern(function, "wrong_type" if type(got) is str else "wrong_shape")
        return Result(False, shape_problem(where, got, expected))
    else:
        g, e = fmt_pair(got, expected)
        text = f"{where} returned {g}; expected {e}."
        if type(got) is float and is_number(got) and is_number(expected) and expected != 0:
            rel_err = abs(got - expected) / abs(expected)
            if rel_err < 1e-3:
                text += f" Close: a relative difference of {rel_err:.1e}."
                if recognise(student, probe) is None:
                    text += " Check every constant, and do not round."
                    pattern(function, "almost_right")
            elif got != 0:
                text += f" That is {got / expected:.4g} times the expected value."
    return Result(False, with_why(text, recognise(student, probe), hint))


def values_match(function: str, probes: Sequence[Probe], call, hint: str | None = None,
                 ok_text: str | None = None) -> Result:
    """Every probe's outcome equals the reference's (values up to REL_TOL, or the same exception)."""
    for probe in probes:
        student = attempt(call, probe.args)
        if "raises" in probe.expected and "raises" in student:
            if student["raises"] == probe.expected["raises"]:
                continue
            if student["raises"] != "NotImplementedError":
                text = (f"{fmt_call(function, probe.args)} {fmt_outcome(student)}; "
                        f"it should raise {probe.expected['raises']}.")
                return Result(False, with_why(text, recognise(student, probe), hint))
        failed = call_failure(function, probe.args, student, probe.expected.get("value"))
        if failed is not None and "raises" not in probe.expected:
            return Result(False, with_why(failed.feedback, recognise(student, probe)),
                          failed.not_implemented)
        if failed is not None:  # NotImplementedError, or a call that never ran
            return failed
        if not same_outcome(student, probe.expected):
            return value_mismatch(function, probe, student, hint)
    if ok_text:
        return Result(True, ok_text)
    if len(probes) == 1 and "value" in probes[0].expected:
        return Result(True, f"{fmt_call(function, probes[0].args)} returned "
                            f"{fmt_value(probes[0].expected['value'])}, as expected.")
    return Result(True, f"All {len(probes)} calls of `{function}` gave the expected answers.")


# --------------------------------------------------------------------------- probe sources

_PUBLIC_CACHE: dict | None = None


def load_public_expected(path: Path = PUBLIC_EXPECTED_PATH) -> dict:
    global _PUBLIC_CACHE
    if path != PUBLIC_EXPECTED_PATH:
        return json.loads(path.read_text(encoding="utf-8"))
    if _PUBLIC_CACHE is None:
        _PUBLIC_CACHE = json.loads(path.read_text(encoding="utf-8"))
    return _PUBLIC_CACHE


def public_probes(check_name: str, args_list: Sequence[Sequence]) -> list[Probe]:
    """The stored probes of a public check; fails loudly if the file is stale."""
    data = load_public_expected()["checks"].get(check_name)
    if data is None or [p["args"] for p in data] != [list(a) for a in args_list]:
        raise RuntimeError(
            f"grading/public_expected.json is stale for check {check_name!r}: "
            "regenerate it with `python -m grading.public_expected`")
    return [Probe(p["args"], p["expected"], p.get("mistakes", {})) for p in data]


class LazyOutcomes(Mapping):
    """The known mistakes' outcomes of a probe, computed on first use: only a wrong answer
    needs them (to be recognised), and most of a grading run's time would go into them."""

    def __init__(self, compute: Callable[[], dict]):
        self._compute, self._data = compute, None

    def _outcomes(self) -> dict:
        if self._data is None:
            self._data = self._compute()
        return self._data

    def __getitem__(self, key):
        return self._outcomes()[key]

    def __iter__(self):
        return iter(self._outcomes())

    def __len__(self):
        return len(self._outcomes())


def reference_probes(function: str, args_list: Iterable[Sequence]) -> list[Probe]:
    """Probes computed now: the expected outcome from the independent implementation, the
    known mistakes' outcomes when first needed."""
    from .public_expected import expected_outcome, mistake_outcomes  # instructor side only

    return [Probe(list(a), expected_outcome(function, list(a)),
                  LazyOutcomes(lambda a=list(a): mistake_outcomes(function, a)))
            for a in args_list]


# --------------------------------------------------------------------------- building checks

#: Public checks' arguments by check name, filled as the checks are built; read by
#: public_expected.py to regenerate the JSON.
PUBLIC_SPECS: dict[str, tuple[str, list]] = {}


def make_check(exercise: str, name: str, points: float, function: str,
               args_list: Sequence[Sequence], judge: Callable[[Any, list[Probe]], Result],
               hidden: bool = False, description: str = "") -> Check:
    """A Check whose probes come from the JSON (public) or from the reference (hidden),
    loaded on first use. ``judge(call, probes)`` decides; anything it raises becomes a
    failed Result. Loading the probes touches no student code, so a failure there is the
    grader's own (a missing ``public_expected.json``, a reference that raises on a hidden
    input): it is raised, and the caller reports a grader error rather than a zero.
    """
    args_list = [list(a) for a in args_list]
    if not hidden:
        PUBLIC_SPECS[name] = (function, args_list)
    cached: list[list[Probe]] = []

    def run(call) -> Result:
        if not cached:
            cached.append(reference_probes(function, args_list) if hidden
                          else public_probes(name, args_list))
        seen = {"got": None, "why": None, "pattern": None}
        token = _SEEN.set(seen)
        try:
            result = judge(_watched(call, function, seen), cached[0])
        except Exception as exc:  # a check must never raise
            return Result(False, f"The grader could not run this test ({describe_exception(exc)}). "
                                 "Please tell your instructor.")
        finally:
            _SEEN.reset(token)
        if result.not_implemented:
            return result
        if result.passed:
            return replace(result, got=seen.get("kept") or seen["got"])
        why = seen["why"]  # the diagnosis, where the feedback still gives it
        mistake = why.mistake if isinstance(why, Why) and why in result.feedback else seen["pattern"]
        return replace(result, got=seen["got"], mistake=mistake)

    return Check(exercise=exercise, name=name, points=points, hidden=hidden,
                 function=function, run=run, description=description)


def _watched(call, function: str, seen: dict):
    """``call``, noting in ``seen["got"]`` each answer as ``"f(args) -> value"`` (or what
    went wrong); the submission's other functions (``.other``) are not noted."""
    def watched(*args):
        try:
            value = call(*args)
        except SubmissionError as err:
            kind = f"raised {err.exception_type}" if err.kind == "raised" else \
                err.message.replace("a builtins.", "a ").replace("a NoneType", "None").split(",")[0] \
                if err.kind == "not_plain" \
                else err.kind
            seen["got"] = f"{fmt_call(function, args)} -> {kind}"
            raise
        seen["got"] = f"{fmt_call(function, args)} -> {fmt_value(value)}"
        return value

    if hasattr(call, "other"):
        watched.other = call.other
    return watched


def collect(call, function: str, probes: Sequence[Probe], want: str = "number"):
    """Call every probe; return (values, None), or (None, Result) for the first failure.

    ``want`` is "number" (a finite float), "positive" (a finite float > 0), "numbers" (a
    list of finite floats) or "any".
    """
    values = []
    for probe in probes:
        student = attempt(call, probe.args)
        failed = call_failure(function, probe.args, student, probe.expected.get("value"))
        if failed is not None:
            return None, Result(False, with_why(failed.feedback, recognise(student, probe)),
                                failed.not_implemented)
        value = student["value"]
        where = fmt_call(function, probe.args)
        expected = probe.expected.get("value")
        if want in ("number", "positive") and type(value) is not float:
            text = shape_problem(where, value, expected) if type(expected) is float else None
            pattern(function, "wrong_type" if type(value) is str else "wrong_shape")
            return None, Result(False, text or f"{where} returned {fmt_value(value)}; expected "
                                               "a single finite number.")
        if want == "positive" and not (is_number(value) and value > 0):
            return None, Result(False, with_why(
                f"{where} returned {fmt_value(value)}; expected a positive finite number.",
                recognise(student, probe)))
        if want == "number" and not is_number(value):
            return None, Result(False, with_why(
                f"{where} returned {fmt_value(value)}; expected a single finite number.",
                recognise(student, probe)))
        if want == "numbers" and not (type(value) is list and all(is_number(v) for v in value)):
            text = shape_problem(where, value, expected) if type(expected) is list else None
            pattern(function, "wrong_type" if type(value) is str else "wrong_shape")
            return None, Result(False, text or f"{where} returned {fmt_value(value)}; expected "
                                               "a list (or tuple, or array) of finite numbers.")
        values.append(value)
    return values, None


def gate(function: str, probes: Sequence[Probe], values: Sequence, what: str,
         factors: Sequence[float] = (1.0,), alternatives: Sequence | None = None) -> Result | None:
    """None when every value is within :data:`PROPERTY_GATE_REL` of the expected one (times
    one of ``factors``, a unit slip charged to another check; or of ``alternatives[i]``,
    e.g. the answer under the student's own Exercise 1); else the failed Result of a
    property check that pays only right values."""
    def near(a, b):
        if type(a) is list and type(b) is list:
            return len(a) == len(b) and all(near(x, y) for x, y in zip(a, b))
        return type(a) is float and type(b) is float and b != 0 and \
            any(abs(a - f * b) <= PROPERTY_GATE_REL * abs(f * b) for f in factors)

    for i, (probe, value) in enumerate(zip(probes, values)):
        expected = probe.expected.get("value")
        if expected is None or near(value, expected):
            continue
        if alternatives is not None and alternatives[i] is not None and near(value, alternatives[i]):
            continue
        got, exp = fmt_pair(value, expected)
        return Result(False, with_why(
            f"{fmt_call(function, probe.args)} returned {got}; expected {exp}. {what}: that holds, "
            "but this test pays only when the values are right too (within "
            f"{PROPERTY_GATE_REL:.0%}).", recognise({"value": value}, probe)))
    return None


def other_call(call, function: str):
    """The ``call`` of another function of the same submission, or None where the grader
    did not provide one (see :func:`grading.grade_callable` and autograde.grade)."""
    get = getattr(call, "other", None)
    if get is None:
        return None
    try:
        return get(function)
    except Exception:
        return None


def mistaken_values(probes: Sequence[Probe], mistake_id: str):
    """A mistake's values on every probe, or None if it raised on any."""
    out = []
    for p in probes:
        o = p.mistakes.get(mistake_id)
        if o is None or "value" not in o:
            return None
        out.append(o["value"])
    return out


def mistake_ids(probes: Sequence[Probe]) -> list[str]:
    ids: list[str] = []
    for p in probes:
        ids += [m for m in p.mistakes if m not in ids]
    return ids
