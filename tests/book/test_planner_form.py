"""The planner on the page (chapters/planner, "Plan your own run") gives the plan that
``python -m solutions.plan`` gives for the same inputs.

In headless Chromium, at a desktop and a phone width, the test chooses models, GPUs, GPU counts
and batches on the form as a reader would, checks that the command the form shows is the
command of those choices (built here from them), runs that command in a shell and compares its
JSON with what the form shows: the layout field by field, the step time, tokens per second, MFU,
days and memory per GPU at the digits shown. A choice where no layout fits must say so. The page
must make no request outside this machine, log no console error and not scroll sideways.

Without a browser: the build's in-process call (book/_ext/planner_form.py) prints the same JSON as
the command run in a shell. Needs the built book for the browser part (`make book`).
"""
from __future__ import annotations

import functools
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "book" / "_ext"))
import planner_form  # noqa: E402  (the form's build-time grid: its choices and commands)

#: (model, GPU, count, tokens per step, precision): a mid-size default, a big cluster, a small
#: model on one server, a model that fits on no layout of eight 40 GB GPUs, Blackwell racks in
#: FP8 and NVFP4, a precision the GPU lacks (the planner refuses it in one line) and two
#: mixtures of experts (their layouts spread the experts with EP).
CHOICES = [
    ("Llama 3 70B", "H100 SXM", 1024, 2**22, "bf16"),
    ("Llama 3 405B", "H100 SXM", 16384, 2**24, "bf16"),
    ("Llama 3 8B", "A100 80GB", 8, 2**20, "bf16"),
    ("Llama 3 405B", "A100 40GB", 8, 2**22, "bf16"),
    ("Llama 3 405B", "GB200", 1024, 2**24, "mxfp8"),
    ("Llama 3 70B", "B200", 64, 2**22, "nvfp4"),
    ("Llama 3 8B", "H100 SXM", 8, 2**20, "nvfp4"),
    ("DeepSeek-V3", "GB200", 256, 2**22, "mxfp8"),
    ("gpt-oss-120b", "H100 SXM", 64, 2**22, "bf16"),
]


@functools.lru_cache(maxsize=None)
def from_the_shell(command: str) -> dict:
    """The JSON ``python -m solutions.plan`` prints for ``command`` (the form's shown command)."""
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "solutions.plan"] and argv[-1] == "--json", command
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    if out.returncode == 2:  # refused: one line, as the form shows it
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
        return {"error": planner_form.refusal(out.stderr)}
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_build_runs_the_same_planner_as_the_shell():
    argv = planner_form.arguments("Llama 3 70B", "H100 SXM", 1024, 2**22, planner_form.precisions()[0])
    built = planner_form.plan_cli(argv)
    shell = from_the_shell(planner_form.command(argv))
    assert built == shell
    assert shlex.split(planner_form.command(argv))[3:-1] == argv


def test_a_refused_choice_is_one_line():
    found = planner_form.plan_cli(["--model", "70e9", "--tokens", "1.4e12", "--gpu", "no such GPU"])
    assert set(found) == {"error"} and "\n" not in found["error"] and "gpu" in found["error"].lower()


def test_the_form_offers_every_planned_gpu_with_the_memory_and_each_precision():
    """Blackwell and Instinct GPUs and the low precisions are on the form; a precision a GPU lacks
    is the planner's refusal, without the program's name."""
    assert {"B200", "GB200", "GB300", "MI300X", "H100 SXM", "A100 40GB"} <= set(planner_form.gpus())
    assert not {"T4", "L4"} & set(planner_form.gpus())  # under MIN_GPU_GB
    assert planner_form.precisions() == ["bf16", "fp8", "mxfp8", "nvfp4"]
    moe = planner_form.plan_cli(planner_form.arguments("DeepSeek-V3", "GB200", 256, 2**22, "mxfp8"))
    assert moe["layout"]["ep"] > 1 and moe["shape"]["moe"]["experts"] == 256
    assert moe["tokens"] == pytest.approx(20 * moe["params"], rel=1e-3)  # the rule, on all 671B parameters
    found = planner_form.plan_cli(planner_form.arguments("Llama 3 8B", "H100 SXM", 8, 2**20, "nvfp4"))
    assert found == {"error": "precision nvfp4 is not available on the H100 SXM (it has bf16, fp16, fp8)"}


def number(text: str) -> float:
    return float(text.split()[0].replace(",", ""))


