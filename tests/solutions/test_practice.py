"""The worked problems at the end of the sections.

Two parts:

- every section 1-8 and 10-12 ends with a "Practice" part of three to five problems, each
  followed by its answer in a dropdown, plus a "Takeaways" box, a link to the graded exercises
  and a box that sends the reader to the section's explorers, labs and assignments; no number
  is typed in an answer. In sections 1-8 every answer is glued from values that
  ``solutions.practice`` computed; in sections 10-12 from the section's own code (their design
  problems, like every section's, are checked in ``tests/solutions/test_design.py``);
- each problem's answer, as ``solutions.practice`` computes it, equals an independent
  calculation written out here from first principles (cited facts as inputs), to a relative
  tolerance of ``REL`` (the two sides differ only by floating-point rounding).
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from solutions import facts, practice

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = sorted((ROOT / "chapters").glob("0[1-8]-*.md"))
#: The sections after the core, with Practice parts of their own (09 is the exercises page).
FURTHER = sorted((ROOT / "chapters").glob("1[0-2]-*.md"))
PRACTISE = re.compile(r"^```\{admonition\} Practise this section\n:class: seealso\n(.*?)^```$", re.S | re.M)
REL = 1e-12

ANSWER = re.compile(r"^```\{admonition\} Answer\n:class: dropdown\n(.*?)^```$", re.S | re.M)
PROBLEM = re.compile(r"^\*\*(\d)\.\*\* ", re.M)
TAKEAWAYS = re.compile(r"^```\{admonition\} Takeaways\n:class: tip\n(.*?)^```$", re.S | re.M)
GLUE_ROLE = re.compile(r"\{glue:text\}`([\w:./-]+)`")
GLUE_CALL = re.compile(r"""glue\("(\w+)",\s*(.+?),\s*display=False\)""")


def practice_part(path: Path) -> str:
    text = path.read_text(encoding="utf-8")
    head, sep, part = text.rpartition("\n## Practice\n")
    assert sep, f"{path.name} has no '## Practice' part"
    assert "\n## " not in part, f"{path.name}: the Practice part must be the section's last"
    return part


def test_every_section_is_checked():
    assert [p.name[:2] for p in SECTIONS] == [f"0{i}" for i in range(1, 9)]
    assert [p.name[:2] for p in FURTHER] == ["10", "11", "12"]


@pytest.mark.parametrize("path", SECTIONS + FURTHER, ids=lambda p: p.stem)
def test_section_ends_with_practice(path):
    part = practice_part(path)
    numbers = [int(n) for n in PROBLEM.findall(part)]
    assert 3 <= len(numbers) <= 5, f"{path.name}: {len(numbers)} problems, want 3 to 5"
    assert numbers == list(range(1, len(numbers) + 1)), f"{path.name}: problems numbered {numbers}"
    answers = ANSWER.findall(part)
    assert len(answers) == len(numbers), f"{path.name}: {len(numbers)} problems, {len(answers)} answers"
    assert TAKEAWAYS.search(part), f"{path.name}: no Takeaways box (admonition, class tip)"
    assert "{doc}`09-exercises`" in part, f"{path.name}: the Practice part links no graded exercise"


@pytest.mark.parametrize("path", SECTIONS + FURTHER, ids=lambda p: p.stem)
def test_section_sends_the_reader_to_its_practice(path):
    """The section's last box names where to practise: an explorer or the planner, and a lab
    or an assignment, as links that the book resolves."""
    boxes = PRACTISE.findall(practice_part(path))
    assert len(boxes) == 1, f"{path.name}: want one 'Practise this section' box, found {len(boxes)}"
    box = boxes[0]
    assert practice_part(path).rstrip().endswith("```") or "<!--" in practice_part(path).rsplit("```", 1)[1], \
        f"{path.name}: the practise box must close the section"
    assert re.search(r"\{doc\}`[^`]*(/book/explore/\w+|planner)>?`", box), f"{path.name}: no explorer or planner linked"
    assert re.search(r"\{doc\}`[^`]*\.\./(labs|assignments)/[\w-]+`", box), f"{path.name}: no lab or assignment linked"
    for target in re.findall(r"\{doc\}`(?:[^`<]*<)?([^`>]+)>?`", box):
        base = ROOT if target.startswith("/") else path.parent
        assert (base / f"{target.lstrip('/')}.md").resolve().exists(), f"{path.name}: {target} does not exist"


@pytest.mark.parametrize("path", FURTHER, ids=lambda p: p.stem)
def test_further_answers_are_glued(path):
    part = practice_part(path)
    for i, body in enumerate(ANSWER.findall(part), start=1):
        assert GLUE_ROLE.findall(body), f"{path.name}, answer {i}: nothing glued"
        prose = GLUE_ROLE.sub(" ", body)
        prose = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", prose)
        prose = re.sub(r"`[^`]*`", " ", prose)
        prose = re.sub(r"\$[^$]+\$", " ", prose)
        typed = re.findall(r"(?<![\w/-])\d[\d.,]*(?![\w])", prose)
        assert not typed, f"{path.name}, answer {i}: numbers typed instead of glued: {typed}"


@pytest.mark.parametrize("path", SECTIONS, ids=lambda p: p.stem)
def test_answers_are_glued_from_solutions_practice(path):
    part = practice_part(path)
    glued_from_practice = {key for key, expr in GLUE_CALL.findall(part) if re.search(r"\bp\d\b", expr)}
    assignments = re.findall(r"^(p\d) = practice\.(\w+)\(", part, flags=re.M)
    assert assignments, f"{path.name}: the Practice cell calls nothing in solutions.practice"
    for name, function in assignments:
        assert callable(getattr(practice, function, None)), f"{path.name}: practice.{function} missing"
    for i, body in enumerate(ANSWER.findall(part), start=1):
        keys = GLUE_ROLE.findall(body)
        computed = [k for k in keys if k in glued_from_practice]
        assert computed, f"{path.name}, answer {i}: no value glued from solutions.practice"
        prose = GLUE_ROLE.sub(" ", body)
        prose = re.sub(r"\{[\w:-]+\}`[^`]*`", " ", prose)  # {doc}, {ref}, {eq}
        prose = re.sub(r"`[^`]*`", " ", prose)
        prose = re.sub(r"\$[^$]+\$", " ", prose)
        typed = re.findall(r"(?<![\w/-])\d[\d.,]*", prose)  # not names: ZeRO-1, H100
        assert not typed, f"{path.name}, answer {i}: numbers typed instead of glued: {typed}"


# --- each problem against an independent calculation ---------------------------------------

H100 = facts.GPUS["H100 SXM"]


def close(a, b):
    return math.isclose(a, b, rel_tol=REL)


def test_s01_state():
    r = practice.s01_state()
    P = r["params"]
    assert close(r["state12_gb"], P * (2 + 2 + 4 + 4) / 1e9)  # bf16 w, g; fp32 m, v
    assert close(r["state16_gb"], P * (2 + 2 + 4 + 4 + 4) / 1e9)  # + fp32 master weights
    assert r["fits12"] == (P * 12 <= H100.memory_gb * 1e9)


def test_s01_largest_model():
    r = practice.s01_largest_model()
    assert close(r["params"], H100.memory_gb * 1e9 / 16)
    assert close(r["params"] * 16, H100.memory_gb * 1e9)


def test_s01_training_days():
    r = practice.s01_training_days()
    seconds = 6 * r["params"] * r["tokens"] / (H100.peak_flops_per_s * r["mfu"])
    assert close(r["days"], seconds / (24 * 3600))


def test_s02_tenfold_params():
    r = practice.s02_tenfold_params()
    assert r["alpha"] == 0.076  # Kaplan et al. 2020, eq. 1.1
    assert close(r["loss_ratio"], math.exp(-0.076 * math.log(r["factor"])))
    assert close(r["per_doubling"] ** math.log2(r["factor"]), r["loss_ratio"])


def test_s02_kaplan_split():
    r = practice.s02_kaplan_split()
    assert close(r["n_growth"], r["budget_factor"] ** 0.73)  # Kaplan et al. 2020, eq. 6.1
    assert close(r["n_growth"] * r["d_growth"], r["budget_factor"])  # C = 6ND scales as N D


def test_s02_gpt3_ratio():
    r = practice.s02_gpt3_ratio()
    assert close(r["ratio"], 300e9 / 175e9)  # Brown et al. 2020: 175B parameters, 300B tokens
    assert close(r["flops"], 6 * 175e9 * 300e9)


def test_s03_twenty_tokens():
    r = practice.s03_twenty_tokens()
    N, D = r["params"], r["tokens"]
    assert close(6 * N * D, r["budget"]) and close(D / N, 20)


def test_s03_loss_of():
    r = practice.s03_loss_of()
    # Hoffmann et al. 2022, eq. 10 with its printed constants, at 70B parameters and 1.4T tokens.
    expected = 1.69 + 406.4 / 70e9 ** 0.34 + 410.7 / 1.4e12 ** 0.28
    assert close(r["loss"], expected)
    assert close(r["E"] + r["param_term"] + r["data_term"], expected)


def test_s03_budget_growth():
    r = practice.s03_budget_growth()
    a = 0.28 / (0.34 + 0.28)
    assert close(r["a"], a)
    assert close(r["n_growth"] * r["d_growth"], r["budget_factor"])
    # Brute force: the optimum at C and at 10 C along the iso-FLOP line, by golden-section search.
    def best_n(C):
        lo, hi = math.log(1e6), math.log(1e15)
        loss = lambda logn: 406.4 / math.exp(logn) ** 0.34 + 410.7 / (C / (6 * math.exp(logn))) ** 0.28
        for _ in range(200):
            m1, m2 = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
            lo, hi = (lo, m2) if loss(m1) < loss(m2) else (m1, hi)
        return math.exp((lo + hi) / 2)
    assert math.isclose(best_n(1e24) / best_n(1e23), r["n_growth"], rel_tol=1e-6)


def test_s04_fewest_gpus():
    r = practice.s04_fewest_gpus()
    state = r["params"] * 16
    assert close(r["state_gb"], state / 1e9)
    n = r["gpus"]
    assert n * H100.memory_gb * 1e9 >= state > (n - 1) * H100.memory_gb * 1e9


def test_s04_cluster_days():
    r = practice.s04_cluster_days()
    seconds = 6 * 70e9 * 1.4e12 / (r["num_gpus"] * H100.peak_flops_per_s * r["mfu"])
    assert close(r["days"], seconds / 86400)


def test_s04_accumulation():
    r = practice.s04_accumulation()
    assert r["steps"] * r["num_gpus"] * r["micro_batch"] * r["seq_len"] == r["batch_tokens"]


def test_s05_ring_bytes():
    r = practice.s05_ring_bytes()
    n, buffer = r["num_gpus"], r["params"] * 2
    # Ring all-reduce: n-1 reduce-scatter steps and n-1 all-gather steps, each sends buffer / n.
    assert close(r["sent_gb"], 2 * (n - 1) * (buffer / n) / 1e9)


def test_s05_ring_time():
    r = practice.s05_ring_time()
    sent = 2 * (r["num_gpus"] - 1) / r["num_gpus"] * r["params"] * 2
    assert close(r["nvlink_s"], sent / 450e9)  # NVLink on H100 SXM: 450 GB/s each way
    assert close(r["nic_s"], sent / 50e9)  # one 400 Gb/s port per GPU


def test_s05_ring_steps():
    r = practice.s05_ring_steps()
    assert r["steps_small"] == 2 * (r["small"] - 1) and r["steps_large"] == 2 * (r["large"] - 1)
    assert close(r["factor_large"], 2 * (r["large"] - 1) / r["large"])


def test_s06_bubble():
    r = practice.s06_bubble()
    p, m = r["stages"], r["microbatches"]
    # GPipe timeline: m + p - 1 slots per stage, of which m are busy.
    assert close(r["bubble"], 1 - m / (m + p - 1))


def test_s06_microbatches_for():
    r = practice.s06_microbatches_for()
    p, f = r["stages"], r["target"]
    assert r["microbatches"] == math.ceil((p - 1) * (1 - f) / f)  # (p-1)/(m+p-1) <= f
    assert r["bubble"] <= f


def test_s06_tp_bytes():
    r = practice.s06_tp_bytes()
    b, s, h, t = r["micro_batch"], r["seq_len"], r["d_model"], r["tp"]
    ring = 2 * (t - 1) / t
    assert r["allreduces"] == 4
    assert close(r["per_layer_gb"], 4 * b * s * h * 2 * ring / 1e9)  # bf16, four ring all-reduces
    assert close(r["per_model_gb"], r["per_layer_gb"] * r["layers"])


def test_s07_zero3():
    r = practice.s07_zero3()
    assert close(r["state_gb"], r["params"] * 16 / r["num_gpus"] / 1e9)


def test_s07_zero1():
    r = practice.s07_zero1()
    assert close(r["state_gb"], r["params"] * (4 + 12 / r["num_gpus"]) / 1e9)  # Rajbhandari et al. 2020


def test_s07_traffic_ratio():
    r = practice.s07_traffic_ratio()
    n, size = r["num_gpus"], r["params"] * 2
    assert close(r["fsdp_gb"], 3 * (n - 1) / n * size / 1e9)
    assert close(r["ddp_gb"], 2 * (n - 1) / n * size / 1e9)
    assert close(r["ratio"], 1.5)


def test_s08_layout():
    r = practice.s08_layout()
    assert r["tp"] * r["pp"] * r["dp"] == r["world"]
    with pytest.raises(ValueError, match="multiple"):
        practice.s08_layout(world=100, tp=8, pp=8)


def test_s08_state_3d():
    r = practice.s08_state_3d()
    shard = r["params"] / (r["tp"] * r["pp"])
    assert close(r["state_gb"], shard * (2 + 2 + 12 / r["dp"]) / 1e9)


def test_s08_tp_allreduces():
    r = practice.s08_tp_allreduces()
    assert r["per_step"] == (2 + 2) * r["layers"] * r["microbatches"]  # Shoeybi et al. 2019, sec. 3


def test_scientific_reads_as_a_power_of_ten():
    assert practice.scientific(1e24) == "10²⁴"
    assert practice.scientific(1.2e20) == "1.2×10²⁰"
    assert practice.scientific(3.149e-5, 2) == "3.15×10⁻⁵"
