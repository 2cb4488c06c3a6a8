"""Draw the landing page's map of the course: ``book/_static/course-map.svg``.

    python tools/course_map.py

A hand-laid SVG (no plotting library), in the course's colours (``coursefig``), sized so that
its text stays about 10 px tall or more when a phone shows it at the column width. Every part
of the book is on it (the sections, the practice: exercises, labs, assignments, the planner
and the explorers), each with the time a first pass takes. The counts of labs, assignments
and explorers are read from the table of contents, so a new lab appears on the map when it
appears in the book.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import coursefig  # noqa: E402

C, O = coursefig.COLORS, coursefig.OKABE_ITO
W, BOX_W, BOX_H, STEP, GAP = 560, 265, 64, 72, 14
X = (8, 287)  # the two columns

#: Minutes a first reading takes, per section (the landing page's table adds them up).
READING_MIN = {
    "01-single-gpu": 30, "02-kaplan": 25, "03-chinchilla": 40, "11-after-chinchilla": 25,
    "04-why-distribute": 25, "05-data-parallelism": 30, "06-model-parallelism": 40, "07-fsdp": 30,
    "08-when-to-use-what": 25, "10-beyond-3d": 30, "13-mixture-of-experts": 35,
    "12-precision-and-kernels": 25,
}

#: (heading, [(section file, title, subtitle, outline colour, stripe colour or None)])
PARTS = [
    ("1  What to train", [
        ("01-single-gpu", "One GPU is not enough", "memory, time", O["black"], None),
        ("02-kaplan", "Kaplan scaling laws", "grow N faster", O["orange"], None),
        ("03-chinchilla", "Chinchilla", "N and D together", O["orange"], None),
        ("11-after-chinchilla", "After Chinchilla", "serving, data", O["orange"], None),
    ]),
    ("2  How to train it", [
        ("04-why-distribute", "Why distribute", "memory, speed", O["black"], None),
        ("05-data-parallelism", "Data parallelism", "the ring all-reduce", C["dp"], C["dp"]),
        ("06-model-parallelism", "Tensor, pipeline", "and 3D parallelism", C["tp"], C["pp"]),
        ("07-fsdp", "FSDP and ZeRO", "shard the state", C["fsdp"], C["fsdp"]),
        ("08-when-to-use-what", "When to use what", "rules of thumb", O["black"], None),
        ("10-beyond-3d", "Context and experts", "long context, MoE", C["cp"], C["ep"]),
        ("13-mixture-of-experts", "Mixture of experts", "routing, all-to-all", C["ep"], C["ep"]),
        ("12-precision-and-kernels", "Precision, kernels", "FP8, fused kernels", O["black"], None),
    ]),
]

NUMBER_WORDS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve")


def toc_counts(toc_path: Path = ROOT / "book" / "_toc.yml") -> dict:
    """How many labs (not counting the page on running them), assignments and explorers the
    table of contents lists."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    files = {part["caption"]: [c["file"] for c in part["chapters"]] for part in toc["parts"]}
    labs = [f for f in files.get("Labs", []) if not f.endswith("00-running-the-labs")]
    return {"labs": len(labs), "assignments": len(files.get("Assignments", [])),
            "explorers": len(files.get("Explorers", []))}


def practice_boxes(counts: dict) -> list:
    """(title, subtitle) of the practice part, with the counts of the table of contents."""
    def n(k):
        word = NUMBER_WORDS[counts[k]] if counts[k] < len(NUMBER_WORDS) else str(counts[k])
        return word[0].upper() + word[1:]
    return [
        ("Four exercises", "autograded · 2 h in all"),
        (f"{n('labs')} labs", "30 min each, CPU or GPU"),
        (f"{n('assignments')} assignments", "on real ranks · 2–3 h each"),
        ("Planner, explorers", f"{NUMBER_WORDS[counts['explorers']]} diagrams · 1 h"),
    ]


def box(x, y, colour, title, subtitle, stripe=None) -> list[str]:
    parts = [f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{colour}" '
             f'fill-opacity="0.15" stroke="{colour}" stroke-width="2"/>']
    if stripe:
        parts.append(f'<rect x="{x}" y="{y}" width="9" height="{BOX_H}" rx="3" fill="{stripe}"/>')
    parts.append(f'<text class="b" x="{x + 17}" y="{y + 28}">{title}</text>')
    parts.append(f'<text class="s" x="{x + 17}" y="{y + 51}">{subtitle}</text>')
    return parts


def course_map(counts: dict | None = None) -> str:
    counts = counts or toc_counts()
    body, y = [], 0
    for heading, boxes in PARTS + [("3  Practise", None)]:
        y += 26
        body.append(f'<text class="h" x="{X[0]}" y="{y}">{heading}</text>')
        y += GAP
        if boxes is None:
            items = [(t, s, O["purple"], None) for t, s in practice_boxes(counts)]
        else:
            items = [(t, f"{s} · {READING_MIN[f]} min", c, st) for f, t, s, c, st in boxes]
        for i, (title, subtitle, colour, stripe) in enumerate(items):
            body += box(X[i % 2], y + (i // 2) * STEP, colour, title.replace("&", "&amp;"), subtitle, stripe)
        y += ((len(items) + 1) // 2) * STEP
    height = y + 4
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {height}" width="{W}" height="{height}" '
           'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" role="img">',
           "<title>Map of the course</title>",
           "<style>.h{font-size:21px;font-weight:bold;fill:#222}.b{font-size:19px;fill:#111}"
           ".s{font-size:17px;fill:#444}</style>"]
    return "\n".join(out + body + ["</svg>"]) + "\n"


if __name__ == "__main__":
    target = ROOT / "book" / "_static" / "course-map.svg"
    target.write_text(course_map())
    print(f"wrote {target.relative_to(ROOT)}")
