"""The design problems at the end of the sections (solutions.design).

Two parts:

- every section 1-8 and 10-12 ends its Practice part with one or two design problems, each
  followed by a worked answer in a dropdown whose numbers are glued from values that
  ``solutions.design`` computed (no number typed in the answer; symbols in maths are fine);
- every step of every answer equals a calculation written out here by hand from cited inputs
  (relative tolerance REL: the two sides differ only by rounding), and the planner's part
  equals what ``solutions.plan.make_plan`` says for the same inputs.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from solutions import design, facts, plan, scaling

ROOT = Path(__file__).resolve().parents[2]
#: The sections whose design problems solutions.design computes (09 is the exercises page; a
#: section added later brings its own problem and joins this list with it).
SECTIONS = [ROOT / "chapters" / f"{name}.md" for name in (
    "01-single-gpu", "02-kaplan", "03-chinchilla", "04-why-distribute", "05-data-parallelism",
    "06-model-parallelism", "07-fsdp", "08-when-to-use-what", "10-beyond-3d", "11-after-chinchilla",
    "12-precision-and-kernels")]
REL = 1e-9

DESIGN = re.compile(r"^\*\*Design problem( \d)?\.\*\* ", re.M)
WORKED = re.compile(r"^```\{admonition\} Worked answer\n:class: dropdown\n(.*?)^```$", re.S | re.M)
GLUE_ROLE = re.compile(r"\{glue:text\}`([\w:./-]+)`")
GLUE_CALL = re.compile(r"""glue\("(\w+)",\s*(.+?),\s*display=False\)""")

H100 = facts.GPUS["H100 SXM"]
PEAK = H100.peak_flops_per_s
NVLINK, NIC = 450e9, 50e9


def close(a, b, rel=REL):
    return math.isclose(a, b, rel_tol=rel)


def practice_part(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    _, sep, part = text.rpartition("\n## Practice\n")
    assert sep, f"{path.name} has no '## Practice' part"
    return part


def test_the_sections_checked():
    assert [p.name[:2] for p in SECTIONS] == ["01", "02", "03", "04", "05", "06", "07", "08", "10", "11", "12"]


@pytest.mark.parametrize("path", SECTIONS, ids=lambda p: p.stem)
def test_each_section_has_worked_design_problems(path):
    part = practice_part(path)
    problems = DESIGN.findall(part)
    answers = WORKED.findall(part)
    assert 1 <= len(problems) <= 2, f"{path.name}: {len(problems)} design problems, want one or two"
    assert len(answers) == len(problems), f"{path.name}: {len(problems)} design problems, {len(answers)} worked answers"
    from_design = {key for key, expr in GLUE_CALL.findall(part) if re.search(r"\bd\d?\[", expr)}
    assert re.search(r"^d\d? = design\.\w+\(", part, re.M), f"{path.name}: no call to solutions.design"
    for i, body in enumerate(answers, start=1):
        steps = re.findall(r"^\d+\. ", body, re.M)
        assert len(steps) >= 3, f"{path.name}, design answer {i}: {len(steps)} numbered steps, want several"
        keys = GLUE_ROLE.findall(body)
        assert sum(k in from_design for k in keys) >= 3, f"{path.name}, design answer {i}: few values from solutions.design"
        prose = GLUE_ROLE.sub(" ", body)
        prose = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", prose)
        prose = re.sub(r"`[^`]*`", " ", prose)
        prose = re.sub(r"\$\$.*?\$\$", " ", prose, flags=re.S)
        prose = re.sub(r"\$[^$]+\$", " ", prose)
        prose = re.sub(r"^\d+\. ", " ", prose, flags=re.M)  # the steps' numbers
        typed = re.findall(r"(?<![\w/-])\d[\d.,]*(?![\w])", prose)  # not names: 1F1B, ZeRO-3
        assert not typed, f"{path.name}, design answer {i}: numbers typed instead of glued: {typed}"


# --- every step against a calculation by hand -------------------------------------------------

def test_d01_one_server():
    r = design.d01_one_server()
    assert close(r["state_gb"], 7e9 * 16 / 1e9) and close(r["sharded_gb"], 7e9 * 16 / 8 / 1e9)
    assert close(r["ridge"], 989.4e12 / 3.35e12)
    T, a, b = 4096, 4096, 14336  # Llama 3 8B: width 4,096, SwiGLU width 14,336
    assert close(r["intensity"], 2 * T * a * b / (2 * (T * a + a * b + T * b)))
    assert r["intensity"] > r["ridge"]  # compute-bound
    days = 6 * 7e9 * 1e12 / (8 * 989.4e12 * 0.4) / 86400
    assert close(r["days"], days)
    assert r["gpus_needed"] == math.ceil(8 * days / 30)


def test_d02_kaplan_or_chinchilla():
    r = design.d02_kaplan_or_chinchilla()
    C = 10 * 6 * 175e9 * 300e9
    N_k = 175e9 * 10 ** 0.73  # Kaplan et al. 2020, eq. 6.1
    assert close(r["kaplan_params"], N_k) and close(r["kaplan_tokens"], C / (6 * N_k))
    N_c = math.sqrt(C / 120)
    assert close(r["chin_params"], N_c) and close(r["chin_tokens"], 20 * N_c)
    loss = lambda N, D: 1.69 + 406.4 / N ** 0.34 + 410.7 / D ** 0.28  # noqa: E731  Hoffmann et al., eq. 10
    assert close(r["kaplan_loss"], loss(N_k, C / (6 * N_k))) and close(r["chin_loss"], loss(N_c, 20 * N_c))
    assert r["chin_loss"] < r["kaplan_loss"]
    assert r["kaplan_gpus"] == math.ceil(N_k * 16 / 80e9)


def test_d03_budget():
    r = design.d03_budget()
    C, a, b = 1e24, 0.34, 0.28
    # closed form: N = G (C/6)^(b/(a+b)), G = (a A / (b B))^(1/(a+b))
    G = (a * 406.4 / (b * 410.7)) ** (1 / (a + b))
    N = G * (C / 6) ** (b / (a + b))
    assert close(r["params"], N) and close(r["tokens"], C / (6 * N))
    assert close(r["small_tokens"], C / (6 * N / 4))
    assert r["loss"] < r["small_loss"] and r["loss"] < r["loss20"]
    assert close(r["days"], C / (1024 * 989.4e12 * r["mfu"]) / 86400)


def test_d04_three_reasons():
    r = design.d04_three_reasons()
    assert r["fewest_gpus"] == math.ceil(70e9 * 16 / 80e9)
    gpu_days = 6 * 70e9 * 15e12 / (989.4e12 * r["mfu"]) / 86400
    assert close(r["gpu_days"], gpu_days) and r["gpus"] == math.ceil(gpu_days / 60)
    assert r["sequences"] == 4 * 2**20 // 8192 and r["seqs_per_gpu"] < 1


def test_d05_data_parallel():
    r = design.d05_data_parallel()
    n, P, F = 256, 7e9, r["mfu"] * 989.4e12
    assert close(r["tokens_per_gpu"], 4 * 2**20 / n)
    assert close(r["threshold"], 2 * (n - 1) / n * 2 * F / (6 * NIC))
    assert close(r["compute_s"], 6 * P * r["tokens_per_gpu"] / F)
    assert close(r["comm_s"], 2 * (n - 1) / n * 2 * P / NIC)
    assert close(r["comm_s"] / r["compute_s"], r["ratio"])
    assert r["dp_max"] == int(4 * 2**20 // (2 * F / (6 * NIC) * 2))
    assert close(r["ddp_gb"], 16 * P / 1e9) and close(r["zero1_gb"], P * (4 + 12 / n) / 1e9)


def test_d06_tp_pp():
    r = design.d06_tp_pp()
    F, h = r["mfu"] * 989.4e12, 8192
    assert close(r["tp_nvlink"], 1 + 9 * h * NVLINK / (2 * F)) and close(r["tp_net"], 1 + 9 * h * NIC / (2 * F))
    assert close(r["tp8_share"], 2 * 7 * F / (9 * h * NVLINK)) and close(r["tp4_share"], 2 * 3 * F / (9 * h * NVLINK))
    assert close(r["A_state_gb"], 70e9 / 8 * (4 + 12 / 8) / 1e9)  # ZeRO-1 over DP8 of a TP8 slice
    assert close(r["B_state_gb"], 70e9 / 8 * (2 + 14 / 8) / 1e9)  # ZeRO-2 over DP8 of a TP4 x PP2 slice
    assert r["microbatches"] == 512 // 8 and close(r["bubble"], 1 / 64)
    assert r["A_fits"] and r["B_fits"] and not r["B1_fits"]
    p = plan.make_plan(model=70e9, tokens=15e12, gpu="H100", count=64, arch="Llama 3 70B", batch_tokens=4 * 2**20)
    assert r["plan_layout"] == f"TP{p.tp} × PP{p.pp} × DP{p.dp}" and close(r["plan_step_s"], p.step.step_s)


def test_d07_fsdp():
    r = design.d07_fsdp()
    n, F = 128, r["mfu"] * 989.4e12
    assert close(r["state_gb"], 13e9 * 16 / n / 1e9)
    assert close(r["threshold"], 3 * (n - 1) / n * 2 * F / (6 * NIC))
    assert r["mb"] * 4096 >= r["threshold"] > (r["mb"] - 1) * 4096
    assert close(r["hybrid_gb"], 13e9 * 16 / 8 / 1e9)
    cross = 2 * 15 / 16 * 2 * 13e9 / 8 / NIC  # each GPU all-reduces its eighth across 16 servers
    assert close(r["cross_s"], cross) and close(r["step_compute_s"], 6 * 13e9 * 4 * 4096 / F)


def test_d08_405b():
    r = design.d08_405b()
    F = r["mfu"] * 989.4e12
    assert r["tokens_per_gpu"] == 4 * 2**20 / 2048 < 8192
    assert r["replicas"] == 256 and r["seqs_per_replica"] == 2
    assert r["pp_a"] == 16 and r["m_a"] == 512 // 16 and close(r["bubble_a"], 15 / 32)
    assert close(r["state_a_gb"], 405e9 / 128 * (4 + 12 / 16) / 1e9)
    assert close(r["state_b_gb"], 405e9 * 16 / 2048 / 1e9)
    assert close(r["threshold_b"], 3 * 255 / 256 * 2 * F / (6 * NIC)) and r["tokens_mb"] > r["threshold_b"]
    assert close(r["step_s"], 6 * 405e9 * 4 * 2**20 / (2048 * F))
    p = plan.make_plan(model=405e9, tokens=15.6e12, gpu="H100", count=2048, arch="Llama 3 405B",
                       batch_tokens=4 * 2**20)
    assert r["plan_layout"] == f"TP{p.tp} × PP{p.pp} × DP{p.dp}" and close(r["plan_step_s"], p.step.step_s)


def test_d10_long_context():
    r = design.d10_long_context()
    h, f = 16384, 53248
    assert close(r["crossover"], 3 * f) and close(r["attn_over_mlp"], 6 * 131072 * h / (18 * h * f))
    kv = 8 * 128
    assert r["kv"] == kv and close(r["threshold"], 2 * 2 * 15 / 16 * kv / h * r["mfu"] * 989.4e12 / (3 * NIC))
    assert close(r["cp_ratio"], r["threshold"] / r["share"])


def test_d11_serve():
    r = design.d11_serve()
    assert close(r["budget"], 6 * 70e9 * 1.4e12)
    assert close(r["base_flops"], 6 * r["params"] * r["tokens"] + 2 * r["params"] * 2e13)
    assert close(r["new_flops"], 6 * r["new_params"] * r["new_tokens"] + 2 * r["new_params"] * 2e13)
    loss = lambda N, D: 1.69 + 406.4 / N ** 0.34 + 410.7 / D ** 0.28  # noqa: E731
    assert close(loss(r["new_params"], r["new_tokens"]), r["loss"], rel=1e-6)  # the same loss
    assert r["new_params"] < r["params"] and r["saving"] > 0
    assert close(r["epochs"], r["new_tokens"] / 4e12)


def test_d12_faster():
    r = design.d12_faster()
    assert close(r["time_ratio"], 0.2 + 0.8 / (1978.9 / 989.4))  # Amdahl: 20 % unchanged
    assert close(r["bubble_1f1b"], 7 / 16) and close(r["bubble_zb"], 7 / 48)
    assert r["span_1f1b"] == r["ideal"] + 7 * 3 and r["span_zb"] == r["ideal"] + 7 * 1
    assert r["flash_gb"] < r["std_gb"]


def test_constants_used_are_the_published_ones():
    assert scaling.KAPLAN_N_EXPONENT == 0.73
    assert design.LLAMA_MFU == 0.41  # Dubey et al. 2024, Table 4, 16,384 GPUs
    assert design.BATCH_4M == 4 * 2**20 and design.SEQ_8K == 8192
