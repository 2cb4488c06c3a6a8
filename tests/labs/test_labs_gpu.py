"""What the labs do on a GPU, checked on CPU: the precision picked per GPU, the peak FLOP/s
that MFU divides by, the timed steps (nothing but training in them), the launcher's answers
to bad input, the backend that torchrun nodes agree on, and the GPU check's summary.

Expected peaks are the vendors' datasheet figures typed here, not read from the table under
test.
"""
from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import pytest
import torch

from labs import gpu_check, launch
from solutions import hardware

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- precision and peaks

# (name torch reports, compute capability) -> what --dtype auto trains in, and its dense peak.
GPUS_SEEN = [
    ("Tesla T4", (7, 5), "fp16", 65e12),               # Colab, Kaggle
    ("Tesla V100-SXM2-16GB", (7, 0), "fp16", 125e12),
    ("NVIDIA L4", (8, 9), "bf16", 121e12),              # Colab
    ("NVIDIA A10G", (8, 6), "bf16", 70e12),             # AWS g5
    ("NVIDIA A100-SXM4-80GB", (8, 0), "bf16", 312e12),
    ("NVIDIA A100-PCIE-40GB", (8, 0), "bf16", 312e12),
    ("NVIDIA H100 80GB HBM3", (9, 0), "bf16", 989.4e12),
    ("NVIDIA H100 PCIe", (9, 0), "bf16", 756e12),
    ("NVIDIA H100 NVL", (9, 0), "bf16", 835.5e12),
    ("NVIDIA H200", (9, 0), "bf16", 989.4e12),
    ("NVIDIA B200", (10, 0), "bf16", 2.25e15),
    ("AMD Instinct MI300X", (9, 4), "bf16", 1307.4e12),
]


@pytest.mark.parametrize("name,capability,dtype,peak", GPUS_SEEN)
def test_auto_dtype_and_its_peak_per_gpu(name, capability, dtype, peak):
    chosen, reason = hardware.choose_dtype("auto", "cuda", capability)
    assert chosen == dtype, reason
    found = hardware.peak_flops(name, chosen)
    assert found is not None and found.flops_per_s == pytest.approx(peak, rel=1e-9)
    assert found.dtype == dtype and found.cite


def test_dtype_choice_edges():
    assert hardware.choose_dtype("auto", "cpu") == ("fp32", "CPU")
    assert hardware.choose_dtype("auto", "cuda", (6, 0))[0] == "fp32"  # P100: no tensor cores
    assert "gradient scaler" in hardware.choose_dtype("auto", "cuda", (7, 5))[1]
    assert hardware.choose_dtype("fp32", "cuda", (9, 0)) == ("fp32", "requested")
    assert hardware.choose_dtype("fp16", "cpu") == ("fp16", "requested")
    assert "emulated" in hardware.choose_dtype("bf16", "cuda", (7, 5))[1]
    for bad in [("fp8", "cuda", (9, 0)), ("auto", "tpu", None), ("auto", "cuda", None), ("auto", "cuda", (9,))]:
        with pytest.raises(ValueError):
            hardware.choose_dtype(*bad)


def test_fp32_peaks_are_the_cuda_core_figures():
    # PyTorch leaves TF32 off for matmuls: an fp32 run is measured against plain FP32.
    assert hardware.peak_flops("Tesla T4", "fp32").flops_per_s == 8.1e12
    assert hardware.peak_flops("NVIDIA A100-SXM4-40GB", "fp32").flops_per_s == 19.5e12
    assert hardware.peak_flops("NVIDIA H100 80GB HBM3", "fp32").flops_per_s == 67e12
    # No native bf16 on Turing and Volta: no peak, so no MFU, rather than a wrong one.
    assert hardware.peak_flops("Tesla T4", "bf16") is None
    assert hardware.peak_flops("Tesla V100-PCIE-32GB", "bf16") is None


