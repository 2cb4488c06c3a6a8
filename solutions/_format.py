"""How the course's printouts write a count: one place, so the text plan, its HTML tables,
the sizing notes and the labs' logs agree ("2 ranks", never "2 rank(s)")."""

from __future__ import annotations

import re
import textwrap


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


#: Where a printout line's text starts after its label: ``'4. layout'`` then two or more spaces
#: (the numbered lines), ``'why: '`` and ``'- '`` (the reasons and the other layouts' lines).
_HANGING = re.compile(r"^(\s*\d+\.\s.*?\s{2,}|\s*why:\s|\s*-\s|\s*)")
#: A figure and its unit, which a wrapped line keeps together (joined by :data:`_GLUE` meanwhile).
_FIGURE_UNIT = re.compile(r"(\d) (s|ms|us|GiB|GB|MB|TB|GB/s|TFLOP/s|days|GPU-years|tokens|sequences)\b")
_GLUE = "\x00"


def wrap_lines(text: str, width: int) -> str:
    """``text`` with every line longer than ``width`` columns broken at spaces, as a terminal of
    ``width`` columns would otherwise break it mid-word at column 0. The next lines of an item
    hang under where its text starts after the label (``'4. layout   '``, ``'why: '``,
    ``'- '``); a line without such a label, or whose label leaves less than half the width,
    continues two columns in from its own indent. Words are never split, so a word longer than
    the room left stays whole, and the leading spaces of a line are kept. Lines that fit, and
    any text under 20 columns wide, are untouched."""
    if width < 20:
        return text
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        lead = len(line) - len(line.lstrip())
        label = _HANGING.match(line).group(1)
        indent = len(label) if label.strip() and len(label) <= width // 2 else lead + 2
        kept = _FIGURE_UNIT.sub(lambda m: m.group(1) + _GLUE + m.group(2), line.lstrip())
        out.extend(part.replace(_GLUE, " ") for part in textwrap.wrap(
            kept, width, initial_indent=" " * lead, subsequent_indent=" " * indent,
            break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)
