"""The planner's command line driven in-process with random flags, and the contract every answer
keeps: exit 0 or 2; on 2 one line on stderr and nothing on stdout; on 0 with --json a strict
JSON object (no NaN or Infinity) whose throughput is positive and finite and whose memory and
step time are finite and not negative. ``test_plan_fuzz.py`` runs it; for a longer run:

    PLAN_FUZZ_EXAMPLES=3000 pytest -q tests/solutions/test_plan_fuzz.py
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import time

from hypothesis import strategies as st

from solutions import facts, hardware, plan

#: Values no flag takes: each is a kind of mistake a user (or a script) makes.
BAD = ("0", "-1", "-3", "1e30", "nan", "inf", "-inf", "", "abc", "1.5", "2**4", " ", "1e308", "1e-300", "5e-324",
       "9" * 40, ",")

#: Flags and values that a plan can take, mixed with :data:`BAD` by the strategy.
VALID = {
    "--gpu": [*hardware.PLANNABLE, "h100", "A100", "GB200 NVL72", "V100", "Z100", "TPUv5"],
    "--count": ["1", "2", "8", "12", "64", "256", "1024", "16384"],
    "--precision": [*hardware.PRECISIONS, "FP8", "NVFP4", "int8"],
    "--overlap": ["default", "none", "all", "tp,dp,ep", "tp,nope", ",", "tp,tp"],
    "--mfu": ["0.4", "1", "2", "0.0001", "1e-300"],
    "--tp": ["1", "2", "4", "8", "16", "3"],
    "--cp": ["1", "2", "4", "3", "16"],
    "--pp": ["1", "2", "4", "8", "16", "7", "200"],
    "--dp": ["1", "2", "8", "128", "5"],
    "--ep": ["1", "2", "8", "64", "96", "256"],
    "--etp": ["1", "2", "3"],
    "--zero": ["0", "1", "2", "3", "4"],
    "--virtual-stages": ["1", "2", "4", "5"],
    "--schedule": ["1f1b", "gpipe", "interleaved", "zb-h1", "zb-h2", "1F1B", "pipedream"],
    "--seq-len": ["1", "128", "2048", "4096", "8190", "8192", "32768", "131072"],
    "--global-batch": ["1", "3", "64", "512", "2048"],
    "--micro-batch": ["1", "2", "4", "8", "3", "64"],
    "--layers": ["1", "2", "24", "32", "80", "2000"],
    "--hidden": ["64", "1024", "4096", "8192", "4097"],
    "--heads": ["1", "8", "32", "64", "7"],
    "--kv-heads": ["1", "8", "32", "5"],
    "--head-dim": ["64", "128", "96"],
    "--ffn-hidden": ["256", "11008", "28672"],
    "--mlp": ["gelu", "swiglu", "relu", "SwiGLU"],
    "--vocab": ["1", "32000", "128256"],
    "--experts": ["1", "8", "64", "256", "7"],
    "--top-k": ["1", "2", "8", "9", "300"],
    "--expert-ffn-hidden": ["512", "2048", "14336"],
    "--shared-experts": ["0", "1", "2"],
    "--dense-layers": ["0", "1", "3", "100"],
    "--moe-layer-freq": ["1", "2", "3"],
    "--imbalance": ["1", "1.3", "0.5", "100"],
    "--ep-dispatch": ["alltoall", "deepep", "hybridep", "DeepEP", "nccl"],
    "--expert-kernels": ["grouped", "fused", "eager"],
    "--offload-layers": ["0", "1", "2", "100"],
    "--recompute": ["none", "selective", "full", "some", "layernorm,moe_act", "core_attn", "mlp,,"],
    "--attention": ["flash", "standard", "sparse"],
    "--attention-precision": ["bf16", "fp8", "fp4"],
    "--network-gbps": ["100", "400", "3200", "0.001", "1e-300"],
    "--convention": ["zero_16", "chapter_12", "adam8bit_10", "fp32_adamw_16", "bytes"],
    "--constants": ["epoch_2024", "hoffmann_rounded", "hoffmann_precise", "exercise", "kaplan"],
    "--batch-tokens": ["1", "4096", "1M", "4M", "16777216", "1T"],
    "--inference-tokens": ["0", "1e12", "10T", "1e20", "1e40", "1e300"],
}
SIZES = {
    "--budget": ["1e18", "1e21", "5.88e23", "1e25", "1e27"],
    "--model": ["1e6", "125M", "7e9", "70B", "405e9", "1T", "1e15", "2e15"],
    "--tokens": ["1e6", "1e9", "1.4T", "15.6e12", "1e20", "1e290"],
    "--arch": [*facts.ARCHITECTURES, *facts.MOE_ARCHITECTURES, "llama3-8b", "deepseek v3", "GPT-5", ""],
}


@st.composite
def _value(draw, flag, table):
    # mostly values a plan can take, so that the search runs, and one flag in six a mistake
    return draw(st.sampled_from(BAD if draw(st.integers(0, 5)) == 0 else table[flag]))


def _pair(flag, value):
    """``--flag value``, or ``--flag=value`` (the only way argparse takes a value such as -3 or -inf)."""
    return st.sampled_from([[f"{flag}={value}"], [flag, value]]) if value[:1] != "-" or value == "-1" \
        else st.just([f"{flag}={value}"])


@st.composite
def argvs(draw):
    """A command line: a way to name the run (budget; model and tokens; a published design and
    tokens; a shape of one's own and tokens; or nothing), then any of the other flags."""
    argv = []
    how = draw(st.sampled_from(["budget", "model", "model", "arch", "arch", "shape", "none"]))
    base = {"budget": ["--budget"], "model": ["--model", "--tokens"], "arch": ["--arch", "--tokens"],
            "shape": ["--tokens"], "none": []}[how]
    for flag in base:
        argv += draw(_pair(flag, draw(_value(flag, SIZES))))
    if how == "shape":
        for flag in ("--layers", "--hidden", "--heads"):
            argv += draw(_pair(flag, draw(_value(flag, VALID))))
    extra = draw(st.lists(st.sampled_from(sorted(VALID)), max_size=6, unique=True))
    for flag in extra:
        argv += draw(_pair(flag, draw(_value(flag, VALID))))
    if draw(st.booleans()):
        argv.append("--json")
    return argv


def run(argv):
    """``(status, stdout, stderr, seconds)`` of ``python -m solutions.plan ARGV``, in this process.
    An exception that escapes ``main`` is the contract broken: it propagates."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = plan.main(argv)
        except SystemExit as exc:  # argparse's own errors and --help
            status = exc.code
    return status, out.getvalue(), err.getvalue(), time.perf_counter() - start


def _given(argv):
    """The flags of ``argv`` and their values, as ``{name: text}`` with ``-`` read as ``_``."""
    out, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if "=" in a:
            k, v = a.split("=", 1)
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            k, v = a, argv[i + 1]
            i += 1
        else:
            k, v = a, ""
        out[k.lstrip("-").replace("-", "_")] = v
        i += 1
    return out


def _strict(token):
    raise ValueError(f"{token} is not JSON")


def _numbers(obj, where="plan"):
    """Every number in a JSON object, with where it is."""
    if isinstance(obj, bool):
        return
    if isinstance(obj, (int, float)):
        yield where, obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _numbers(v, f"{where}[{i}]")


def check(argv):
    """Run ``argv`` and assert the contract; returns ``(status, seconds)``."""
    status, out, err, seconds = run(argv)
    assert status in (0, 2), (argv, status, err)
    assert "Traceback" not in err, (argv, err)
    if status == 2:
        lines = err.splitlines()
        assert out == "" and len(lines) == 1 and lines[0].strip(), (argv, out, err)
        assert lines[0].startswith(f"{plan.PROG}: error: "), (argv, err)
        return status, seconds
    assert err == "", (argv, err)
    if "--json" not in argv:
        words = set(out.replace(",", " ").replace("(", " ").replace(")", " ").split())
        assert not words & {"nan", "inf", "-inf", "nan%", "inf%"}, (argv, out)
        return status, seconds
    try:
        data = json.loads(out, parse_constant=_strict)
    except ValueError as exc:
        raise AssertionError(f"{argv}: not strict JSON: {exc}") from None
    for where, x in _numbers(data):
        assert math.isfinite(x), (argv, where, x)
    assert 0 < data["tokens_per_s"] and 0 < data["tokens_per_s_per_gpu"], argv
    assert 0 <= data["memory_per_gpu_bytes"] and 0 < data["step_time_s"] and 0 < data["days"], argv
    # what the plan says it did is what it did: the layout covers the GPUs, keeps what was given
    lay, given = data["layout"], _given(argv)
    assert lay["tp"] * lay["cp"] * lay["pp"] * lay["dp"] == data["count"], (argv, lay)
    for flag in ("tp", "cp", "pp", "dp", "ep", "zero", "micro_batch", "virtual_stages"):
        if flag in given:
            assert str(lay[flag]) == given[flag], (argv, flag, lay)
    if "seq_len" in given:
        assert str(data["shape"]["seq_len"]) == given["seq_len"], argv
    if "count" in given:
        assert str(data["count"]) == given["count"], argv
    assert data["memory"]["fits"] == (data["memory_per_gpu_bytes"] <= data["memory"]["usable_bytes"]), argv
    return status, seconds