def test_gpu_names_match_exactly():
    assert hardware.peak_flops(" Tesla T4 ", "fp16").gpu == "T4"
    for near_miss in ["Quadro T400", "T4", "NVIDIA T4", "NVIDIA H100", "H100 NVL", "NVIDIA A100", "NVIDIA L40S", ""]:
        assert hardware.lookup(near_miss) is None, near_miss
        assert hardware.peak_flops(near_miss, "bf16") is None
    assert hardware.lookup("NVIDIA H100 NVL").name == "H100 NVL"  # not the SXM part
    with pytest.raises(ValueError, match="dtype"):
        hardware.peak_flops("Tesla T4", "int8")
    with pytest.raises(ValueError, match="device_name"):
        hardware.lookup(None)


def test_every_peak_is_cited_and_device_names_are_unique():
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    keys = set(re.findall(r"@\w+\{([^,\s]+),", bib))
    names = [n for a in hardware.ACCELERATORS.values() for n in a.device_names]
    assert len(names) == len(set(names))
    for acc in hardware.ACCELERATORS.values():
        assert acc.cite in keys, acc.name
        assert set(acc.peak_flops_per_s) == set(hardware.DTYPES)
        # 16-bit tensor peaks are at least twice the fp32 peak on every GPU listed (A10G: 2x).
        sixteen = acc.peak_flops_per_s["fp16"]
        assert sixteen >= 2 * acc.peak_flops_per_s["fp32"], acc.name


def test_device_peak_says_why_there_is_no_mfu(monkeypatch):
    from labs import training

    cuda = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Quadro T400")
    peak, note = training.device_peak(cuda, torch.bfloat16)
    assert peak is None and "unknown GPU: MFU not computed" in note and "Quadro T400" in note
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    peak, note = training.device_peak(cuda, torch.float32)
    assert peak.flops_per_s == 8.1e12 and note == ""
    metrics = training.mfu_metrics(1000.0, 6e6, 2, cuda, torch.float16)
    assert metrics["mfu"] == pytest.approx(1000.0 * 6e6 / (2 * 65e12))
    assert metrics["peak_flops_per_s"] == 65e12
    assert "no native bf16" in training.device_peak(cuda, torch.bfloat16)[1]
    assert training.device_peak(torch.device("cpu"), torch.float32)[0] is None


def test_small_rates_keep_their_digits():
    from labs.training import format_mfu, format_rate

    assert format_mfu({"mfu": 4.5e-5}) == "MFU 0.0045%"  # not "0.0%"
    assert format_mfu({"mfu": 0.4123}) == "MFU 41.2%"
    assert format_mfu({"mfu_note": "unknown GPU: MFU not computed"}) == "unknown GPU: MFU not computed"
    assert format_rate(123456.7) == "123,457" and format_rate(12.345) == "12.3"


# --------------------------------------------------------------------------- timed steps


def _steps_arg(**kw):
    from labs.training import add_model_args

    parser = add_model_args(argparse.ArgumentParser())
    defaults = dict(steps=4, d_model=32, n_layer=1, n_head=2, block_size=16, batch_per_rank=2)
    defaults.update(kw)
    return parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in defaults.items()])


def test_check_and_timed_steps_split():
    from labs.training import split_steps

    assert split_steps(20, None) == 10 and split_steps(3, None) == 1 and split_steps(1, None) == 1
    assert split_steps(10, 9) == 9
    with pytest.raises(ValueError, match="--check-steps"):
        split_steps(10, 10)
    with pytest.raises(ValueError, match="--check-steps"):
        split_steps(10, 0)


@pytest.fixture
def one_rank_group():
    """A one-rank gloo process group in this process, so a lab's loop can be run and watched."""
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    try:
        yield launch.RankContext(0, 1, 0, "gloo", "test", torch.device("cpu"))
    finally:
        dist.destroy_process_group()


def _active_dispatch_modes() -> int:
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return len(_get_current_dispatch_mode_stack())


