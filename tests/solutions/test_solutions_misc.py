"""Tests for solutions._validate, compute, facts, layout and the package root."""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import solutions
from solutions import _validate as v
from solutions import compute, facts, layout, scaling

FAST = settings(max_examples=50, deadline=None)
BIB = Path(__file__).resolve().parents[2] / "book" / "references.bib"


# -- package root -----------------------------------------------------------
def test_package_exports_exercise_api():
    for name in ("chinchilla_loss", "compute_optimal", "memory_per_gpu", "communication_time_per_step"):
        assert name in solutions.__all__
        assert callable(getattr(solutions, name))
    for mod in ("scaling", "memory", "communication", "pipeline", "compute", "facts", "layout"):
        assert getattr(solutions, mod).__name__ == f"solutions.{mod}"


# -- validation helpers -----------------------------------------------------
def test_positive_returns_floats_and_arrays():
    assert v.positive("x", 3) == 3.0 and isinstance(v.positive("x", 3), float)
    arr = v.positive("x", [1, 2])
    assert arr.dtype == np.float64 and arr.tolist() == [1.0, 2.0]


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), -float("inf"), True, np.bool_(True),
                                 "1", None, [], [1.0, 0.0], {"a": 1}, 1j])
def test_positive_rejects(bad):
    with pytest.raises(ValueError, match="^x must be a positive finite number"):
        v.positive("x", bad)


@pytest.mark.parametrize("good, want", [(1, 1), (8.0, 8), (np.int32(4), 4), (np.float64(2.0), 2)])
def test_positive_integer_accepts(good, want):
    got = v.positive_integer("k", good)
    assert got == want and isinstance(got, int)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, False, float("nan"), float("inf"), "4", None, 2.0**60])
def test_positive_integer_rejects(bad):
    with pytest.raises(ValueError, match="^k must be a positive integer"):
        v.positive_integer("k", bad)


def test_nonnegative_integer_and_one_of_and_divides():
    assert v.nonnegative_integer("s", 0) == 0
    with pytest.raises(ValueError, match="s must be a non-negative integer"):
        v.nonnegative_integer("s", -1)
    assert v.one_of("mode", "a", ("a", "b")) == "a"
    with pytest.raises(ValueError, match=r"mode must be one of \('a', 'b'\), got 'c'"):
        v.one_of("mode", "c", ("a", "b"))
    with pytest.raises(ValueError, match="mode must be one of"):
        v.one_of("mode", ["a"], ("a", "b"))  # unhashable
    v.divides("n", 4, "P", 8e9)
    v.divides("n", 3, "P", 7.5)  # not whole: an average, not checked
    with pytest.raises(ValueError, match="n must divide P exactly"):
        v.divides("n", 3, "P", np.array([9e9, 1e9]))


@pytest.mark.parametrize("text, want", [("70B", 70e9), ("70b", 70e9), ("1.4T", 1.4e12), ("350M", 350e6),
                                         ("32k", 32e3), ("7e9", 7e9), (" 8B ", 8e9), ("1_000", 1000.0)])
def test_count_with_suffix_reads_what_people_write(text, want):
    assert v.count_with_suffix(text) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("x", [350e6, 8.19e3, 70e9, 1.4e12])
def test_count_with_suffix_reads_back_what_the_printouts_write(x):
    from solutions import _format
    assert v.count_with_suffix(_format.count(x)) == pytest.approx(x, rel=5e-3)  # three figures


@pytest.mark.parametrize("bad", ["", "B", "7X", "seventy", "7BB"])
def test_count_with_suffix_rejects_in_one_line(bad):
    with pytest.raises(ValueError, match="^expected a number such as 70e9, 70B, 1.4T or 350M, got "):
        v.count_with_suffix(bad)


# -- compute ----------------------------------------------------------------
def test_training_time_chapter_figures():
    # FACTS: 7B on 1T tokens = 4.2e22 FLOPs, ~1.3 years on one ~1000 TFLOP/s GPU;
    # 70B on 1.4T = 5.88e23 FLOPs, 18.6 years at 1e15 FLOP/s.
    year = 365.25 * 24 * 3600  # a Julian year
    assert compute.SECONDS_PER_YEAR == year
    c7 = scaling.training_flops(7e9, 1e12)
    assert c7 == pytest.approx(4.2e22)
    assert compute.training_time_seconds(c7, 1e15) == pytest.approx(4.2e7)
    assert compute.training_time_seconds(c7, 1e15) / year == pytest.approx(1.33, abs=0.01)
    c70 = scaling.training_flops(70e9, 1.4e12)
    assert compute.training_time_seconds(c70, 1e15) / year == pytest.approx(18.6, abs=0.05)
    # More GPUs and lower MFU scale it as expected.
    t1 = compute.training_time_seconds(c70, 989.4e12)
    assert compute.training_time_seconds(c70, 989.4e12, mfu=0.4, num_gpus=1000) == pytest.approx(t1 / 400)


