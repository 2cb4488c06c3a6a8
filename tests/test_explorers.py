"""The explorers page in headless Chromium, at 1280 and 390 px: each control is moved, and the
values the page displays must equal what `solutions/` computes for those inputs. The page must
make no request outside the site and must not scroll sideways.

Needs the built book (`make book`); without Chromium or the site the tests skip, except under
CI (CI=true), where that is a failure.
"""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest

from solutions import facts, memory, pipeline, plan, scaling

ROOT = Path(__file__).resolve().parents[1]
SITE = ROOT / "_build" / "html"
PAGE = "book/explorers.html"
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-quic",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
REL = 1e-9  # JSON carries every double exactly; only the page's one multiplication rounds

pytestmark = pytest.mark.site


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    if not (SITE / PAGE).exists():
        _unavailable(f"no built explorers page at {(SITE / PAGE).relative_to(ROOT)}: run `make book` first")
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(SITE)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        _unavailable(f"Chromium not found at {CHROMIUM}: apt-get install chromium (or set CHROMIUM)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module", params=[1280, 390], ids=lambda w: f"{w}px")
def page(request, browser, server):
    """One page per width, shared by the tests (each sets every control it relies on);
    console errors, requests outside the site and sideways scrolling are checked at the end."""
    width = request.param
    pg = browser.new_page(viewport={"width": width, "height": 900})
    errors, outside = [], []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    host = urlparse(server).netloc

    def route(r):
        if urlparse(r.request.url).netloc not in (host, ""):
            outside.append(r.request.url)
            return r.abort()
        return r.continue_()

    pg.route("**/*", route)
    pg.goto(server + PAGE, wait_until="load")
    pg.wait_for_selector("[data-explorer='pipeline'][data-ready]")
    yield pg
    overflow = pg.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    pg.close()
    assert not errors, errors
    assert not outside, f"requests outside the site: {outside}"
    assert overflow <= 1, f"the page scrolls sideways by {overflow} px at {width} px"


def raw(pg, root, key):
    value = pg.get_attribute(f"[data-explorer='{root}'] [data-value='{key}']", "data-raw")
    return float(value) if value not in (None, "") else None


def text(pg, root, key):
    return pg.inner_text(f"[data-explorer='{root}'] [data-value='{key}']")


def control(pg, root, name):
    return pg.locator(f"[data-explorer='{root}'] [data-control='{name}']")


@pytest.mark.parametrize("index", [0, 37, 58, 80])
def test_chinchilla_explorer(page, index):
    control(page, "chinchilla", "budget").fill(str(index))
    C = 10.0 ** round(18 + index / 10, 1)
    assert raw(page, "chinchilla", "budget") == pytest.approx(C, rel=REL)
    for name in ("hoffmann_rounded", "hoffmann_precise", "epoch_2024"):
        N, D, ratio, loss = scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[name])
        for key, expected in (("N", N), ("D", D), ("ratio", ratio), ("loss", loss)):
            assert raw(page, "chinchilla", f"{name}:{key}") == pytest.approx(expected, rel=REL), (name, key)
        assert text(page, "chinchilla", f"{name}:loss") == f"{loss:.3f}"
        assert text(page, "chinchilla", f"{name}:ratio") == f"{ratio:.1f}"
    N20, D20 = scaling.twenty_tokens_allocation(C)
    assert raw(page, "chinchilla", "twenty:N") == pytest.approx(N20, rel=REL)
    assert raw(page, "chinchilla", "twenty:ratio") == pytest.approx(scaling.CHINCHILLA_TOKENS_PER_PARAM, rel=REL)


MEMORY_CASES = [
    # model, GPUs, tp, pp, ZeRO, convention, recompute, GPU
    ("Llama 3 8B", 8, 1, 1, 3, "chapter_12", "selective", "H100 SXM"),
    ("Llama 3 8B", 8, 1, 1, 0, "zero_16", "none", "A100 40GB"),
    ("Llama 3 405B", 8192, 8, 16, 1, "zero_16", "full", "H100 SXM"),
    ("GPT-3", 1024, 4, 8, 2, "fp32_accum_20", "selective", "H200"),
]


@pytest.mark.parametrize("case", MEMORY_CASES, ids=lambda c: f"{c[0]}-{c[1]}-tp{c[2]}pp{c[3]}z{c[4]}")
def test_memory_explorer(page, case):
    model, count, tp, pp, zero, conv, recompute, gpu = case
    for name, value in (("model", model), ("count", count), ("tp", tp), ("pp", pp), ("zero", zero),
                        ("convention", conv), ("recompute", recompute), ("gpu", gpu)):
        control(page, "memory", name).select_option(str(value))
    dp = count // (tp * pp)
    arch = facts.ARCHITECTURES[model]
    state = plan.state_breakdown_3d(arch.params, tp, pp, dp, zero, conv)
    act = plan.activation_bytes_per_gpu(arch, tp, pp, pp, recompute)
    assert raw(page, "memory", "dp") == dp
    for key in ("weights", "grads", "optimizer"):
        assert raw(page, "memory", key) == pytest.approx(state[key], rel=REL), key
    assert raw(page, "memory", "activations") == pytest.approx(act, rel=REL)
    total = memory.memory_per_gpu_3d(arch.params, tp, pp, dp, zero, conv) + act
    assert raw(page, "memory", "total") == pytest.approx(total, rel=REL)
    assert text(page, "memory", "total") == f"{total / 1e9:.2f} GB"
    fits = total <= facts.GPUS[gpu].memory_gb * 1e9
    assert raw(page, "memory", "fits") == int(fits)


def test_memory_explorer_refuses_a_layout_that_does_not_divide(page):
    control(page, "memory", "count").select_option("8")
    control(page, "memory", "tp").select_option("8")
    control(page, "memory", "pp").select_option("2")
    assert "does not divide" in text(page, "memory", "fits")
    assert text(page, "memory", "total") == "\u2013"


@pytest.mark.parametrize("p, m, kind", [(2, 4, "gpipe"), (4, 8, "1f1b"), (8, 16, "1f1b"), (4, 2, "gpipe")])
def test_pipeline_stepper(page, p, m, kind):
    control(page, "pipeline", "p").select_option(str(p))
    control(page, "pipeline", "m").select_option(str(m))
    control(page, "pipeline", "kind").select_option(kind)
    events = pipeline.pipeline_schedule(p, m, kind)
    assert raw(page, "pipeline", "bubble") == pytest.approx(pipeline.bubble_fraction(p, m), rel=REL)
    assert raw(page, "pipeline", "idle") == pytest.approx(pipeline.idle_fraction(events), rel=REL)
    assert raw(page, "pipeline", "makespan") == pytest.approx(pipeline.makespan(events), rel=REL)
    assert raw(page, "pipeline", "inflight") == pipeline.peak_in_flight(events, 0)
    assert page.locator("[data-explorer='pipeline'] rect[data-event]").count() == len(events)
    # Step through time from the start: what runs at each step matches the simulation.
    control(page, "pipeline", "time").fill("0")
    for _ in range(3):
        control(page, "pipeline", "step").click()
        t = raw(page, "pipeline", "time")
        running = sum(e.start <= t < e.end for e in events)
        assert raw(page, "pipeline", "running") == running


def test_pipeline_interleaved_bubble(page):
    control(page, "pipeline", "p").select_option("8")
    control(page, "pipeline", "m").select_option("4")
    control(page, "pipeline", "kind").select_option("interleaved")
    assert raw(page, "pipeline", "bubble") == pytest.approx(pipeline.bubble_fraction(8, 4, interleave=2), rel=REL)