@pytest.mark.parametrize("strategy", ["dp", "fsdp"])
def test_fsdp_lab_timed_steps_hold_only_the_training_step(monkeypatch, one_rank_group, strategy):
    from labs import fsdp
    from labs.data import load_corpus
    from labs.training import configs_from_args

    events = []
    real_train_step, real_fwd_bwd = fsdp.train_step, fsdp.forward_backward

    def timed(*a, **k):
        events.append(("timed", _active_dispatch_modes()))
        return real_train_step(*a, **k)

    def checked(model, *a, **k):
        events.append(("reference" if type(model).__name__ == "GPT" else "checked", _active_dispatch_modes()))
        return real_fwd_bwd(model, *a, **k)

    monkeypatch.setattr(fsdp, "train_step", timed)
    monkeypatch.setattr(fsdp, "forward_backward", checked)
    corpus = load_corpus()
    mcfg, tcfg = configs_from_args(_steps_arg(steps=5), corpus.vocab_size)
    out = fsdp.run_phase(strategy, one_rank_group, corpus, mcfg, tcfg, torch.float32,
                         reference=strategy == "fsdp", checked=2)
    kinds = [k for k, _ in events]
    first_timed = kinds.index("timed")
    assert kinds[first_timed:] == ["timed"] * 3  # no check, no reference after timing starts
    assert all(modes == 0 for k, modes in events if k == "timed")  # no dispatch mode when timed
    assert all(modes == 1 for k, modes in events if k == "checked")  # the counter, when checking
    assert kinds.count("reference") == (2 if strategy == "fsdp" else 0)
    assert out["timed_steps"] == 3 and out["checked_steps"] == 2 and len(out["step_seconds_all"]) == 3


def test_ddp_lab_timed_steps_hold_only_the_training_step(monkeypatch, one_rank_group):
    from labs import ddp

    events = []
    real_train_step, real_fwd_bwd = ddp.train_step, ddp.forward_backward
    monkeypatch.setattr(ddp, "train_step", lambda *a, **k: (events.append("timed"), real_train_step(*a, **k))[1])
    monkeypatch.setattr(ddp, "forward_backward",
                        lambda m, *a, **k: (events.append("reference" if type(m).__name__ == "GPT" else "checked"),
                                            real_fwd_bwd(m, *a, **k))[1])
    args = ddp.build_parser().parse_args(["--steps", "4", "--d-model", "32", "--n-layer", "1", "--n-head", "2",
                                          "--block-size", "16", "--batch-per-rank", "2", "--check-steps", "1"])
    out = ddp.worker(one_rank_group, args)
    assert events == ["checked", "reference", "timed", "timed", "timed"]
    assert out["metrics"]["timed_steps"] == 3 and len(out["history"]["step_seconds"]) == 3
    assert len(out["history"]["reference_seconds"]) == 1


# --------------------------------------------------------------------------- launcher input


def _unwritable_folder(tmp_path: Path) -> Path:
    import os

    if os.geteuid() == 0:  # root writes anywhere a mode allows nothing; sysfs refuses new files to all
        return Path("/sys")
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


def test_bad_report_paths_fail_at_once_with_one_line(tmp_path, capsys):
    from labs import ddp

    a_file = tmp_path / "a-file.json"
    a_file.write_text("{}")
    cases = {
        "is a folder": tmp_path,
        "cannot write": _unwritable_folder(tmp_path) / "lab.json",
        "a-file.json is a file, not a folder": a_file / "lab.json",  # the parent is a file
        "needs a file name": "",
    }
    for expected, path in cases.items():
        start = time.monotonic()
        status = launch.main("ddp", ddp.build_parser(), ddp.worker, ["--nproc", "2", "--report", str(path)])
        elapsed = time.monotonic() - start
        err = capsys.readouterr().err
        assert status == 2 and elapsed < 5, (expected, elapsed)
        assert err.count("\n") == 1 and err.startswith("error: --report") and expected in err, err


