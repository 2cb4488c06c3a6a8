"""The book's interactive explorers, driven in headless Chromium the way a reader would.

At a desktop width (1280 px) and a phone width (390 px) each test moves every control of one
explorer to several values and checks that the figures on the page equal what `solutions/`
computes for those inputs, here, in the test (the page only looks up a table that the book's
build computed, so this catches a stale, mis-indexed or mis-formatted table). It also checks
that the page makes no request outside this machine (the explorers must work offline), logs no
console error and does not scroll sideways.

Needs the built book (`make book`). Without Chromium or the site the tests skip with a reason,
except under CI (CI=true), where that is a failure.
"""
from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from solutions import facts, hardware, memory, pipeline, scaling, steptime

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import explore  # noqa: E402  (the explorers' build-time tables: their readable option labels)

WIDTHS = (1280, 390)

# The page shows four significant digits (counts, gigabytes, ratios) or three decimals (losses).
REL = 1e-3
ABS_LOSS = 1e-3

pytestmark = pytest.mark.site


class Visit:
    """One explorer page at one width, with what it logged and requested."""

    def __init__(self, browser, server, name, width):
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.errors: list[str] = []
        self.outside: list[str] = []
        local = urlparse(server).hostname

        def route(r):
            host = urlparse(r.request.url).hostname
            if r.request.url.startswith(("data:", "blob:")) or host in (local, "localhost"):
                r.continue_()
            else:
                self.outside.append(r.request.url)
                r.abort()

        self.context.route("**/*", route)
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(f"console.{m.type}: {m.text}")
                     if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        response = self.page.goto(f"{server}book/explore/{name}.html", wait_until="load")
        assert response is not None and response.ok, f"{name}: HTTP {response and response.status}"
        self.page.wait_for_selector(f'.explorer[data-explorer="{name}"][data-ready="true"]', timeout=10_000)
        self.root = self.page.locator(f'.explorer[data-explorer="{name}"]')

    def text(self, selector: str) -> str:
        return self.root.locator(selector).inner_text().strip()

    def finish(self):
        """The checks every visit ends with."""
        overflow = self.page.evaluate(
            "() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
        self.context.close()
        problems = []
        if self.outside:
            problems.append(f"requests that left this machine: {self.outside}")
        if self.errors:
            problems.append(f"console errors: {self.errors}")
        if overflow > 0:
            problems.append(f"the page scrolls sideways by {overflow} px")
        assert not problems, "\n  ".join(problems)


def number(text: str) -> float:
    """Parse a displayed figure: '14.60 B', '1.142 T', '2,048 GB', '1.00e23 FLOPs', '12.5 %'."""
    m = re.search(r"(-?[\d,]*\.?\d+(?:e[+-]?\d+)?)\s*([KMBT%])?", text)
    assert m, f"no number in {text!r}"
    value = float(m.group(1).replace(",", ""))
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12, "%": 1e-2, None: 1.0}[m.group(2)]
    return value * scale


@pytest.fixture(params=WIDTHS, ids=lambda w: f"{w}px")
def width(request):
    return request.param


# --------------------------------------------------------------------------
# Chinchilla
# --------------------------------------------------------------------------

#: The slider's scale: position i is a budget of 10**(18 + i/10) FLOPs.
def budget_at(i: int) -> float:
    return 10.0 ** (18 + i / 10)


SETS = ("hoffmann_rounded", "hoffmann_precise", "epoch_2024")


def css_rgb(hex_colour: str) -> str:
    """'#0072B2' as a browser's computed style writes it: 'rgb(0, 114, 178)'."""
    h = hex_colour.lstrip("#")
    return "rgb(" + ", ".join(str(int(h[i:i + 2], 16)) for i in (0, 2, 4)) + ")"


