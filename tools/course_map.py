"""Draw the landing page's map of the course: ``book/_static/course-map.svg``.

    python tools/course_map.py

A hand-laid SVG (no plotting library), in the course's colours (``coursefig``), sized so that
its text stays about 10 px tall or more when a phone shows it at the column width.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import coursefig  # noqa: E402

C, O = coursefig.COLORS, coursefig.OKABE_ITO
W, H, BOX_W, BOX_H, STEP = 560, 520, 265, 64, 72
COLUMNS = {  # heading -> (x, [(title, subtitle, outline colour, stripe colour or None)])
    "1  What to train": (8, [
        ("One GPU is not enough", "memory and time", O["black"], None),
        ("Kaplan scaling laws", "bigger models, fixed data", O["orange"], None),
        ("Chinchilla", "grow N and D together", O["orange"], None),
    ]),
    "2  How to train it": (287, [
        ("Why distribute", "memory, speed, batch", O["black"], None),
        ("Data parallelism", "the ring all-reduce", C["dp"], C["dp"]),
        ("Tensor, pipeline", "and 3D parallelism", C["tp"], C["pp"]),
        ("FSDP and ZeRO", "shard the state", C["fsdp"], C["fsdp"]),
        ("When to use what", "who holds what", O["black"], None),
    ]),
}
PRACTICE = [("Four exercises", "autograded, self-checks"), ("Labs", "torch.distributed")]


def box(x, y, colour, title, subtitle, stripe=None) -> list[str]:
    parts = [f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="8" fill="{colour}" '
             f'fill-opacity="0.15" stroke="{colour}" stroke-width="2"/>']
    if stripe:
        parts.append(f'<rect x="{x}" y="{y}" width="9" height="{BOX_H}" rx="3" fill="{stripe}"/>')
    parts.append(f'<text class="b" x="{x + 17}" y="{y + 28}">{title}</text>')
    parts.append(f'<text class="s" x="{x + 17}" y="{y + 51}">{subtitle}</text>')
    return parts


def course_map() -> str:
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" '
           'font-family="DejaVu Sans, Helvetica, Arial, sans-serif" role="img">',
           "<title>Map of the course</title>",
           "<style>.h{font-size:21px;font-weight:bold;fill:#222}.b{font-size:19px;fill:#111}"
           ".s{font-size:17px;fill:#444}</style>"]
    for heading, (x, boxes) in COLUMNS.items():
        out.append(f'<text class="h" x="{x}" y="26">{heading.replace("&", "&amp;")}</text>')
        for i, (title, subtitle, colour, stripe) in enumerate(boxes):
            out += box(x, 40 + i * STEP, colour, title.replace("&", "&amp;"), subtitle, stripe)
    y = 40 + 5 * STEP + 26
    out.append(f'<text class="h" x="8" y="{y}">3  Practise</text>')
    for i, (title, subtitle) in enumerate(PRACTICE):
        out += box(8 + i * 279, y + 14, O["purple"], title, subtitle)
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    target = ROOT / "book" / "_static" / "course-map.svg"
    target.write_text(course_map())
    print(f"wrote {target.relative_to(ROOT)}")
