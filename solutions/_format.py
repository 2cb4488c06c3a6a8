"""How the course's printouts write a count: one place, so the text plan, its HTML tables,
the sizing notes and the labs' logs agree ("2 ranks", never "2 rank(s)")."""

from __future__ import annotations


#: The suffixes of a count, largest first: trillion, billion, million, thousand (read back by
#: :func:`solutions._validate.count_with_suffix`).
COUNT_SUFFIXES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))


def count(x: float) -> str:
    """A count with a suffix, three significant figures: ``'80.5M'``, ``'1.4T'``, ``'8.19K'``."""
    if x >= 1e15:  # past a thousand trillion, whole trillions: '1,500T', not '1.5e+03T'
        return f"{x / 1e12:,.0f}T"
    for unit, scale in COUNT_SUFFIXES:
        if x >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


def seconds(s: float) -> str:
    """A duration: ``'1,234.50 s'`` from a second up, ``'15.0 ms'`` below."""
    return f"{s:,.2f} s" if s >= 1 else f"{s * 1e3:,.1f} ms"


def gib(x: float) -> str:
    """Bytes in GiB (2^30), as ``torch.cuda`` reports memory: ``'62.6 GiB'``."""
    return f"{x / 2**30:,.1f} GiB"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``'1 layer'``, ``'2,048 layers'``."""
    return f"{n:,} {word if n == 1 else many or word + 's'}"