def test_flops_per_token_and_mfu():
    assert compute.flops_per_token(7e9) == 42e9
    # PaLM App. B: 6N + 12 L s h.
    assert compute.flops_per_token(1e9, n_layers=24, seq_len=2048, d_model=2048) == pytest.approx(
        6e9 + 12 * 24 * 2048 * 2048)
    # 1,000 tokens/s of a 1B model (6e12 FLOP/s) on 12e12 FLOP/s peak = 50%.
    assert compute.model_flops_utilization(1000, 6e9, 12e12) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="together"):
        compute.flops_per_token(1e9, n_layers=24)
    with pytest.raises(ValueError, match="mfu"):
        compute.training_time_seconds(1e20, 1e15, mfu=1.5)
    with pytest.raises(ValueError, match="num_gpus"):
        compute.training_time_seconds(1e20, 1e15, num_gpus=0)
    with pytest.raises(ValueError, match="peak_flops_per_s"):
        compute.model_flops_utilization(1000, 6e9, float("inf"))


def test_mfu_recovers_mtnlg_throughput():
    # Smith et al. 2022 report 126 TFLOP/s per A100 on 2,240 GPUs; against the
    # A100's 312 TFLOP/s peak that is ~40% hardware FLOPs utilisation.
    lay = facts.LAYOUTS[0]
    assert (lay.model, lay.num_gpus, lay.tflops_per_gpu) == ("MT-NLG", 2240, 126)
    assert facts.GPUS["A100 80GB"].peak_flops_per_s == 312e12
    # Worked by hand: 126e12 x 2240 = 2.8224e17 FLOP/s over 6 x 530e9 = 3.18e12 FLOPs per
    # token is 88,754.7 tokens/s; against 2240 x 312e12 = 6.9888e17 FLOP/s of peak: 40.38%.
    util = compute.model_flops_utilization(88_754.7, 3.18e12, 6.9888e17)
    assert util == pytest.approx(0.40385, abs=1e-5)


# -- facts ------------------------------------------------------------------
def _bib_keys():
    return set(re.findall(r"@\w+\{([^,\s]+),", BIB.read_text(encoding="utf-8")))


def _all_cites():
    yield from (g.cite for g in facts.GPUS.values())
    yield from (i.cite for i in facts.INTERCONNECTS.values())
    yield from (m.cite for m in facts.MODELS.values())
    yield from (lay.cite for lay in facts.LAYOUTS)
    yield from (a.cite for a in facts.ARCHITECTURES.values())
    yield from (r.cite for r in facts.PUBLISHED_RUNS + facts.HELDOUT_RUNS + facts.OTHER_STACK_RUNS)
    yield facts.LLAMA3_405B_BATCH_SCHEDULE.cite
    yield from (facts.GPT_OSS_KERNEL_REGRESSION[k] for k in ("cite", "kernel_cite"))
    yield from (facts.GPT_OSS_SINK_ATTENTION[k] for k in ("te_cite", "container_cite"))
    yield from (row["cite"] for row in facts.MFU.values())
    yield facts.ZERO_EXAMPLE["cite"]
    yield from (c.cite for c in scaling.CONSTANT_SETS.values())
    yield from (r.cite for r in scaling.HOFFMANN_APPROACH_EXPONENTS.values())
    from solutions.memory import BYTE_CONVENTIONS
    yield from (c.cite for c in BYTE_CONVENTIONS.values())


def test_every_cite_key_is_in_the_bibliography():
    # No skip: the bibliography is part of the repository, so a missing file is a failure.
    assert BIB.is_file(), f"{BIB.relative_to(BIB.parents[1])} is missing"
    keys = _bib_keys()
    assert len(keys) > 10
    missing = {c for c in _all_cites() if c not in keys}
    assert not missing