def test_oversubscription_warning():
    assert launch.oversubscription_warning(2, 2) is None
    warning = launch.oversubscription_warning(99, 2)
    assert "--nproc 99" in warning and "2 core" in warning and "--nproc 2" in warning
    assert launch.cpu_cores() >= 1


def test_local_rank_never_defaults_to_the_global_rank():
    assert launch.local_rank_from_env({"RANK": "5"}) is None
    assert launch.local_rank_from_env({"RANK": "5", "LOCAL_RANK": "1"}) == 1
    assert launch.local_rank_from_env({"RANK": "5", "SLURM_LOCALID": "3"}) == 3
    with pytest.raises(ValueError, match="LOCAL_RANK"):
        launch.local_rank_from_env({"LOCAL_RANK": "x"})


def test_nodes_agree_on_one_backend():
    assert launch.agree_on_backend(["nccl", "nccl"], ["a", "b"])[0] == "nccl"
    backend, reason = launch.agree_on_backend(["nccl", "gloo", "nccl", "gloo"], ["a"] * 4)
    assert backend == "gloo" and "2 of 4" in reason
    assert launch.agree_on_backend(["gloo"], ["cpu"]) == ("gloo", "cpu")


def test_many_failed_ranks_are_told_once():
    assert launch._ranks([0, 1, 2, 5, 7, 8]) == "ranks 0-2, 5, 7-8" and launch._ranks([3]) == "rank 3"
    stopped = "rank {r}: waiting in barrier\nRead error [127.0.0.1]:{port}\n(stopped by the launcher)"
    entries = [(r, "killed by SIGKILL", stopped.format(r=r, port=40000 + r)) for r in range(2, 99)]
    entries.insert(0, (0, "exited with status 1", "rank 0: timeout"))
    entries.insert(1, (1, "exited with status 1", "rank 1: injected failure"))
    groups = launch.group_stories(entries)
    assert [(g[0][:3], g[1]) for g in groups] == [([0], "exited with status 1"), ([1], "exited with status 1"),
                                                 ([2, 3, 4], "killed by SIGKILL")]
    assert len(groups[2][0]) == 97 and groups[2][2] == stopped.format(r=2, port=40002)


# --------------------------------------------------------------------------- the GPU check