def check_valley(visit, i, C):
    """The loss-against-size panel at budget index i: every drawn point is the fit's loss on the
    iso-FLOP line D = C/(6N), the curve's lowest point is at its compute-optimal N, and the
    dot marking the floor is that N and its loss."""
    for key in SETS:
        c = scaling.CONSTANT_SETS[key]
        line = visit.root.locator(f'[data-out="valley"] polyline[data-set="{key}"]')
        log10n = np.array([float(x) for x in line.get_attribute("data-log10n").split()])
        shown = np.array([float(x) for x in line.get_attribute("data-loss").split()])
        N = 10.0 ** log10n
        want = scaling.parametric_loss(N, C / (6 * N), c)
        np.testing.assert_allclose(shown, want, rtol=1e-4, err_msg=f"{key} at C={C:.3g}")
        N_opt, _, _, loss_opt = scaling.compute_optimal_closed_form(C, c)
        # the grid's lowest point lies within one grid step (0.075 decade) of the optimum
        assert abs(log10n[np.argmin(shown)] - math.log10(N_opt)) <= 0.075 + 1e-9, (key, C)
        assert shown.min() >= loss_opt - 1e-4, (key, C)  # nothing on the curve beats the optimum
        dot = visit.root.locator(f'[data-out="valley"] circle.floor[data-set="{key}"]')
        assert float(dot.get_attribute("data-n")) == pytest.approx(N_opt, rel=REL), (key, C)
        assert float(dot.get_attribute("data-loss")) == pytest.approx(loss_opt, abs=ABS_LOSS), (key, C)


def test_chinchilla_explorer(browser, server, width):
    visit = Visit(browser, server, "chinchilla", width)
    slider = visit.root.locator('input[name="budget"]')
    checked = []
    for how, position in (("fill", 0), ("fill", 40), ("fill", 52), ("key", "End"), ("key", "ArrowLeft"),
                          ("fill", 73), ("key", "Home")):
        if how == "fill":
            slider.fill(str(position))
        else:
            slider.press(position)
        i = int(slider.input_value())
        C = budget_at(i)
        assert number(visit.text('[data-out="C"]')) == pytest.approx(C, rel=5e-3)  # shown to 3 digits
        for key in SETS:
            N, D, ratio, loss = scaling.compute_optimal_closed_form(C, scaling.CONSTANT_SETS[key])
            cell = lambda out: visit.text(f'td[data-set="{key}"][data-out="{out}"]')  # noqa: E731
            assert number(cell("N")) == pytest.approx(N, rel=REL), (key, C)
            assert number(cell("D")) == pytest.approx(D, rel=REL), (key, C)
            assert number(cell("ratio")) == pytest.approx(ratio, rel=REL), (key, C)
            assert number(cell("loss")) == pytest.approx(loss, abs=ABS_LOSS), (key, C)
        checked.append(i)
        check_valley(visit, i, C)
    assert checked == [0, 40, 52, 90, 89, 73, 0], checked
    # The legend names every fit, in the colour its curves are drawn with.
    for key, label, _ in explore.CHINCHILLA_SETS:
        entry = visit.root.locator(f'[data-out="legend"] [data-set="{key}"]')
        assert entry.inner_text().strip() == label
        swatch = entry.locator(".swatch").evaluate("n => getComputedStyle(n).backgroundColor")
        line = visit.root.locator(f'[data-out="valley"] polyline[data-set="{key}"]').get_attribute("stroke")
        assert swatch == css_rgb(line), (key, swatch, line)
    for key in SETS:
        c = scaling.CONSTANT_SETS[key]
        for name in ("E", "A", "B", "alpha", "beta"):
            shown = number(visit.text(f'td[data-set="{key}"][data-const="{name}"]'))
            assert shown == pytest.approx(getattr(c, name), rel=1e-9), (key, name)
        shown = number(visit.text(f'td[data-set="{key}"][data-const="a"]'))
        assert shown == pytest.approx(scaling.allocation_exponent(c), abs=1e-4), key
    visit.finish()


# --------------------------------------------------------------------------
# Memory and layout
# --------------------------------------------------------------------------

def choose(root, name: str, text: str):
    """Pick the option of select `name` labelled `text`, or else starting with it (as a reader would)."""
    select = root.locator(f'select[name="{name}"]')
    labels = select.locator("option").all_inner_texts()
    matches = [label for label in labels if label == text] or [
        label for label in labels if label.startswith(text)]
    assert len(matches) == 1, f"{name}: no single option starting with {text!r} in {labels}"
    select.select_option(label=matches[0])


