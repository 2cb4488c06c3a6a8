"""How the planner's printouts write a count: one place, so the text plan, its HTML tables
and the sizing notes agree."""

from __future__ import annotations


def count(x: float) -> str:
    """A count with a suffix, three significant figures: ``'80.5M'``, ``'1.4T'``, ``'8.19K'``."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"
