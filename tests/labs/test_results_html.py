"""Results a reader can read: a lab's checks as an HTML table with its log folded
(labs/report.py, labs/notebook.py) and a plan as tables (solutions/plan_html.py)."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from labs.notebook import LabRun, Table
from labs.report import check_at_most, check_exact, check_skipped, check_within, checks_html, format_checks, run_html
from solutions import plan, plan_html


class Cells(HTMLParser):
    """The text of every table row, cell by cell; and whether the HTML is well nested."""

    def __init__(self, html):
        super().__init__()
        self.rows, self.stack, self.row, self.cell = [], [], None, None
        self.feed(html)
        assert not self.stack, f"unclosed elements: {self.stack}"

    def handle_starttag(self, tag, attrs):
        if tag not in ("br",):
            self.stack.append(tag)
        if tag == "tr":
            self.row = []
        elif tag in ("td", "th") and self.row is not None:
            self.cell = ""

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, (self.stack, tag)
        self.stack.pop()
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        elif tag == "tr":
            self.rows.append(self.row)

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


REPORT = {"world_size": 2, "backend": "gloo", "device": "cpu", "checks": [
    check_exact("bytes <sent>", 4096, 4096),
    check_at_most("difference", 1e-4, 3.7e-7),
    check_within("memory", 100, 150, 2),
    check_skipped("ring", "no ring written yet", 10),
]}


def test_checks_table_has_one_row_per_check_with_its_verdict():
    rows = Cells(checks_html(REPORT)).rows
    assert rows[0] == ["check", "predicted", "measured", "ratio", "verdict"]
    assert rows[1:] == [
        ["bytes <sent>", "4,096 bytes", "4,096 bytes", "1.0000", "pass"],
        ["difference", "\u2264 0.0001", "\u2264 0.0001", "\u2264 1", "pass"],  # the bound, not the rounding error
        ["memory", "100 bytes", "150 bytes", "1.5000", "FAIL"],
        ["ring", "10 bytes", "-", "-", "skipped"],
    ]
    assert "2 of 3 checks pass, 1 skipped (2 ranks, backend gloo, cpu)" in checks_html(REPORT)


def test_the_text_table_says_the_same():
    lines = format_checks(REPORT).splitlines()
    assert lines[2].split()[-2:] == ["1.0000", "yes"] and lines[4].endswith("NO") and lines[5].endswith("skipped")


def test_the_log_is_folded_and_escaped():
    html = run_html(REPORT, "$ python -m labs.ddp\nstep 1 <ok>\n")
    fold = re.search(r"<details class=\"lab-log\"><summary>(.*?)</summary><pre>(.*?)</pre></details>", html, re.S)
    assert fold and fold.group(1) == "The lab&#x27;s full output (2 lines)"
    assert fold.group(2) == "$ python -m labs.ddp\nstep 1 &lt;ok&gt;"
    assert "<details" not in run_html(REPORT, "")


def test_a_notebook_shows_html_and_a_terminal_the_log():
    run = LabRun(REPORT, "the log\n")
    assert run._repr_html_().startswith('<div class="lab-run"><table class="lab-checks">') and repr(run) == "the log"
    table = Table(["pass", "calls"], [["forward", 4]], caption="Collectives")
    assert Cells(table._repr_html_()).rows == [["pass", "calls"], ["forward", "4"]]
    assert repr(table) == "Collectives\npass     calls\nforward      4"


@pytest.fixture(scope="module")
def chinchilla_plan():
    return plan.make_plan(model=70e9, tokens=1.4e12, gpu="H100", count=1024)


def test_the_plan_tables_number_the_printout_s_lines(chinchilla_plan):
    html = plan_html.plan_tables(chinchilla_plan, {"epoch_2024": "Epoch AI refit"})
    optimal = re.search(r'<table class="plan-optimal">.*?</table>', html, re.S).group(0)  # line 2's own table
    rows = Cells(html.replace(optimal, "")).rows
    numbered = [r[0] for r in rows if r and r[0].isdigit() and len(r) == 3]
    assert numbered == [str(i) for i in range(1, 14)]
    printed = {int(line.split(".")[0]) for line in plan.format_plan(chinchilla_plan).splitlines()
               if re.match(r"\d+\. ", line)}
    assert printed == set(range(1, 14)), "the printout's line numbers moved: renumber plan_html's rows"
    j = plan.plan_json(chinchilla_plan)
    step = next(r for r in rows if r[:2] == ["12", "step"])[2]
    assert f"{j['tokens_per_s']:,.0f} tokens/s" in step and f"MFU {j['predicted_mfu']:.1%}" in step
    fits = [r[0] for r in Cells(optimal).rows[1:]]
    assert fits == ["Epoch AI refit", "Hoffmann et al., rounded", "Hoffmann et al., unrounded", "20 tokens per parameter"]
    assert sum(1 for r in rows if len(r) == 3 and r[0].endswith("s") and "%" in r[1]) == len(j["alternatives"])
    assert plan_html.PlanTables(chinchilla_plan).__repr__() == plan.format_plan(chinchilla_plan)


def test_the_plan_tables_say_the_printout_s_memory_and_communication():
    """Lines 7, 8 and 10 as the printout has them: memory in GiB against what CUDA leaves
    usable, with the margin (the tables once said '67.2 GB of 84.9 GB' where the printout and
    the planner page said 62.6 GiB of 78.1 GiB usable); every axis that moves bytes, expert
    all-to-alls included, exposed and hidden; one micro-batch, not '1 micro-batches'."""
    p = plan.make_plan(arch="DeepSeek-V3", tokens=14.8e12, gpu="H800", count=2048)
    j, printed = plan.plan_json(p), plan.format_plan(p)
    rows = {r[0]: r[2] for r in Cells(plan_html.plan_tables(p)).rows if len(r) == 3 and r[0].isdigit()}
    gib = 2 ** 30
    usable, margin = j["memory"]["usable_bytes"] / gib, j["memory"]["margin_bytes"] / gib
    assert rows["7"].startswith(f"{j['memory_per_gpu_bytes'] / gib:,.1f} GiB of {usable:,.1f} GiB usable")
    assert f"fits, {margin:,.1f} GiB to spare" in rows["7"] and f"{usable:,.1f} GiB usable" in printed
    assert j["bytes_per_step"]["ep"] > 0 and j["breakdown_s"]["ep"] > 0
    ep = next(x for x in rows["10"].split("; ") if x.startswith("expert all-to-all"))
    assert " exposed + " in ep and f"{j['bytes_per_step']['ep'] / 1e9:,.2f} GB" in ep
    assert len(rows["10"].split("; ")) == sum(1 for v in j["bytes_per_step"].values() if v > 0)
    one = plan.make_plan(model=1e9, tokens=1e11, gpu="H100", count=8, global_batch=8, dp=8, micro_batch=1)
    line8 = {r[0]: r[2] for r in Cells(plan_html.plan_tables(one)).rows if len(r) == 3}["8"]
    assert "; 1 micro-batch per replica;" in line8 and "1 micro-batch per replica" in plan.format_plan(one)
    tight = plan.make_plan(arch="Llama 3 70B", tokens=1e12, gpu="H100", count=8, tp=8, pp=1, zero=1, micro_batch=1,
                           global_batch=64, seq_len=8192, recompute="none")
    assert not tight.step.fits
    over = {r[0]: r[2] for r in Cells(plan_html.plan_tables(tight)).rows if len(r) == 3}["7"]
    assert over.endswith(f"does not fit: {-tight.step.margin_bytes / gib:,.1f} GiB over")


def test_the_plan_tables_end_with_the_runs_like_the_plan(chinchilla_plan):
    html = plan_html.plan_tables(chinchilla_plan)
    table = re.search(r'<table class="plan-runs-like">.*?</table>', html, re.S).group(0)
    rows = Cells(table).rows
    assert rows[0] == ["run", "published", "predicted", "error", "set"]
    what, like = chinchilla_plan.track
    assert what in table and len(rows) == 1 + len(like)
    for cells, (label, row) in zip(rows[1:], like):
        assert cells[0] == row.name and cells[4] == label
        assert float(cells[3].rstrip("%")) == pytest.approx(100 * row.error, abs=0.05)
    none = plan_html.plan_tables(plan.make_plan(model=7e9, tokens=1e12, gpu="MI300X", count=8))
    assert "plan-runs-like" not in none and "No published run on the MI300X" in none


def test_a_layout_in_words():
    layout = {"tp": 8, "cp": 1, "pp": 16, "dp": 128, "zero": 1, "virtual_stages": 4, "micro_batch": 1,
              "recompute": "none", "schedule": "interleaved", "attention": "flash"}
    assert plan_html.describe_layout(layout) == (
        "TP 8 × PP 16 × DP 128, ZeRO stage 1, interleaved 1F1B schedule, 4 chunks per stage, "
        "micro-batches of 1 sequence, no recomputation")