RECOMPUTE_KWARGS = {"none": {}, "selective": {"selective_recompute": True}, "full": {"full_recompute": True}}

#: (model, GPUs, TP, PP, ZeRO stage, convention, GPU, recomputation, sequence parallel,
#:  sequence length (None: the model's own, which a new model starts at), micro-batch size)
MEMORY_CASES = [
    ("Llama 3 405B", 16384, 8, 16, 1, "zero_16", "H100 SXM", "selective", True, None, 1),
    ("GPT-3", 1024, 4, 8, 3, "chapter_12", "H200", "none", False, None, 1),
    ("Llama 3 8B", 8, 1, 1, 0, "adam8bit_10", "A100 40GB", "full", False, None, 1),
    ("Chinchilla", 64, 2, 4, 2, "fp32_accum_20", "A100 80GB", "none", True, None, 1),
    ("PaLM", 4096, 8, 16, 3, "fp32_adamw_16", "T4", "selective", False, None, 1),
    # Either side of the limit (99.7 % and 100.9 % of the 41.9 GB an A100 40GB leaves usable):
    # only the byte convention differs.
    ("Llama 3 8B", 64, 1, 4, 2, "chapter_12", "A100 40GB", "selective", True, None, 1),
    ("Llama 3 8B", 64, 1, 4, 2, "zero_16", "A100 40GB", "selective", True, None, 1),
    # The activation controls: longer sequences, bigger micro-batches, each recomputation.
    ("Llama 3 70B", 64, 8, 1, 1, "zero_16", "H100 SXM", "none", True, 32768, 2),
    ("Llama 3 70B", 64, 8, 1, 1, "zero_16", "H100 SXM", "selective", True, 32768, 2),
    ("GPT-3", 1024, 8, 8, 1, "fp32_grads_18", "H200", "full", False, 4096, 8),
    ("Llama 3 8B", 8, 2, 1, 3, "zero_16", "H100 PCIe", "none", False, 1024, 4),
]


def expected_memory(model, gpus, tp, pp, zero, convention, device, recompute, sp, seq=None, mb=1):
    """GB per GPU on pipeline stage 0, from solutions: ZeRO over DP on the TP x PP shard, and
    Korthikanti et al.'s activations for ceil(layers / pp) layers times the pp micro-batches
    that 1F1B keeps in flight on the first stage."""
    arch = facts.ARCHITECTURES[model]
    dp = gpus // (tp * pp)
    strategy = {0: "dp", 1: "zero1", 2: "zero2", 3: "zero3"}[zero]
    parts = memory.memory_breakdown(arch.params / (tp * pp), strategy, dp, convention)
    state_total = memory.memory_per_gpu_3d(arch.params, tp, pp, dp, zero, convention)
    assert sum(parts.values()) == pytest.approx(state_total, rel=1e-12)
    act = memory.activation_memory_per_layer(seq or arch.seq_len, mb, arch.d_model, arch.heads, tp=tp,
                                             sequence_parallel=sp, **RECOMPUTE_KWARGS[recompute])
    act *= math.ceil(arch.layers / pp) * pp
    out = {k: v / 1e9 for k, v in parts.items()}
    out["activations"] = act / 1e9
    out["total"] = (state_total + act) / 1e9
    out["fits"] = out["total"] <= usable_gb(device)
    return out


def usable_gb(device):
    """What a layout must fit in, in GB: what CUDA can allocate less the allocator's reserve,
    as the planner counts it (an 80 GB H100 SXM: 83.87 GB, not 80)."""
    return hardware.find_gpu(device).usable_memory_bytes / 1e9


