"""The diagrams that move: the FSDP timeline, the pipeline stepper's zero-bubble and DualPipe
schedules, and the steppers placed inside the sections (ring all-reduce in data parallelism,
pipeline schedules in model parallelism, FSDP timeline in the FSDP section).

In headless Chromium at 1280 and 390 px, as a reader would use them, each drawn pass or
collective is compared with what `solutions.pipeline` and `solutions.fsdp` compute here, in the
test; the section pages must load their explorer, make no request outside this machine, log no
console error and not scroll sideways. Without a browser, the tables the build writes are
checked against the same functions. The other explorers' checks are in test_book_explorers.py
and test_explorers.py.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from solutions import efficiency, fsdp, pipeline
from tests.book.test_book_explorers import WIDTHS, Visit, choose, number

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import explore  # noqa: E402

PCT = 1e-4  # shown as percentages with two decimals


# --- the build's tables, without a browser ----------------------------------------------------

def test_pipeline_table_holds_the_split_schedules():
    data = explore.pipeline_data()
    keys = [k for k, *_ in data["schedules"]]
    assert {"zb-h1", "zb-h2", "dualpipe"} <= set(keys)
    for kind in ("zb-h1", "zb-h2", "dualpipe"):
        for p in explore.SPLIT_P:
            for m in explore.SPLIT_M:
                run = data["runs"][f"{kind},{p},{m}"]
                if kind == "dualpipe" and m < 2 * p:
                    assert "error" in run and "at least 2p" in run["error"]
                    continue
                events = pipeline.pipeline_schedule(p, m, kind, 1.0, 2.0)
                flat = run["events"]
                assert len(flat) == 5 * len(events)
                got = sorted((flat[i], flat[i + 1], "FBW"[flat[i + 2] >> 1], flat[i + 3] / 2, flat[i + 4] / 2)
                             for i in range(0, len(flat), 5))
                want = sorted((e.stage, e.microbatch, e.phase, e.start, e.end) for e in events)
                assert got == want, (kind, p, m)
                assert run["idle"] == pytest.approx(pipeline.idle_fraction(events), rel=1e-5)
                assert run["inner"] == pytest.approx(pipeline.inner_idle_fraction(events), rel=1e-5, abs=1e-9)
        assert "error" in data["runs"][f"{kind},3,4"]  # outside the tabulated grid: a message


def test_fsdp_table_is_the_timeline():
    data = explore.fsdp_data()
    for m in data["m"]:
        for r in data["ratio"]:
            for prefetch in (True, False):
                for reshard in (True, False):
                    run = data["runs"][f"{m},{r:g},{int(prefetch)},{int(reshard)}"]
                    events = fsdp.fsdp_timeline(data["units"], m, 1.0, 2.0, r, prefetch=prefetch,
                                                reshard_after_forward=reshard)
                    flat = run["events"]
                    kinds = [tuple(k) for k in data["kinds"]]
                    got = sorted((kinds[flat[i]], flat[i + 1], flat[i + 2], flat[i + 3] / 4, flat[i + 4] / 4)
                                 for i in range(0, len(flat), 5))
                    want = sorted(((e.kind, e.phase), e.unit, e.microbatch, e.start, e.end) for e in events)
                    assert got == want
                    assert run["makespan"] == pytest.approx(fsdp.makespan(events))
                    assert run["exposed"] == pytest.approx(fsdp.exposed_communication(events), abs=1e-9)
                    assert run["peak"] == fsdp.peak_held_units(events)
                    for t4, held in run["held"]:
                        assert held == fsdp.held_units(events, t4 / 4)


# --- in the browser ----------------------------------------------------------------------------

SPLIT_CASES = [("ZB-H1", "zb-h1", 4, 8), ("ZB-H2", "zb-h2", 4, 8), ("DualPipe", "dualpipe", 8, 16),
               ("ZB-H1", "zb-h1", 8, 16)]


def drawn(root):
    return root.locator("g.pass").evaluate_all(
        """nodes => nodes.map(n => [Number(n.dataset.stage), Number(n.dataset.mb), n.dataset.phase,
                                   Number(n.dataset.start), Number(n.dataset.end)])""")


@pytest.mark.site
@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w}px")
def test_pipeline_stepper_split_schedules(browser, server, width):
    visit = Visit(browser, server, "pipeline", width)
    root = visit.root
    for label, kind, p, m in SPLIT_CASES:
        choose(root, "schedule", label)
        choose(root, "p", str(p))
        choose(root, "m", str(m))
        assert not root.locator('[data-out="message"]').is_visible(), kind
        events = pipeline.pipeline_schedule(p, m, kind, 1.0, 2.0)
        got = sorted(tuple(x) for x in drawn(root))
        want = sorted((e.stage, e.microbatch, e.phase, e.start, e.end) for e in events)
        assert got == want, kind
        shown = lambda out: number(visit.text(f'td[data-out="{out}"]'))  # noqa: E731
        assert shown("idle") == pytest.approx(pipeline.idle_fraction(events), abs=PCT)
        assert shown("inner") == pytest.approx(pipeline.inner_idle_fraction(events), abs=PCT)
        rel = (pipeline.dualpipe_bubble(p, m) if kind == "dualpipe" else efficiency.pipeline_bubble(p, m, kind))
        assert shown("relative") == pytest.approx(rel, abs=PCT)
        assert shown("peak0") == pipeline.peak_in_flight(events, 0)
        assert "W: gradient of the weights" in visit.text('[data-out="legend"]')
    # A combination outside the table: a message, not a timeline.
    choose(root, "schedule", "ZB-H1")
    choose(root, "p", "3")
    assert root.locator('[data-out="message"]').is_visible()
    assert "Not in this page's table" in visit.text('[data-out="message"]')
    visit.finish()


FSDP_CASES = [(1, "0.5", True, True), (2, "0.5", True, True), (1, "0.5", False, True), (1, "1", True, False),
              (4, "2", True, True)]


@pytest.mark.site
@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w}px")
def test_fsdp_timeline(browser, server, width):
    visit = Visit(browser, server, "fsdp", width)
    root = visit.root
    for m, ratio, prefetch, reshard in FSDP_CASES:
        choose(root, "m", str(m))
        choose(root, "ratio", ratio + " ")
        for name, on in (("prefetch", prefetch), ("reshard", reshard)):
            box = root.locator(f'input[name="{name}"]')
            if box.is_checked() != on:
                box.click()
        events = fsdp.fsdp_timeline(4, m, 1.0, 2.0, float(ratio), prefetch=prefetch, reshard_after_forward=reshard)
        got = root.locator("g.pass").evaluate_all(
            """nodes => nodes.map(n => [n.dataset.kind, Number(n.dataset.unit), Number(n.dataset.mb),
                                       Number(n.dataset.start), Number(n.dataset.end)])""")
        kind = lambda e: e.kind + ("-" + e.phase if e.kind == "gather" else "")  # noqa: E731
        want = sorted((kind(e), e.unit, e.microbatch, e.start, e.end) for e in events)
        assert sorted(tuple(x) for x in got) == want
        shown = lambda out: number(visit.text(f'td[data-out="{out}"]'))  # noqa: E731
        assert shown("makespan") == pytest.approx(fsdp.makespan(events))
        assert shown("exposed") == pytest.approx(fsdp.exposed_communication(events), abs=1e-9)
        assert shown("peak") == fsdp.peak_held_units(events)
        assert shown("gathers") == sum(e.kind == "gather" for e in events)
        # Step back: what has finished by the time shown is what solutions ends by then.
        for _ in range(4):
            root.locator('button[name="back"]').click()
        t = number(visit.text('[data-out="time"]').split("of")[0])
        finished = sum(e.end <= t + 1e-9 for e in events)
        assert visit.text('td[data-out="done"]') == f"{finished} of {len(events)}"
        assert shown("held") == fsdp.held_units(events, t)
        root.locator('button[name="end"]').click()
    visit.finish()


#: (section page, explorer in it)
SECTION_STEPPERS = [("05-data-parallelism", "collectives"), ("06-model-parallelism", "pipeline"),
                    ("07-fsdp", "fsdp")]


@pytest.mark.site
@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w}px")
@pytest.mark.parametrize("page, name", SECTION_STEPPERS, ids=[p for p, _ in SECTION_STEPPERS])
def test_stepper_inside_its_section(browser, server, width, page, name):
    """The section's page carries the stepper, which draws and steps there as on its own page."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    errors = []
    pg = context.new_page()
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    response = pg.goto(f"{server}chapters/{page}.html", wait_until="load")
    assert response is not None and response.ok
    pg.wait_for_selector(f'.explorer[data-explorer="{name}"][data-ready="true"]', timeout=10_000)
    root = pg.locator(f'.explorer[data-explorer="{name}"]')
    root.locator('button[name="forward"], button[name="back"]').first.click()
    overflow = pg.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    context.close()
    assert not errors, errors
    assert overflow <= 0, f"{page} scrolls sideways by {overflow} px at {width}"
