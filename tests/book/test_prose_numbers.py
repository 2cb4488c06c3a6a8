"""Numbers in the chapter's prose come from code.

Every markdown cell of every chapter notebook is scanned. After removing what is code or
computed (code spans and blocks, maths, MyST roles such as {glue:text}, {cite}, {doc}, link
targets, directive options and labels), any number left must be one of:

- a year (1990-2030) or a small count from 0 to 10 ("two all-reduces", "Exercise 3");
- part of a name: GPT-3, Llama 3, H100, 3D, 1F1B, ZeRO-1/2/3, bf16 (digits glued to letters
  that are not a unit, or following "-" or "/");
- a chapter, section, table, figure or equation number ("Chapter 17", "Table 4").

Everything else (7B, 14 GB, 1.3 years, 20 tokens per parameter, 46.2%) is a quantity and must
be glued in from code (`myst_nb.glue` + {glue:text}`name`). Inside maths, formula constants
are allowed but a result typed after \\approx or \\sim is not.

Run `python tests/book/test_prose_numbers.py` to list every number found and how it was classified.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
CHAPTERS = sorted(p for d in ("chapters", "labs") for p in (ROOT / d).glob("*.md"))

UNIT_SUFFIX = r"(?:[KMBT]|GB|GiB|MB|TB|PB|B/s|x|×|%|s|ms|k)"
NUMBER = re.compile(
    r"(?<![\w\-/.])"            # not glued to a preceding word, "-" or "/"
    r"(\d{1,3}(?:,\d{3})+|\d+)(\.\d+)?(?:[eE][+-]?\d+)?"
    rf"(?P<unit>{UNIT_SUFFIX}(?![A-Za-z]))?"
    r"(?![\w.]*[A-Za-z_])"      # digits followed by other letters are part of a name
)
REFERENCE_WORD = re.compile(
    r"\b(Chapters?|Sections?|Exercises?|Labs?|Tables?|Figures?|Fig\.|Eq\.|Equations?|"
    r"App\.|Appendix|Approach(?:es)?|Steps?|Stage|step|stage|approach)\s+\d+"
    r"(?:\s*(?:-|–|to|through|and|,)\s*\d+)*"
)


def strip_non_prose(markdown: str) -> tuple[str, list[str]]:
    """Return (prose, maths) where prose has code, maths, roles and markup removed."""
    maths: list[str] = []
    text = re.sub(r"<!--.*?-->", " ", markdown, flags=re.S)
    # Fenced blocks: code is dropped, {math} is maths, other directives (admonitions,
    # dropdowns, figures) keep their prose and lose only the fence lines and options.
    def fence(match: re.Match) -> str:
        info, body = match.group(2).strip(), match.group(3)
        if info.startswith("{math}"):
            maths.append(body)
            return " MATH "
        if info.startswith("{") and not info.startswith(("{code", "{eval-rst}")):
            title = re.sub(r"^\{[\w:-]+\}", "", info)
            return title + "\n" + body
        return " CODE "

    previous = None
    while previous != text:  # innermost fences first, so nested directives unwrap
        previous = text
        text = re.sub(r"^(`{3,}|~{3,}|:{3,})([^\n]*)\n((?:(?!^\1).)*?)^\1\s*$", fence, text, flags=re.S | re.M)
    text = re.sub(r"^\s*:[\w-]+:.*$", " ", text, flags=re.M)  # directive options
    text = re.sub(r"^\([\w:.-]+\)=\s*$", " ", text, flags=re.M)  # labels

    def keep_math(match: re.Match) -> str:
        maths.append(match.group(0))
        return " MATH "

    text = re.sub(r"\$\$.*?\$\$(\s*\([\w:.-]+\))?", keep_math, text, flags=re.S)
    text = re.sub(r"\\begin\{(\w+\*?)\}.*?\\end\{\1\}", keep_math, text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$[^$\n]+?\$", keep_math, text)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", " ROLE ", text)  # {glue:text}`x`, {cite}`k`, ...
    text = re.sub(r"`[^`]*`", " CODE ", text)
    text = re.sub(r"\]\([^)]*\)", "]", text)  # keep link text, drop the target
    text = re.sub(r"<[^>]+>", " ", text)  # inline HTML tags
    text = REFERENCE_WORD.sub(" REF ", text)
    return text, maths


def classify(token: re.Match) -> str:
    integer, decimals, unit = token.group(1), token.group(2), token.group("unit")
    if unit or decimals or "e" in token.group(0).lower() or "," in integer:
        return "quantity"
    value = int(integer)
    if 1990 <= value <= 2030:
        return "year"
    if value <= 10:
        return "count"
    return "quantity"


def hand_typed_numbers(markdown: str) -> list[str]:
    prose, maths = strip_non_prose(markdown)
    found = []
    for line in prose.splitlines():
        for token in NUMBER.finditer(line):
            if classify(token) == "quantity":
                found.append(f"{token.group(0)!r} in: {line.strip()[:100]}")
    for formula in maths:
        # a number right after \approx, unless it is a coefficient of a symbol (6ND)
        for m in re.finditer(r"\\(approx|sim|simeq)\s*\d[\d.,]*(?![\d.,]*\s*[A-Za-z])", formula):
            found.append(f"result typed in maths: {formula.strip()[:100]}")
    return found


def markdown_cells(path: Path) -> list[str]:
    return [c.source for c in jupytext.read(path).cells if c.cell_type == "markdown"]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_prose_numbers_are_glued(chapter: Path):
    offenders = [n for cell in markdown_cells(chapter) for n in hand_typed_numbers(cell)]
    assert not offenders, (
        f"{chapter.name}: numbers typed by hand where code should compute them "
        f"(glue them from solutions/):\n  " + "\n  ".join(offenders)
    )


@pytest.mark.parametrize(
    "text, offending",
    [
        ("A 7B model needs 14 GB.", 2),
        ("It takes about 1.3 years at 46.2% MFU.", 2),
        ("Megatron-Turing used 17,920 GPUs.", 1),
        ("Use {glue:text}`s01_years` years on an H100 or A100.", 0),
        ("GPT-3, Llama 3, ZeRO-1/2/3, 1F1B and 3D parallelism in bf16.", 0),
        ("Chapter 17 and Table 4 of {cite}`dubey2024llama3` (2024) list two layouts.", 0),
        ("Doubling gives $2^{-0.34} \\approx 0.79$.", 1),
        ("The law is $L = E + A/N^{\\alpha}$ with 6ND FLOPs.", 0),
        ("```python\nx = 12345\n```", 0),
        ("A 4x speed-up at 80 GB.", 2),
        ("Training costs $C \\approx 6ND$ FLOPs.", 0),
        ("It is $\\approx 4.2 \\times 10^{22}$ FLOPs.", 1),
        ("```{admonition} Correction: about 1,000 TFLOP/s\n:class: warning\nText.\n```", 1),
    ],
)
def test_the_checker_itself(text, offending):
    assert len(hand_typed_numbers(text)) == offending, hand_typed_numbers(text)


if __name__ == "__main__":  # list every number and how it was classified
    for chapter in CHAPTERS:
        for cell in markdown_cells(chapter):
            prose, maths = strip_non_prose(cell)
            for line in prose.splitlines():
                for token in NUMBER.finditer(line):
                    print(f"{chapter.name}: {classify(token):8s} {token.group(0)!r:>12}  {line.strip()[:80]}")
    sys.exit(0)
