"""Plain data: the only values that cross from a submission to the grader.

A student's function may return a Python float, an int, a numpy scalar, a numpy array, or a
tuple/list of those. ``to_plain`` turns that into JSON-able data (float, list, str) and refuses
anything else, including float subclasses (an "always equal" float is a classic exploit) and
objects that merely implement ``__float__``. The grader compares only plain floats that it
parsed itself, so no object of the student's can take part in a comparison.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

MAX_ITEMS = 100_000  # a result larger than this is not an answer to any exercise


class NotPlainData(TypeError):
    """Raised when a returned value is not plain numeric data."""


def _describe(value) -> str:
    return type(value).__module__ + "." + type(value).__qualname__


def to_plain(value, _depth: int = 0):
    """Convert a returned value into floats / nested lists / strings, strictly."""
    if _depth > 8:
        raise NotPlainData("result is nested too deeply")
    kind = type(value)
    if kind is bool or kind is np.bool_:
        raise NotPlainData("returned a boolean, expected a number")
    if kind is float or kind is int:
        return float(value)
    if kind is str:
        return value
    if isinstance(value, np.generic) and kind.__module__ == "numpy":
        if isinstance(value, (np.floating, np.integer)):
            return float(value)
        raise NotPlainData(f"returned a numpy {kind.__name__}, expected a number")
    if kind is np.ndarray:
        if value.dtype.kind not in "fiu":
            raise NotPlainData(f"returned an array of dtype {value.dtype}, expected numbers")
        if value.size > MAX_ITEMS:
            raise NotPlainData(f"returned an array of {value.size} items")
        return value.astype(float).tolist() if value.ndim else float(value)
    if kind is tuple or kind is list:
        if len(value) > MAX_ITEMS:
            raise NotPlainData(f"returned a sequence of {len(value)} items")
        return [to_plain(item, _depth + 1) for item in value]
    if isinstance(value, numbers.Number):
        raise NotPlainData(f"returned a {_describe(value)}, expected a plain float")
    raise NotPlainData(f"returned a {_describe(value)}, expected a number")


def is_finite_number(value) -> bool:
    return type(value) is float and math.isfinite(value)


class SubmissionError(Exception):
    """The submission could not answer a call. The message is shown to the student.

    ``kind`` says why: ``"missing"`` (no such function), ``"raised"`` (the function raised;
    ``exception_type`` holds the exception's class name, e.g. ``"ValueError"``),
    ``"timeout"``, ``"not_plain"`` (it returned something that is not a number or a list of
    numbers) or ``"crashed"`` (the sandbox itself failed).
    """

    KINDS = ("missing", "raised", "timeout", "not_plain", "crashed")

    def __init__(self, message: str, *, kind: str = "raised", exception_type: str | None = None):
        super().__init__(message)
        self.message = message
        self.kind = kind if kind in self.KINDS else "crashed"
        self.exception_type = exception_type

    @property
    def not_implemented(self) -> bool:
        return self.kind == "raised" and self.exception_type == "NotImplementedError"
