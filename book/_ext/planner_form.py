"""The planner on the page: every plan the form can show, made at build time by the same
command a reader runs in a shell, ``python -m solutions.plan ... --json``.

For each choice of model, GPU type, GPU count, batch and precision the form offers,
:func:`plan_cli` calls :func:`solutions.plan.main` with the command-line arguments of that choice
and reads the JSON it prints (the planner's contract: ``predicted_mfu``, ``step_time_s``,
``tokens_per_s``, ``days``, ``memory_per_gpu_bytes``, ``layout``, ``breakdown_s``, ...). The form
(``book/_static/explore/explore.js``, ``plannerExplorer``) only looks the plans up, and shows
each with the command that reproduces it; ``tests/book/test_planner_form.py`` runs that command and
compares. Nothing here reads the planner's internals, so a new flag or a new GPU in
:mod:`solutions.plan` reaches the page at the next build:

* the GPUs are every one the planner plans (:data:`solutions.hardware.PLANNABLE`) that has the
  memory to train on (:data:`MIN_GPU_GB`), Ampere to Blackwell and AMD's Instinct;
* the precisions are :data:`PRECISIONS`; where a GPU lacks one (NVFP4 on an H100) the form shows
  the planner's one-line refusal, as the shell does.

The plans of one GPU ride in a script of their own (``chunks``), loaded when the reader picks it:
all of them together would be several megabytes for a phone to fetch.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import os
import shlex
from concurrent.futures import ProcessPoolExecutor

#: The models on the form: published shapes (``--arch``) at their own size, dense and two
#: mixtures of experts (whose experts the planner spreads with EP).
MODELS = ("Llama 3 8B", "Chinchilla", "Llama 3 70B", "GPT-3", "Llama 3 405B", "gpt-oss-120b", "DeepSeek-V3")
#: GPU counts: one server up to a frontier cluster.
COUNTS = (8, 64, 256, 1024, 4096, 16384)
#: Tokens per optimizer step (``--batch-tokens``): 1M, 4M and 16M (Llama 3 405B's main batch).
BATCH_TOKENS = (2**20, 2**22, 2**24)
#: GPUs with less memory than this are not offered (a T4 trains none of these models).
MIN_GPU_GB = 40
#: The precisions on the form (``--precision``), each with the words the form shows.
PRECISIONS = {"bf16": "BF16 mixed precision", "fp8": "FP8 (Hopper and later)",
              "mxfp8": "MXFP8 (Blackwell)", "nvfp4": "NVFP4 (Blackwell)"}
#: Significant digits kept of each number (the form shows at most four).
DIGITS = 5


def _sig(x):
    return float(f"{x:.{DIGITS}g}") if isinstance(x, float) else x


def _round(obj):
    if isinstance(obj, dict):
        return {k: _round(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_round(v) for v in obj]
    return _sig(obj)


def refusal(stderr: str) -> str:
    """The planner's one-line refusal without the program's name (``python -m solutions.plan: error: ``)."""
    return stderr.strip().partition("error: ")[2] or stderr.strip()


def plan_cli(argv: list[str]) -> dict:
    """``python -m solutions.plan *argv --json`` in this process: the plan's JSON object, or
    ``{"error": message}`` for the one-line error the command prints when it exits with 2."""
    from solutions import plan

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = plan.main([*argv, "--json"])
        except SystemExit as exc:  # argparse refuses an argument
            status = exc.code
    if status != 0:
        return {"error": refusal(err.getvalue()) or f"exit status {status}"}
    return json.loads(out.getvalue())


def precisions() -> list[str]:
    """The form's precisions, each a choice of the planner's ``--precision``."""
    from solutions import hardware

    unknown = set(PRECISIONS) - set(hardware.PRECISIONS)
    if unknown:
        raise ValueError(f"the form offers precisions the planner lacks: {sorted(unknown)}")
    return list(PRECISIONS)


def gpus() -> list[str]:
    """The GPUs the planner plans that hold at least :data:`MIN_GPU_GB` (what CUDA reports)."""
    from solutions import hardware

    return [name for name in hardware.PLANNABLE if hardware.GPU_TABLE[name].memory_bytes >= MIN_GPU_GB * 1e9]


def _e(x: float) -> str:
    """A count in engineering notation, as one types it: 70e9, 1.4e12, 160e9."""
    exponent = 3 * math.floor(math.log10(x) / 3)
    return f"{x / 10**exponent:g}e{exponent}"


def command(argv: list[str]) -> str:
    """The shell command of ``argv``: what a reader types to get the same plan as JSON."""
    return "python -m solutions.plan " + shlex.join([*argv, "--json"])


def arguments(model: str, gpu: str, count: int, batch_tokens: int, precision: str) -> list[str]:
    """The command-line arguments of one choice on the form (``--json`` left out). The model is
    trained on the Chinchilla rule's tokens per parameter, all of a mixture of experts' (they
    set the days, not the layout)."""
    from solutions import scaling

    params, active = model_size(model)
    size = [] if active else ["--model", _e(params)]  # a mixture of experts is planned at its own size
    argv = [*size, "--arch", model, "--tokens", _e(params * scaling.CHINCHILLA_TOKENS_PER_PARAM),
            "--gpu", gpu, "--count", str(count), "--batch-tokens", str(batch_tokens)]
    return argv + ["--precision", precision]


def model_size(model: str) -> tuple[float, float | None]:
    """Parameters stored and, for a mixture of experts, used per token."""
    from solutions import facts

    if model in facts.MOE_ARCHITECTURES:
        a = facts.MOE_ARCHITECTURES[model]
        return a.total_params, a.active_params
    return facts.ARCHITECTURES[model].params, None


#: What the form shows of a plan: keys of the planner's JSON (``solutions.plan.plan_json``).
KEPT = ("predicted_mfu", "mfu_precision_peak", "step_time_s", "tokens_per_s", "tokens_per_s_per_gpu", "tflops_per_gpu",
        "days", "memory_per_gpu_bytes", "memory", "layout", "breakdown_s", "global_batch", "microbatches", "steps",
        "alternatives", "why_others_lose", "advice")


#: The published runs like a plan (``published_runs_like_this``) depend on the model, the GPU and
#: the precision only: the form keeps them once per such choice, not once per plan.
TRACK = "published_runs_like_this"


def _one(argv: list[str]) -> dict:
    found = plan_cli(argv)
    kept = found if "error" in found else {k: found[k] for k in (*KEPT, TRACK) if k in found}
    return {**_round(kept), "command": command(argv)}


def _pack_tracks(plans: list[dict]) -> list[dict]:
    """Move every plan's runs-like-it into one list of distinct ones, each plan keeping its
    index there (``track``); a refused choice keeps none."""
    tracks, index = [], {}
    for p in plans:
        if TRACK in p:
            key = json.dumps(p.pop(TRACK), sort_keys=True)
            if key not in index:
                index[key] = len(tracks)
                tracks.append(json.loads(key))
            p["track"] = index[key]
    return tracks


def _pack_layouts(plans: list[dict]) -> list[str]:
    """Write every ``layout`` (the plan's and its alternatives') as a list of its values in the
    order of the returned keys, the first layout's: the table is a third smaller, and the page
    rebuilds each object from the keys, whatever keys the planner gives a layout."""
    keys = next((list(p["layout"]) for p in plans if "layout" in p), [])
    for p in plans:
        for holder in [p] + p.get("alternatives", []):
            if "layout" in holder:
                if list(holder["layout"]) != keys:
                    raise ValueError(f"a layout with other keys than {keys}: {list(holder['layout'])}")
                holder["layout"] = [holder["layout"][k] for k in keys]
    return keys


def planner_data(workers: int | None = None) -> dict:
    """The form's choices and, per GPU (``chunks``, in the order of ``gpus``), every plan of the
    grid, ``plans[model][count][batch][precision]``, with the published runs like them."""
    from solutions import hardware, scaling

    models, devices, precs = list(MODELS), gpus(), precisions()
    grid = [(m, g, n, b, p) for g in devices for m in models for n in COUNTS for b in BATCH_TOKENS for p in precs]
    argvs = [arguments(*choice) for choice in grid]
    workers = workers or min(2, os.cpu_count() or 1)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            found = list(pool.map(_one, argvs, chunksize=8))
    else:
        found = [_one(a) for a in argvs]
    layout_keys = _pack_layouts(found)
    per_gpu = len(models) * len(COUNTS) * len(BATCH_TOKENS) * len(precs)
    chunks = []
    for i in range(len(devices)):
        mine = found[i * per_gpu:(i + 1) * per_gpu]
        tracks = _pack_tracks(mine)
        flat = iter(mine)
        plans = [[[[next(flat) for _ in precs] for _ in BATCH_TOKENS] for _ in COUNTS] for _ in models]
        chunks.append({"tracks": tracks, "plans": plans})
    return {
        "models": [dict(zip(("name", "params", "active"), (m, *model_size(m)))) for m in models],
        "gpus": [{"name": g, "memory": hardware.GPU_TABLE[g].memory_vendor} for g in devices],  # "80 GB HBM3"
        "counts": list(COUNTS), "batch_tokens": list(BATCH_TOKENS),
        "precisions": [[p, PRECISIONS[p]] for p in precs],
        "tokens_per_param": scaling.CHINCHILLA_TOKENS_PER_PARAM,
        "layout_keys": layout_keys,
        "chunks": chunks,
        "defaults": {"model": "Llama 3 70B", "gpu": "H100 SXM" if "H100 SXM" in devices else devices[0],
                     "count": 1024, "batch_tokens": 2**22, "precision": precs[0]},
    }