#: (model, GPUs, TP, PP, EP, ZeRO stage, convention, GPU, recompute, sequence parallelism,
#: sequence length or None, micro-batch, precision)
MEMORY_CASES_MOE = [
    ("DeepSeek-V3", 4096, 1, 16, 64, 1, "zero_16", "H100 SXM", "selective", True, None, 1, "fp8"),
    ("Mixtral 8x22B", 64, 4, 1, 8, 1, "zero_16", "B200", "none", True, 4096, 2, "mxfp8"),
    ("gpt-oss-120b", 64, 1, 4, 8, 1, "zero_16", "H100 SXM", "selective", True, None, 1, "bf16"),
    ("Qwen3-235B-A22B", 256, 1, 8, 1, 3, "zero_16", "GB200", "full", False, 8192, 4, "nvfp4"),
    ("Llama 3 70B", 64, 8, 1, 1, 1, "zero_16", "H100 SXM", "selective", True, None, 1, "fp8"),
    ("Llama 3 405B", 256, 4, 16, 1, 1, "zero_16", "GB200", "none", True, None, 1, "nvfp4"),
    # a Blackwell Ultra: its "288 GB" are the 278 GiB of its MIG profile; FP8 weights without BF16 ones
    ("Llama 3 405B", 256, 4, 8, 1, 1, "zero_16", "GB300", "none", True, None, 1, "fp8"),
    # an Instinct GPU: its 192 GB of HBM3 as the vendor gives them, FP8 on its own peak
    ("Llama 3 70B", 64, 8, 1, 1, 1, "zero_16", "MI300X", "selective", True, None, 1, "fp8"),
]


def expected_memory_precision(model, gpus, tp, pp, ep, zero, convention, device, recompute, sp, seq, mb, prec):
    """GB per GPU on pipeline stage 0 from solutions.steptime: the state by ``state_breakdown``
    (the precision's weight copies; a mixture of experts' experts on PP x EP, ZeRO over TP x DP /
    EP); activations by ``activation_bytes`` for 1F1B's pp micro-batches in flight (a dense
    model: Korthikanti et al.'s BF16 count less what the precision saves; a mixture of experts:
    with FlashAttention)."""
    moe = model in facts.MOE_ARCHITECTURES
    arch = facts.MOE_ARCHITECTURES[model] if moe else facts.ARCHITECTURES[model]
    dp = gpus // (tp * pp)
    shape = steptime.shape_of(arch, seq_len=seq or arch.seq_len)
    lay = steptime.Layout(tp=tp, pp=pp, dp=dp, zero=zero, ep=ep, micro_batch=mb, recompute=recompute,
                          attention="flash" if moe else "standard", sequence_parallel=sp)
    parts = steptime.state_breakdown(shape, lay, convention, prec)
    if moe:
        act = steptime.activation_bytes(shape, lay, 2 * pp, prec)
    else:
        act = expected_memory(model, gpus, tp, pp, zero, convention, "H100 SXM", recompute, sp, seq, mb)["activations"] * 1e9
        act -= steptime.activation_bytes(shape, lay, 2 * pp, "bf16") - steptime.activation_bytes(shape, lay, 2 * pp, prec)
    out = {k: v / 1e9 for k, v in parts.items()}
    out["activations"] = act / 1e9
    out["total"] = sum(out.values())
    out["fits"] = out["total"] <= usable_gb(device)
    return out


def check_bar(root, want, capacity_gb, case):
    """The bar is drawn to its scale: each segment's width and the GPU's dashed line, read off
    the tick labels in GB, give the shown figures within a pixel or two (once the segments have
    finished growing to their new widths)."""
    root.page.wait_for_function("() => document.getAnimations().length === 0", timeout=5000)
    geometry = root.locator(".bar-wrap").evaluate("""w => {
        const box = r => r.getBoundingClientRect();
        const stack = w.querySelector('.stack');
        return {
            left: box(stack).left, segs: [...stack.querySelectorAll(':scope > span')].map(s => box(s).width),
            cap: box(stack.querySelector('.capacity')).left,
            ticks: [...w.querySelectorAll('.bar-axis .tick')].map(t => [Number(t.dataset.gb),
                     box(t).left + box(t).width / 2, t.textContent]),
        };
    }""")
    ticks = geometry["ticks"]
    assert len(ticks) >= 3, (case, ticks)
    (g0, x0, _), (g1, x1, _) = ticks[0], ticks[-1]
    assert g0 == 0 and x1 > x0
    px_per_gb = (x1 - x0) / (g1 - g0)
    for gb, _, label in ticks:  # the labels say what the ticks mark
        assert float(label.replace(",", "")) == pytest.approx(gb, rel=1e-9)
    for seg, part in zip(geometry["segs"], ("weights", "grads", "optimizer", "activations")):
        assert seg == pytest.approx(want[part] * px_per_gb, abs=2.0), (case, part)
    assert geometry["cap"] - x0 == pytest.approx(capacity_gb * px_per_gb, abs=3.0), case


