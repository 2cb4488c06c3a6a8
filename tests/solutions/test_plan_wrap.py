"""The text plan in a terminal: long lines broken at spaces with a hanging indent, a figure kept
with its unit; in a file or a pipe, one line per item as before."""
from __future__ import annotations

import io
import os

from solutions import _format, plan

ARGV = ["--model", "70e9", "--tokens", "1.4e12", "--count", "1024"]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _printed(monkeypatch, stream, columns=None):
    monkeypatch.setattr("sys.stdout", stream)
    if columns:
        monkeypatch.setattr("shutil.get_terminal_size", lambda *a, **k: os.terminal_size((columns, 24)))
    assert plan.main(ARGV) == 0
    return stream.getvalue()


def test_a_terminal_gets_lines_that_fit_it_and_a_pipe_gets_the_plan_unchanged(monkeypatch):
    piped = _printed(monkeypatch, io.StringIO())
    assert max(len(line) for line in piped.splitlines()) > 200  # the items are long lines
    shown = _printed(monkeypatch, Terminal(), columns=81)
    lines = shown.splitlines()
    assert max(len(line) for line in lines) <= 80
    # nothing lost or reordered: the same words, whitespace aside
    assert shown.split() == piped.split()


def test_a_numbered_item_continues_under_its_text_and_keeps_figures_with_their_units():
    line = ("12. step                    11.90 s: 1,409,393 tokens/s, 1,376 tokens/s/GPU, 600 TFLOP/s/GPU (model); "
            "MFU 60.7% of the BF16 peak (as torchtitan and NVIDIA report); 32.2 GPU-years")
    wrapped = _format.wrap_lines(line, 60).splitlines()
    column = line.index("11.90")  # where the item's text starts, after its label
    assert len(wrapped) > 2 and all(len(w) <= 60 for w in wrapped)
    assert all(w.startswith(" " * column) and w[column] != " " for w in wrapped[1:])
    # each figure stays on the line of its unit, wherever the breaks fall
    for width in range(40, 70):
        lines = _format.wrap_lines(line, width).splitlines()
        for figure in ("11.90 s", "32.2 GPU-years"):
            assert any(figure in w for w in lines), (width, figure, lines)


def test_a_line_that_fits_is_untouched_and_a_long_word_is_never_split():
    assert _format.wrap_lines("== memory per GPU", 40) == "== memory per GPU"
    word = "x" * 50
    assert word in _format.wrap_lines(f"   - {word} and more words after it", 30).split()


def test_a_bullet_continues_under_its_text_and_a_narrow_width_leaves_text_alone():
    line = "   - TP4 x CP1 x PP2 x DP128, ZeRO-1, micro-batch 4, selective recomputation, interleaved v=8: 11.91 s"
    first, *rest = _format.wrap_lines(line, 50).splitlines()
    assert first.startswith("   - TP4") and rest and all(r.startswith(" " * 5) and r[5] != " " for r in rest)
    assert _format.wrap_lines(line, 0) == line  # no room to wrap in: as it was
    deep = "   " + "y" * 30 + " z"
    assert _format.wrap_lines(deep, 25).splitlines()[0] == deep.split(" z")[0]  # its own indent kept