@pytest.mark.site
@pytest.mark.parametrize("width", (1280, 390), ids=("desktop", "phone"))
def test_the_form_gives_the_plan_of_the_command(browser, server, width):
    context = browser.new_context(viewport={"width": width, "height": 900})
    outside, errors = [], []
    local = urlparse(server).hostname

    def route(r):
        if r.request.url.startswith(("data:", "blob:")) or urlparse(r.request.url).hostname in (local, "localhost"):
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page = context.new_page()
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{server}chapters/planner.html", wait_until="load")
        root = page.locator('.explorer[data-explorer="planner"]')
        root.scroll_into_view_if_needed()
        page.wait_for_selector('.explorer[data-explorer="planner"][data-ready="true"]', timeout=20_000)
        gpus = planner_form.gpus()
        # every choice named for a reader: the GPUs with the memory they are sold with
        from solutions import hardware
        shown_gpus = root.locator('select[name="gpu"] option').all_inner_texts()
        assert shown_gpus == [f"{g} ({hardware.GPU_TABLE[g].memory_vendor})" for g in gpus]
        for name in ("model", "count", "batch", "precision"):
            labels = root.locator(f'select[name="{name}"] option').all_inner_texts()
            assert labels and not [x for x in labels if "undefined" in x or "NaN" in x or "_" in x], (name, labels)
        for model, gpu, count, batch, precision in CHOICES:
            case = (model, gpu, count, batch, precision)
            chosen = [str(x) for x in (planner_form.MODELS.index(model), gpus.index(gpu), planner_form.COUNTS.index(count),
                                       planner_form.BATCH_TOKENS.index(batch), planner_form.precisions().index(precision))]
            for name, value in zip(("model", "gpu", "count", "batch", "precision"), chosen):
                root.locator(f'select[name="{name}"]').select_option(value)
            # a GPU's plans load when it is picked: wait until the form shows this choice
            page.wait_for_selector(f'.explorer[data-explorer="planner"][data-shown="{",".join(chosen)}"]', timeout=20_000)
            command = root.locator('[data-out="command"]').inner_text().strip()
            assert command == planner_form.command(planner_form.arguments(model, gpu, count, batch, precision)), case
            message = root.locator('[data-out="message"]')
            want = from_the_shell(command)
            if "error" in want:
                assert message.is_visible() and message.inner_text() == "The planner refuses this choice: " + want["error"]
                assert "\n" not in want["error"] and not root.locator('[data-out="layout"]').inner_text().strip(), case
                continue
            shown = json.loads(root.locator('[data-out="layout"]').get_attribute("data-layout"))
            assert shown == want["layout"], case
            text = lambda out: root.locator(f'[data-out="{out}"]').inner_text().strip()  # noqa: E731
            step = text("step")
            seconds = number(step) / (1000 if step.endswith("ms") else 1)
            assert seconds == pytest.approx(want["step_time_s"], rel=1e-3), case
            assert number(text("tps")) == pytest.approx(want["tokens_per_s"], rel=1e-4, abs=0.5), case
            assert number(text("mfu")) == pytest.approx(100 * want["predicted_mfu"], abs=0.051), case
            assert number(text("tps_gpu")) == pytest.approx(want["tokens_per_s_per_gpu"], rel=1e-4, abs=0.5), case
            assert number(text("tflops_gpu")) == pytest.approx(want["tflops_per_gpu"], rel=1e-4, abs=0.5), case
            shown_p = root.locator('[data-out="mfu_precision"]')
            assert shown_p.is_visible() == (precision != "bf16"), case
            if precision != "bf16":
                assert number(shown_p.inner_text()) == pytest.approx(100 * want["mfu_precision_peak"], abs=0.051), case
            assert number(text("days")) == pytest.approx(want["days"], rel=1e-3), case
            # in GiB, as the printout and the tables above the form; against what the GPU leaves
            # usable (CUDA's figure less the reserve), not the datasheet's GB
            held, of = text("memory").split(" of ")
            assert held.endswith(" GiB") and number(held) == pytest.approx(want["memory_per_gpu_bytes"] / 2**30,
                                                                          rel=1e-3), case
            assert of.endswith(" GiB usable") and number(of) == pytest.approx(want["memory"]["usable_bytes"] / 2**30,
                                                                               rel=1e-3), case
            assert message.is_visible() == (not want["memory"]["fits"]), case
            if not want["memory"]["fits"]:
                assert "does not fit" in message.inner_text(), case
            why = root.locator('[data-out="why"] li').all_inner_texts()
            assert why == want["why_others_lose"], case
            track = want["published_runs_like_this"]
            runs = root.locator('[data-out="track"] tr')
            assert runs.locator("th").all_inner_texts() == [r["name"] for r in track["runs"]], case
            shown_errors = [number(t) for t in runs.locator("td:nth-child(4)").all_inner_texts()]
            assert shown_errors == pytest.approx([100 * r["error"] for r in track["runs"]], abs=0.051), case
            if track["runs"]:
                assert track["match"] in text("track-caption") and not root.locator('[data-out="track-note"]').is_visible()
            else:
                assert "No published run" in text("track-note"), case
        overflow = page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth")
    finally:
        context.close()
    assert not outside, f"requests that left this machine: {outside}"
    assert not errors, f"console errors: {errors}"
    assert overflow <= 0, f"the page scrolls sideways by {overflow} px"
