"""Pairs of submissions whose code is likely copied, with the evidence side by side.

Fingerprints are winnowed k-grams of the tokenised code (Schleimer, Wilkerson and Aiken,
"Winnowing: local algorithms for document fingerprinting", SIGMOD 2003, the method of MOSS),
computed by the maintained library ``copydetect`` (pinned in requirements.in). Its filter
replaces every identifier by one token, so a copy with renamed variables keeps its
fingerprints. Only the student's own code is compared: the code cells or statements the
grader runs (markdown and outputs left out), with the fingerprints of the exercises' template
(``chapters/09-exercises.md`` where present, else the four stubs) removed as boilerplate.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

from sandbox.submission import read_submission

K = 20  # tokens per k-gram: short enough to catch a copied function, long enough to skip idioms
WINDOW = 4  # winnowing window (a match of K + WINDOW - 1 tokens is always found)
TEMPLATE = Path(__file__).resolve().parents[1] / "chapters" / "09-exercises.md"


@dataclass
class Pair:
    a: str  # student ids
    b: str
    similarity: float  # the smaller of the two shares of copied code, 0 to 1
    evidence: tuple  # (a's code with the copied parts marked, b's code likewise), HTML


def student_code(path) -> str:
    """The code the grader would run, joined: what a student wrote (no markdown, no outputs)."""
    submission = read_submission(path)
    return "\n\n".join(u.source for u in submission.units) if not submission.problem else ""


def _template_code() -> str:
    """The template as students receive it: the solutions between ``### BEGIN SOLUTION`` and
    ``### END SOLUTION`` left out (what the student release does)."""
    import re

    if not TEMPLATE.exists():
        return ""
    return re.sub(r"[ \t]*### BEGIN SOLUTION.*?### END SOLUTION[^\n]*\n?", "",
                  student_code(TEMPLATE), flags=re.S)


def _fingerprint(code: str, boilerplate=None):
    from copydetect import CodeFingerprint

    return CodeFingerprint("submission.py", K, WINDOW, boilerplate=boilerplate,
                           fp=io.StringIO(code))


def similar_pairs(codes: dict, threshold: float = 0.5, limit: int = 30) -> list:
    """``codes``: {student id: code}. The pairs whose shared share of code is at least
    ``threshold``, most similar first, at most ``limit``."""
    from copydetect.detector import compare_files
    from copydetect.utils import highlight_overlap

    template = _template_code()
    import numpy as np

    boilerplate = (np.array(sorted(_fingerprint(template).hashes), dtype=np.int64)
                   if template.strip() else None)
    prints = {}
    for sid, code in codes.items():
        if code.strip():
            try:
                prints[sid] = _fingerprint(code, boilerplate)
            except Exception:
                continue
    ids = sorted(prints)
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            overlap, (sa, sb), slices = compare_files(prints[a], prints[b])
            score = float(min(sa, sb))
            if overlap and score >= threshold:
                pairs.append((score, a, b, slices))
    pairs.sort(key=lambda p: (-p[0], p[1], p[2]))
    out = []
    for score, a, b, (slices_a, slices_b) in pairs[:limit]:
        left, _ = highlight_overlap(prints[a].raw_code, slices_a, "<mark>", "</mark>",
                                    escape_html=True)
        right, _ = highlight_overlap(prints[b].raw_code, slices_b, "<mark>", "</mark>",
                                     escape_html=True)
        out.append(Pair(a, b, score, (left, right)))
    return out


def pairs_html(pairs) -> list:
    """The class report's section: each pair with both students' code side by side."""
    from html import escape

    out = ['<h2 id="similarity">Likely copied code</h2>']
    if not pairs:
        return out + ["<p>No pair of submissions shares most of its code.</p>"]
    out.append("<p>Pairs whose code (identifiers ignored, the template left out) is mostly "
               "the same, most similar first. Shared parts are marked. A lead, not a verdict.</p>")
    for p in pairs:
        out.append(f'<details class="pair"><summary>{escape(p.a)} and {escape(p.b)}: '
                   f"{100 * p.similarity:.0f}% shared</summary><div class=\"side\">"
                   f"<pre>{p.evidence[0]}</pre><pre>{p.evidence[1]}</pre></div></details>")
    return out
