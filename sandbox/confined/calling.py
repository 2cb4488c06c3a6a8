"""How a student's function is called: by the hand-out's parameter names where its own
signature takes them, else by position.

The exercises' hand-out tells students to keep its parameter names because the grader calls
the function by them. A student who kept the names but wrote them in another order is then
called as promised; one who renamed them (``def chinchilla_loss(n, d)``) still gets the
arguments in the hand-out's order. The same rule runs in the sandbox (the autograder) and in
the notebook's self-check, so both grade alike.
"""
from __future__ import annotations

import inspect


def call_by_names(function, args, names=None):
    """``function`` called with ``args``: as ``function(**dict(zip(names, args)))`` where
    ``names`` (the hand-out's, in the order of ``args``) are given and ``function``'s signature
    binds them, else ``function(*args)`` (no names, another count, renamed or positional-only
    parameters, or a signature that cannot be read)."""
    if names and len(names) == len(args):
        by_name = dict(zip(names, args))
        try:
            inspect.signature(function).bind(**by_name)
        except Exception:  # TypeError: does not take them; ValueError: no signature to read
            pass
        else:
            return function(**by_name)
    return function(*args)