def test_gpu_check_without_a_gpu_runs_nothing(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: `make gpu-check` runs for real there")
    assert gpu_check.main(["--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().out.startswith("no GPU")
    assert not (tmp_path / "out").exists()


def test_gpu_check_registry_and_summary():
    assert gpu_check.world_sizes(0) == [] and gpu_check.world_sizes(1) == [1]
    assert gpu_check.world_sizes(2) == [2, 1] and gpu_check.world_sizes(8) == [2, 1]
    labels = [e.label for e in gpu_check.LABS]
    assert len(labels) == len(set(labels))
    for entry in gpu_check.LABS:  # every entry names a lab module that parses its arguments
        module = __import__(f"labs.{entry.lab}", fromlist=["build_parser"])
        module.build_parser().parse_args(["--nproc", "1", *entry.args])
    report = {"side_by_side": {"dp": {"tokens_per_s": 2e5, "mfu": 0.31, "peak_allocated_gib": 1.5},
                               "fsdp": {"tokens_per_s": 1e5, "mfu_note": "unknown GPU: MFU not computed",
                                        "peak_allocated_gib": 0.9}},
              "sweep": [{"op": "all_reduce", "bytes": 4096, "busbw": 1e9},
                        {"op": "all_reduce", "bytes": 65536, "busbw": 5e9}]}
    rows = gpu_check.figures(report)
    assert [r["what"] for r in rows] == ["dp", "fsdp", "all_reduce busbw at 65,536 bytes"]
    assert rows[2]["busbw_gb_s"] == 5.0
    summary = {"environment": {"device": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "torch": "2.x", "cuda": "12",
                               "nccl": "2.21.5"}, "started_utc": "now", "seconds": 100.0,
               "runs": [{"label": "fsdp", "world_size": 2, "dtype": "bf16", "figures": rows[:2],
                         "checks": [{"name": "FSDP: weights bytes per rank", "predicted": 100, "measured": 101,
                                     "ratio": 1.01, "ok": True}]},
                        {"label": "ddp", "world_size": 1, "error": "timed out after 150 s"}]}
    md = gpu_check.markdown(summary)
    assert "NVIDIA H100 80GB HBM3 x 2" in md and "NCCL 2.21.5" in md
    assert "| fsdp | 2 | bf16 | FSDP: weights bytes per rank | 100 | 101 | yes |" in md
    assert "| fsdp | 2 | dp | 200,000 | 31% | 1.5 | - |" in md
    assert "unknown GPU: MFU not computed" in md and "run failed: timed out" in md


def test_notebooks_show_recorded_gpu_runs_or_say_there_are_none(tmp_path, capsys):
    import json

    from labs.notebook import reference_runs, show_reference

    show_reference("fsdp", folder=tmp_path)
    assert capsys.readouterr().out.startswith("No GPU run of this lab has been recorded yet")
    device = tmp_path / "H100-80GB-HBM3"
    device.mkdir()
    summary = {"environment": {"device": "NVIDIA H100 80GB HBM3"},
               "runs": [{"lab": "fsdp", "label": "fsdp", "world_size": 2, "dtype": "bf16",
                         "checks": [{"ok": True}, {"ok": False}],
                         "figures": [{"what": "fsdp", "tokens_per_s": 123456.0, "mfu": 0.0123,
                                      "peak_allocated_gib": 1.25}]},
                        {"lab": "ddp", "label": "ddp", "world_size": 2, "checks": [], "figures": []}]}
    (device / "summary.json").write_text(json.dumps(summary))
    assert [d for d, _ in reference_runs("fsdp", folder=tmp_path)] == ["NVIDIA H100 80GB HBM3"]
    show_reference("fsdp", folder=tmp_path)
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3, 2 ranks, bf16: 1 of 2 checks pass" in out
    assert "123,456 tokens/s, MFU 1.23%, peak allocated 1.25 GiB" in out


def test_no_gpu_figures_are_committed_without_a_summary():
    """labs/reference/ holds summaries written by the GPU check, or only its README (and
    Lab 7's stored CPU measurement, which no GPU figure is drawn from)."""
    from labs.predict_vs_measure import REFERENCE as CPU_MEASUREMENT

    folder = ROOT / "labs" / "reference"
    for path in folder.rglob("*"):
        if path.is_file() and path.name != "README.md" and path != CPU_MEASUREMENT:
            assert path.name in ("summary.json", "summary.md"), path
    if not list(folder.glob("*/summary.json")):
        assert "No GPU run has been recorded yet" in (folder / "README.md").read_text()



@pytest.mark.parametrize("n", [2, 4, 99, 512])
def test_exact_collective_data_stays_exact_at_any_world_size(n):
    """Rank r holds (r+1)(i mod m): every sum over n ranks, added in float32 in any order,
    must be the exact integer (below 2^24), or the "exact" checks report false failures."""
    from labs.collectives import exact_data_period

    m = exact_data_period(4096, n)
    assert m >= 2 and (m - 1) * n * (n + 1) // 2 < 2**24
    values = torch.arange(4096, dtype=torch.float64) % m
    exact = values * (n * (n + 1) // 2)
    shuffled = torch.randperm(n, generator=torch.Generator().manual_seed(n))
    total = torch.zeros(4096, dtype=torch.float32)
    for r in shuffled.tolist():
        total += (values * (r + 1)).float()
    assert torch.equal(total.double(), exact)
    if n == 2:
        assert m == 4096  # small worlds keep the full ramp
    with pytest.raises(ValueError, match="nproc"):
        exact_data_period(4096, 6000)
