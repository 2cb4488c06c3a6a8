"""Input checks shared by the reference solutions.

Every public function in :mod:`solutions` validates its arguments with these
helpers, so that bad input fails loudly with a ``ValueError`` that names the
argument and says what is allowed, instead of returning a silently wrong
number (a negative memory, a NaN loss, a fractional GPU count).

Scalars come back as Python ``float``/``int``; arrays come back as numpy
arrays of ``float64``/``int64``, so callers can do arithmetic without worrying
about integer overflow or object dtypes.
"""

from __future__ import annotations

import argparse
import math
from typing import Iterable

import numpy as np

from . import _format

__all__ = [
    "positive",
    "positive_integer",
    "nonnegative_integer",
    "one_of",
    "divides",
    "ratios_array",
    "is_scalar",
    "terse_argparse_errors",
    "count_with_suffix",
]


_FAST_SCALARS = (float, int, np.float64, np.float32)


def _show(value, limit: int = 80) -> str:
    """repr of ``value``, shortened so that error messages stay readable."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_scalar(value) -> bool:
    """True for Python/numpy scalars and 0-d arrays."""
    return np.ndim(value) == 0


def _reject_non_numeric(name: str, value, what: str):
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be {what}, got a bool ({_show(value)})")
    if isinstance(value, (str, bytes)) or value is None:
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic objects
        raise ValueError(f"{name} must be {what}, got {_show(value)}") from exc
    if arr.dtype == bool:
        raise ValueError(f"{name} must be {what}, got booleans ({_show(value)})")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    if arr.size == 0:
        raise ValueError(f"{name} must be {what}, got an empty array")
    return arr


def positive(name: str, value):
    """Return ``value`` as a float (or float64 array) after checking it is
    finite and strictly positive everywhere.

    >>> positive("N", 7e9)
    7000000000.0
    """
    what = "a positive finite number (or array of them)"
    # Fast path for plain Python and numpy scalars (bool is a subclass of int: excluded).
    if type(value) in _FAST_SCALARS:
        try:
            ok = math.isfinite(value) and value > 0
        except OverflowError:  # an int too large for a float
            ok = False
        if ok:
            return float(value)
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    arr = _reject_non_numeric(name, value, what).astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be {what}, got {_show(value)} (NaN or infinite)")
    if not np.all(arr > 0):
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    if arr.ndim == 0:
        return float(arr)
    return arr


def _integer(name: str, value, minimum: int, what: str):
    arr = _reject_non_numeric(name, value, what)
    if np.issubdtype(arr.dtype, np.floating):
        # Accept 8.0 (a float that happens to be whole) but not 2.5, NaN or inf.
        if not np.all(np.isfinite(arr)) or not np.all(arr == np.floor(arr)):
            raise ValueError(f"{name} must be {what}, got {_show(value)}")
        if np.any(np.abs(arr) > 2**53):
            raise ValueError(f"{name} must be {what} below 2**53, got {_show(value)}")
    arr = arr.astype(np.int64)
    if not np.all(arr >= minimum):
        raise ValueError(f"{name} must be {what}, got {_show(value)}")
    if arr.ndim == 0:
        return int(arr)
    return arr


def positive_integer(name: str, value):
    """Return ``value`` as an int (or int64 array) after checking it is a
    whole number >= 1.  Booleans are rejected: ``True`` is not a GPU count.

    >>> positive_integer("num_gpus", 8)
    8
    """
    if type(value) is int:  # fast path; bool is excluded by the exact type check
        if 1 <= value <= 2**53:
            return value
        raise ValueError(f"{name} must be a positive integer, got {_show(value)}")
    return _integer(name, value, 1, "a positive integer")


def nonnegative_integer(name: str, value):
    """Like :func:`positive_integer` but allows 0."""
    return _integer(name, value, 0, "a non-negative integer")


def one_of(name: str, value, allowed: Iterable):
    """Return ``value`` if it is one of ``allowed`` (compared with ==)."""
    allowed = tuple(allowed)
    if isinstance(value, (bool, np.bool_)) and not any(isinstance(a, bool) for a in allowed):
        raise ValueError(f"{name} must be one of {allowed}, got {_show(value)}")
    try:
        hashable_ok = value in allowed
    except TypeError:
        hashable_ok = False
    if not hashable_ok:
        raise ValueError(f"{name} must be one of {allowed}, got {_show(value)}")
    return value


def divides(divisor_name: str, divisor, dividend_name: str, dividend) -> None:
    """Check that integer ``divisor`` divides ``dividend`` exactly.

    ``dividend`` may be a float or array; the check applies only where it is
    whole-valued (a parameter count written as ``7e9`` is whole; an average
    like ``7.3e9/3`` is not and is not checked).  ``divisor`` may be an int or
    an int array broadcastable against ``dividend``.
    """
    dividend_arr = np.asarray(dividend, dtype=np.float64)
    divisor_arr = np.asarray(divisor, dtype=np.float64)
    whole = dividend_arr == np.floor(dividend_arr)
    remainder = np.fmod(dividend_arr, divisor_arr)  # exact for floats
    bad = whole & (remainder != 0)
    if np.any(bad):
        raise ValueError(
            f"{divisor_name} must divide {dividend_name} exactly, got "
            f"{divisor_name}={_show(divisor)} and {dividend_name}={_show(dividend)}"
        )


def ratios_array(name: str, ratios) -> np.ndarray:
    """A non-empty 1-D float64 array of positive finite D/N ratios."""
    arr = positive(name, ratios)
    arr = np.atleast_1d(np.asarray(arr, dtype=np.float64))
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of positive ratios, got shape {arr.shape}")
    return arr



def terse_argparse_errors(parser):
    """Make ``parser`` report a bad command line in one line (exit status 2), not argparse's
    usage block: ``prog: error: MESSAGE (see prog --help)``. Returns ``parser``."""

    def error(message):
        if message.endswith("expected one argument"):  # argparse takes -7e9 for an option
            message += ", or a value that starts with '-' written as --option=VALUE"
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parser.error = error
    return parser


#: The multipliers of :func:`count_with_suffix`: the suffixes :func:`solutions._format.count`
#: writes, in either case.
COUNT_SUFFIXES = {unit.lower(): scale for unit, scale in _format.COUNT_SUFFIXES}


class CountError(ValueError, argparse.ArgumentTypeError):
    """A count :func:`count_with_suffix` cannot read: a ``ValueError`` that argparse prints as it is."""


def count_with_suffix(text: str) -> float:
    """A count as people write parameters and tokens: ``70e9``, ``70B``, ``1.4T``, ``350M``
    or ``32k`` (case ignored; ``B`` a billion). An argparse ``type``: anything else raises a
    ``ValueError`` whose message says what is allowed.

    >>> count_with_suffix("1.4T")
    1400000000000.0
    """
    raw = str(text).strip()
    scale = COUNT_SUFFIXES.get(raw[-1:].lower(), 1.0) if raw else 1.0
    number = raw[:-1] if scale != 1.0 else raw
    try:
        value = float(number.replace("_", ""))
    except ValueError:
        raise CountError(f"expected a number such as 70e9, 70B, 1.4T or 350M, got {_show(raw)}") from None
    return value * scale