def test_memory_explorer(browser, server, width):
    visit = Visit(browser, server, "memory", width)
    root = visit.root
    # Options are named for a reader: no code name (an identifier with an underscore) anywhere.
    for name in ("model", "gpus", "tp", "pp", "zero", "convention", "device", "seq", "micro_batch", "recompute",
                 "precision", "ep"):
        labels = root.locator(f'select[name="{name}"] option').all_inner_texts()
        assert labels and not [x for x in labels if "_" in x or "undefined" in x or "NaN" in x], (name, labels)
    # each GPU with the memory it is sold with, as the data gives it
    devices = [f"{d['name']} ({d['memory_gb']:g} GB)" for d in explore.memory_data()["devices"]]
    assert root.locator('select[name="device"] option').all_inner_texts() == devices
    assert {"MI300X (192 GB)", "GB200 (186 GB)", "H100 SXM (80 GB)"} <= set(devices)
    for case in MEMORY_CASES:
        model, gpus, tp, pp, zero, convention, device, recompute, sp, seq, mb = case
        choose(root, "model", model)
        arch = facts.ARCHITECTURES[model]
        assert number(root.locator('select[name="seq"]').evaluate("s => s.selectedOptions[0].text")) == arch.seq_len
        if seq is not None:
            choose(root, "seq", f"{seq:,} tokens")
        choose(root, "micro_batch", f"{mb} sequence")
        choose(root, "gpus", f"{gpus:,}")
        choose(root, "tp", str(tp))
        choose(root, "pp", str(pp))
        choose(root, "zero", f"{zero}:")
        choose(root, "convention", explore.CONVENTION_LABELS[convention])
        choose(root, "device", device + " (")
        choose(root, "recompute", recompute + ":")
        root.locator('input[name="sp"]').set_checked(sp)
        assert not root.locator('[data-out="message"]').is_visible(), case
        assert number(visit.text('[data-out="dp"]')) == gpus // (tp * pp)
        want = expected_memory(*case)
        for part in ("weights", "grads", "optimizer", "activations", "total"):
            shown = number(visit.text(f'td[data-out="{part}"]'))
            assert shown == pytest.approx(want[part], rel=REL), (case, part)
        fits = root.locator('td[data-out="fits"]')
        assert fits.get_attribute("data-fits") == ("yes" if want["fits"] else "no"), case
        assert visit.text('td[data-out="fits"]').startswith("yes" if want["fits"] else "no"), case
        check_bar(root, want, usable_gb(device), case)
        # the breakdown fits its column: on a phone the verdict wraps (it had pushed the
        # figures out of view, behind a sideways scroll)
        spill = root.locator(".explorer-table-wrap").evaluate_all("ws => ws.map(w => w.scrollWidth - w.clientWidth)")
        assert max(spill) <= 1, (case, spill)

    # A layout whose TP x PP does not divide the GPUs: a message, and no figures at all.
    choose(root, "gpus", "24")
    choose(root, "tp", "8")
    choose(root, "pp", "2")
    message = root.locator('[data-out="message"]')
    assert message.is_visible()
    assert "does not divide 24 GPUs" in message.inner_text()
    assert not root.locator('td[data-out="total"]').is_visible()
    choose(root, "pp", "1")  # 8 divides 24: the figures come back
    assert not message.is_visible()
    assert number(visit.text('[data-out="dp"]')) == 3

    # Training precision and mixtures of experts (expert parallelism).
    for case in MEMORY_CASES_MOE:
        model, gpus, tp, pp, ep, zero, convention, device, recompute, sp, seq, mb, prec = case
        choose(root, "model", model + " (")
        if seq is not None:
            choose(root, "seq", f"{seq:,} tokens")
        choose(root, "micro_batch", f"{mb} sequence")
        choose(root, "gpus", f"{gpus:,}")
        choose(root, "tp", str(tp))
        choose(root, "pp", str(pp))
        choose(root, "ep", str(ep))
        choose(root, "zero", f"{zero}:")
        choose(root, "convention", explore.CONVENTION_LABELS[convention])
        choose(root, "device", device + " (")
        choose(root, "recompute", recompute + ":")
        choose(root, "precision", explore.PRECISION_LABELS[prec])
        root.locator('input[name="sp"]').set_checked(sp)
        assert not root.locator('[data-out="message"]').is_visible(), case
        want = expected_memory_precision(*case)
        for part in ("weights", "grads", "optimizer", "activations", "total"):
            shown = number(visit.text(f'td[data-out="{part}"]'))
            assert shown == pytest.approx(want[part], rel=REL), (case, part)
        assert root.locator('td[data-out="fits"]').get_attribute("data-fits") == ("yes" if want["fits"] else "no"), case
        # the readout says where the GPU's capacity comes from, and states it in GB
        basis = {"cuda": "CUDA sees ", "mig": "its full-GPU MIG profile holds at most ", "nvidia-smi": "nvidia-smi shows ",
                 "vendor": "read as GiB, "}[
            hardware.find_gpu(device).memory_basis]
        said = re.search(re.escape(basis) + r"([\d.,]+) GB", visit.text('[data-out="summary"]'))
        assert said, (case, visit.text('[data-out="summary"]'))
        assert number(said.group(1)) == pytest.approx(hardware.find_gpu(device).memory_bytes / 1e9, rel=1e-3)  # as displayed
    # EP on a dense model, EP that does not divide the experts, EP that does not divide TP x DP.
    for model, gpus, tp, pp, ep, text in (("Llama 3 70B", 64, 8, 1, 8, "is dense"),
                                          ("Mixtral 8x22B", 64, 1, 1, 16, "does not divide the 8 experts"),
                                          ("DeepSeek-V3", 64, 1, 16, 8, "does not divide TP \u00d7 DP = 4")):
        choose(root, "model", model + " (")
        choose(root, "gpus", f"{gpus:,}")
        choose(root, "tp", str(tp))
        choose(root, "pp", str(pp))
        choose(root, "ep", str(ep))
        assert message.is_visible() and text in message.inner_text(), (model, message.inner_text())
        assert not root.locator('td[data-out="total"]').is_visible()
    visit.finish()