def test_fact_figures():
    assert facts.GPUS["H100 SXM"].peak_flops_per_s == 989.4e12
    assert facts.GPUS["H200"].peak_flops_per_s == facts.GPUS["H100 SXM"].peak_flops_per_s
    assert facts.GPUS["H200"].memory_gb == 141
    chinchilla = facts.MODELS["Chinchilla"]
    assert chinchilla.tokens / chinchilla.params == 20
    llama = facts.MODELS["Llama 3 405B"]
    # 6ND = 3.79e25, consistent with the reported 3.8e25 FLOPs.
    assert scaling.training_flops(llama.params, llama.tokens) == pytest.approx(llama.training_flops, rel=0.01)


def test_mtnlg_layouts_and_the_17920_erratum():
    mt = [lay for lay in facts.LAYOUTS if lay.model == "MT-NLG"]
    assert [lay.dp for lay in mt] == [8, 10, 12]
    assert all((lay.tp, lay.pp) == (8, 35) for lay in mt)
    assert [lay.num_gpus for lay in mt] == [2240, 2800, 3360]  # 280 GPUs per replica
    # The often-quoted 8 x 35 x 64 = 17,920 GPUs is four times Selene (560 DGX A100 nodes
    # x 8 GPUs = 4,480), which held every reported run.
    assert (facts.SELENE.nodes, facts.SELENE.gpus_per_node, facts.SELENE.num_gpus) == (560, 8, 4480)
    assert max(lay.num_gpus for lay in mt) <= facts.SELENE.num_gpus < 17_920


def test_llama3_layouts_use_at_most_16k_gpus():
    ll = [lay for lay in facts.LAYOUTS if lay.model.startswith("Llama 3")]
    assert max(lay.num_gpus for lay in ll) == 16384
    assert [lay.mfu for lay in ll] == [0.43, 0.41, 0.38]


def test_layout_rejects_inconsistent_entry():
    with pytest.raises(ValueError):
        facts.Layout("x", 100, 8, 2, 2, "x")


# -- layout -----------------------------------------------------------------
@FAST
@given(tp=st.integers(1, 4), pp=st.integers(1, 4), dp=st.integers(1, 4))
def test_process_grid_groups_partition_the_world(tp, pp, dp):
    world = tp * pp * dp
    grid = layout.process_grid(world, tp, pp, dp)
    assert grid.shape == (dp, pp, tp)
    for groups, size in ((layout.tp_groups(grid), tp), (layout.pp_groups(grid), pp), (layout.dp_groups(grid), dp)):
        assert all(len(g) == size for g in groups)
        assert sorted(r for g in groups for r in g) == list(range(world))
    # coordinates() inverts the grid.
    for rank in range(world):
        d, p, t = layout.coordinates(grid, rank)
        assert grid[d, p, t] == rank


def test_process_grid_tp_ranks_are_adjacent():
    grid = layout.process_grid(16, tp=4, pp=2, dp=2)
    assert layout.tp_groups(grid)[0] == [0, 1, 2, 3]
    assert layout.pp_groups(grid)[0] == [0, 4]
    assert layout.dp_groups(grid)[0] == [0, 8]
    assert layout.coordinates(grid, 13) == (1, 1, 1)


@pytest.mark.parametrize(
    "args, match",
    [((16, 4, 2, 3), "world_size"), ((0, 1, 1, 1), "world_size"), ((8, 0, 2, 4), "tp"), ((8, 2, True, 4), "pp")],
)
def test_process_grid_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        layout.process_grid(*args)
    with pytest.raises(ValueError, match="rank"):
        layout.coordinates(layout.process_grid(4, 2, 2, 1), 4)


def test_architectures_are_consistent_with_models():
    for name, arch in facts.ARCHITECTURES.items():
        assert arch.d_model % arch.heads == 0
        if name in facts.MODELS:
            assert facts.MODELS[name].params == arch.params
        # 12 L h^2 (Kaplan et al. 2020, Table 1) approximates the non-embedding
        # parameter count to within a factor of two for every model listed
        # (GQA and gated MLPs change the constant).
        approx = 12 * arch.layers * arch.d_model**2
        assert 0.5 < approx / arch.params < 2, name
    assert facts.ARCHITECTURES["Chinchilla"].layers == 80
    sizes = [a.params for n, a in facts.ARCHITECTURES.items() if n.startswith("Llama 3")]
    assert sizes == [8e9, 70e9, 405e9]


def test_llama3_batch_schedule():
    first, second, last = facts.LLAMA3_405B_BATCH_SCHEDULE.stages
    assert first[0] == first[1] * 1024  # 1,024 sequences of 4,096 tokens
    assert second[0] == 2 * first[0] and last[0] == 4 * first[0]
    assert first[2] < second[2] < last[2] < facts.MODELS["Llama 3 405B"].tokens