# --------------------------------------------------------------------------
# Pipeline
# --------------------------------------------------------------------------

#: (schedule on the page, kind, chunks per stage, p, m)
PIPELINE_CASES = [
    ("1F1B (PipeDream-Flush)", "1f1b", 1, 4, 8),
    ("GPipe", "gpipe", 1, 4, 8),
    ("GPipe", "gpipe", 1, 8, 3),
    ("1F1B (PipeDream-Flush)", "1f1b", 1, 1, 16),
    ("interleaved 1F1B, 2 chunks", "interleaved", 2, 4, 8),
    ("interleaved 1F1B, 2 chunks", "interleaved", 2, 3, 12),
    ("1F1B (PipeDream-Flush)", "1f1b", 1, 6, 2),
]
PCT = 1e-4  # fractions are shown as percentages with two decimals


def _drawn_passes(root):
    return root.locator("g.pass").evaluate_all(
        """nodes => nodes.map(n => [Number(n.dataset.stage), Number(n.dataset.mb), n.dataset.phase,
                                   Number(n.dataset.start), Number(n.dataset.end)])""")


def test_pipeline_explorer(browser, server, width):
    visit = Visit(browser, server, "pipeline", width)
    root = visit.root
    for label, kind, v, p, m in PIPELINE_CASES:
        choose(root, "schedule", label)
        choose(root, "p", str(p))
        choose(root, "m", str(m))
        case = (kind, v, p, m)
        assert not root.locator('[data-out="message"]').is_visible(), case
        events = pipeline.pipeline_schedule(p, m, kind, 1.0, 2.0, interleave=v)
        shown = lambda out: number(visit.text(f'td[data-out="{out}"]'))  # noqa: E731
        assert shown("share") == pytest.approx(pipeline.bubble_fraction(p, m, "share_of_total", v), abs=PCT), case
        assert shown("relative") == pytest.approx(pipeline.bubble_fraction(p, m, "relative_to_ideal", v), abs=PCT), case
        assert shown("idle") == pytest.approx(pipeline.idle_fraction(events), abs=PCT), case
        assert shown("makespan") == pytest.approx(pipeline.makespan(events), rel=1e-9), case
        assert shown("peak0") == pipeline.peak_in_flight(events, 0), case
        # The timeline is the simulation: every pass, where and when solutions puts it.
        want = sorted((e.stage, e.microbatch, e.phase, e.start, e.end) for e in events)
        got = sorted(tuple(x) for x in _drawn_passes(root))
        assert len(got) == len(want), case
        for g, w in zip(got, want):
            assert g[:3] == w[:3] and g[3:] == pytest.approx(w[3:], abs=1e-9), case
        # Step back through time: the passes finished by then are those that solutions ends by then.
        assert visit.text('td[data-out="done"]') == f"{len(events)} of {len(events)}"
        for _ in range(3):
            root.locator('button[name="back"]').click()
        t = number(visit.text('[data-out="time"]').split("of")[0])
        finished = sum(e.end <= t + 1e-9 for e in events)
        assert visit.text('td[data-out="done"]') == f"{finished} of {len(events)}", case
        assert finished < len(events), case
        root.locator('input[name="step"]').fill("0")
        assert visit.text('td[data-out="done"]') == f"0 of {len(events)}", case
        root.locator('button[name="end"]').click()
    # Interleaving needs m to be a multiple of p: a message instead of a timeline.
    choose(root, "schedule", "interleaved 1F1B, 2 chunks")
    choose(root, "p", "4")
    choose(root, "m", "6")
    message = root.locator('[data-out="message"]')
    assert message.is_visible()
    assert "must be a multiple of p=4" in message.inner_text()
    assert root.locator("g.pass").count() == 0 or not root.locator("g.pass").first.is_visible()
    assert not root.locator('td[data-out="share"]').is_visible()
    assert not root.locator('input[name="step"]').is_visible()
    choose(root, "m", "8")  # a multiple of p: the timeline comes back
    assert not message.is_visible()
    assert root.locator("g.pass").count() == 2 * 2 * 4 * 8
    check_play(root, visit, pipeline.pipeline_schedule(4, 8, "interleaved", 1.0, 2.0, interleave=2))
    visit.finish()


def check_play(root, visit, events):
    """Play runs the timeline from the start (it is at its end): passes appear in order of their
    end time, as many as solutions ends by the time shown; pause holds it there."""
    play = root.locator('button[name="play"]')
    step = root.locator('input[name="step"]')
    assert step.input_value() == step.get_attribute("max")
    play.click()
    assert play.get_attribute("aria-pressed") == "true"
    visit.page.wait_for_function("s => Number(s.value) >= 2", arg=step.element_handle(), timeout=5000)
    play.click()  # pause
    assert play.get_attribute("aria-pressed") == "false"
    held = step.input_value()
    visit.page.wait_for_timeout(700)
    assert step.input_value() == held, "pause did not hold the timeline"
    assert 0 < int(held) < int(step.get_attribute("max"))
    t = number(visit.text('[data-out="time"]').split("of")[0])
    finished = sum(e.end <= t + 1e-9 for e in events)
    assert visit.text('td[data-out="done"]') == f"{finished} of {len(events)}"
