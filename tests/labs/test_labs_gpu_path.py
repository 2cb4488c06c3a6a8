"""The labs' GPU path, checked where there is no GPU: what the first GPU run must get right.

Pipeline timelines that never compare two hosts' clocks, the GPU check's answers (a hung lab
keeps its launcher's report, one GPU says what it did not exercise, a CPU-only torch on a GPU
machine is an error, a budget is kept), bad arguments refused before any rank starts, the exit
status under torchrun, FSDP2's agreement on fp16 overflow, and a check that needs nothing
but torch, numpy and scipy.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from labs import gpu_check, launch

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _python(*args, env=None, timeout=120, cwd=ROOT):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=timeout,
                          env=env or ENV, cwd=cwd)


# --------------------------------------------------------------------------- bad arguments


BAD = [
    ("tensor_parallel", ["--nproc", "3"], "divisible by the tensor-parallel degree 3"),
    ("pipeline_parallel", ["--nproc", "3"], "divisible by the number of stages 3"),
    ("pipeline_parallel", ["--nproc", "2", "--microbatches", "x"], "--microbatches"),
    ("grid3d", ["--nproc", "2", "--tp", "3"], "--tp must divide the world size 2"),
    ("ddp", ["--nproc", "2", "--n-head", "3"], "n_head must divide d_model"),
    ("ddp", ["--nproc", "2", "--steps", "0"], "steps must be >= 1"),
    ("fsdp", ["--nproc", "2", "--check-steps", "9", "--steps", "4"], "--check-steps"),
    ("collectives", ["--nproc", "2", "--iters", "0"], "--iters"),
]


@pytest.mark.parametrize("lab, argv, message", BAD)
def test_bad_arguments_are_refused_before_any_rank_starts(lab, argv, message, tmp_path, capsys, monkeypatch):
    module = __import__(f"labs.{lab}", fromlist=["main"])
    started = []
    monkeypatch.setattr(launch, "_launch", lambda *a, **k: started.append(a))
    assert module.main([*argv, "--report", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and message in err and "\n" not in err, err
    assert not started  # no rank, no CUDA context, no NCCL communicator


def test_a_rank_under_torchrun_refuses_in_one_line(tmp_path):
    # torchrun starts the ranks itself: each validates, rank 0 says why, all exit 2.
    env = {**ENV, "RANK": "0", "WORLD_SIZE": "3", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "1"}
    proc = _python("-m", "labs.tensor_parallel", "--report", str(tmp_path / "r.json"), env=env)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --n-head 4 must be divisible by the tensor-parallel degree 3 (--nproc)"]


def test_rank_zero_exit_status_under_torchrun():
    assert launch.rank_exit_status({"checks": [{"ok": True}, {"ok": True}]}) == 0
    assert launch.rank_exit_status({"checks": [{"ok": True}, {"ok": False}]}) == 3


@pytest.mark.slow
def test_a_failed_check_fails_the_torchrun_job(tmp_path):
    """A Slurm job whose lab failed a check must not end COMPLETED: rank 0 exits 3, torchrun 1."""
    report = tmp_path / "tp.json"
    proc = _python("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
                   "labs.tensor_parallel", "--backend", "gloo", "--comm", "none", "--no-torch-tp",
                   "--no-sequence-parallel", "--n-layer", "1", "--d-model", "32", "--block-size", "16",
                   "--report", str(report), timeout=240)
    data = json.loads(report.read_text())
    assert not all(c["ok"] for c in data["checks"])
    assert proc.returncode != 0, proc.stdout[-2000:] + proc.stderr[-2000:]


# --------------------------------------------------------------------------- pipeline clocks


@pytest.mark.slow
def test_pipeline_timelines_never_compare_two_hosts_clocks(tmp_path, monkeypatch):
    """Rank 1's clock a day ahead of rank 0's, as on another node: the bubble is unchanged."""
    from labs import pipeline_parallel

    monkeypatch.setenv("LABS_DEBUG_CLOCK_SKEW", "86400")
    report = launch.run("pipeline_parallel", pipeline_parallel.build_parser(), pipeline_parallel.worker,
                        ["--nproc", "2", "--backend", "gloo", "--report", str(tmp_path / "pp.json"),
                         "--n-layer", "2", "--d-model", "32", "--micro-batch", "2", "--block-size", "16",
                         "--microbatches", "1,4", "--repeats", "2", "--no-torch-pipelining"])
    bubbles = [c for c in report["checks"] if "bubble" in c["name"]]
    assert len(bubbles) == 4 and all(c["ok"] for c in bubbles), bubbles
    for timeline in report["timelines"].values():
        for rows in timeline:  # every rank's passes start within seconds of its own start
            assert 0 <= min(r[2] for r in rows) < 60 and max(r[4] for r in rows) < 600


# --------------------------------------------------------------------------- the GPU check


def test_one_gpu_says_what_it_did_not_exercise():
    runs = [{"label": "ddp", "world_size": 1, "dtype": "bf16", "checks": [], "figures": [], "ok": True},
            {"label": "fsdp-150M", "world_size": 1, "skipped": "budget: 3 s left, the row needs about 30 s"}]
    summary = {"environment": {"device": "NVIDIA H100 80GB HBM3", "gpu_count": 1}, "started_utc": "now",
               "seconds": 1.0, "runs": runs}
    gaps = gpu_check.not_exercised(summary)
    assert any("world size 1" in g and "0 with 0" in g for g in gaps)
    assert any(g.startswith("fsdp-150M at world size 1: skipped (budget") for g in gaps)
    md = gpu_check.markdown(summary)
    assert "## Not exercised" in md and "skipped: budget" in md
    # no "busbw" figure where nothing crossed between ranks
    sweep = [{"op": "all_reduce", "bytes": 4096, "busbw": 0.0}]
    assert gpu_check.figures({"world_size": 1, "sweep": sweep}) == []
    assert gpu_check.figures({"world_size": 2, "sweep": sweep})[0]["what"].startswith("all_reduce busbw")
    two = {**summary, "runs": [{**runs[0], "world_size": 2}]}
    assert gpu_check.not_exercised(two) == []


def test_no_gpu_and_no_driver_runs_nothing(tmp_path):
    proc = _python("-m", "labs.gpu_check", "--out", str(tmp_path / "out"),
                   env={**ENV, "PATH": str(tmp_path)})  # no nvidia-smi on this PATH
    assert proc.returncode == 0 and proc.stdout.startswith("no GPU")
    assert not (tmp_path / "out").exists()


def test_a_cpu_torch_on_a_gpu_machine_is_an_error(tmp_path):
    """The driver (a stand-in nvidia-smi) reports a T4; this torch cannot use it: exit 1, one line."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: Tesla T4 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
    smi.chmod(0o755)
    proc = _python("-m", "labs.gpu_check", env={**ENV, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"})
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch can use a GPU")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "driver reports 1 NVIDIA GPU" in lines[0] and "torch cannot use it:" in lines[0]


def test_the_status_line_counts_its_runs_in_words():
    assert gpu_check._all_passed(1) == "the 1 run passed"
    assert gpu_check._all_passed(12) == "all 12 runs passed"


@pytest.mark.parametrize("argv, message", [(["--only"], "expected at least one"),
                                           (["--only", "nope"], "no such row"),
                                           (["--budget", "0"], "--budget"),
                                           (["--cpu-rehearsal", "--out", "/proc/no/such"], "cannot write")])
def test_gpu_check_bad_arguments(argv, message, capsys):
    try:
        code = gpu_check.main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_budget_too_small_skips_every_row_and_still_writes_the_summary(tmp_path):
    out = tmp_path / "gc"
    assert gpu_check.main(["--cpu-rehearsal", "--budget", "1", "--out", str(out)]) == 1  # nothing checked
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] and all(r.get("skipped") for r in summary["runs"])
    assert "## Not exercised" in (out / "summary.md").read_text()


@pytest.mark.slow
def test_a_hung_lab_keeps_its_launchers_report(tmp_path):
    """The lab's own --timeout ends a hang before the check's does: its log holds every rank's
    story (the stack dump of the hung rank), and the row says the run failed."""
    (tmp_path / "runs").mkdir()
    entry = gpu_check.LabRun("collectives", ("--fail-rank", "1", "--fail-mode", "hang", "--check-elements", "64",
                                             "--ring-elements", "64", "--max-bytes", "4096", "--iters", "1"))
    row = gpu_check._run_one(entry, 2, tmp_path, "gloo", timeout_s=10)
    assert "error" in row and row["seconds"] < 10 + gpu_check.KILL_MARGIN_S
    assert "no answer" not in row["error"]  # the launcher stopped it, not the check
    log = (tmp_path / row["log"]).read_text()
    assert "timed out after 10 s" in log and "stopped by the launcher" in log
    assert "maybe_fail" in log  # the hung rank's stack, as faulthandler printed it


def test_every_gpu_lab_notebook_asks_colab_and_kaggle_for_a_gpu():
    for nb in sorted((ROOT / "labs").glob("0[1-6]-*.ipynb")):
        meta = json.loads(nb.read_text())["metadata"]
        assert meta.get("accelerator") == "GPU" and meta["colab"]["gpuType"], nb.name
        assert meta["kaggle"]["isGpuEnabled"] is True and meta["kaggle"]["accelerator"], nb.name


# --------------------------------------------------------------------------- runs with torch alone


STACK = ("matplotlib", "IPython", "ipykernel", "jupyter_core", "nbformat", "nbclient", "myst_nb", "sphinx",
         "pandas", "hypothesis", "pytest", "jupytext", "coursefig", "autograde", "threadpoolctl")


def test_the_gpu_check_needs_only_torch_numpy_and_scipy():
    """Every lab program imports with the build and test stack made unimportable (as on a GPU
    machine that has only its own torch, numpy and scipy)."""
    labs = ["gpu_check", "launch", "collectives", "ddp", "fsdp", "tensor_parallel", "pipeline_parallel",
            "grid3d", "scaling_law", "training", "model", "data", "report"]
    code = f"""
import importlib.abc, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {STACK!r}:
            raise ImportError('not on a bare GPU machine: ' + name)
sys.meta_path.insert(0, Refuse())
for lab in {labs!r}:
    importlib.import_module('labs.' + lab)
print('ok')
"""
    proc = _python("-c", code)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


WITHOUT_TOMLLIB = """
import importlib.abc, sys
class Python310(importlib.abc.MetaPathFinder):  # no tomllib (new in 3.11), and tomli not installed
    def find_spec(self, name, path=None, target=None):
        if name in ("tomllib", "tomli"):
            raise ModuleNotFoundError("No module named " + repr(name))
sys.meta_path.insert(0, Python310())
from solutions.hardware import GPU_TABLE, find_gpu
import labs.gpu_check
print(len(GPU_TABLE), find_gpu("H100").name)
"""


def test_the_gpu_table_loads_without_tomllib():
    """On Python 3.10, which the GPU check promises, there is no tomllib: the GPU table is read
    with the tomli that pip ships (``import solutions`` had failed, and with it every lab)."""
    proc = _python("-c", WITHOUT_TOMLLIB)
    assert proc.returncode == 0, proc.stderr[-2000:]
    count, name = proc.stdout.split(maxsplit=1)
    assert int(count) >= 12 and name.strip() == "H100 SXM"


def test_the_labs_parse_as_python_3_10():
    for folder in ("labs", "solutions"):
        for path in sorted((ROOT / folder).glob("*.py")):
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 10))


# --------------------------------------------------------------------------- FSDP2 and fp16


FOUND_INF = """
import sys, pathlib, torch, torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
fully_shard(model, mesh=init_device_mesh("cpu", (2,)))
opt = torch.optim.AdamW(model.parameters())
scaler = torch.amp.GradScaler("cpu")
scaler.scale(model(torch.ones(2, 8)).sum()).backward()
if dist.get_rank() == 1:  # an overflow in rank 1's shard only
    next(iter(model.parameters())).grad.to_local().fill_(float("inf"))
scaler.unscale_(opt)
found = scaler._per_optimizer_states[id(opt)]["found_inf_per_device"]
# one file a rank: two ranks printing at once can interleave their lines on one pipe
out = pathlib.Path(sys.argv[1]) / f"rank{dist.get_rank()}.txt"
out.write_text(str(sum(v.item() for v in found.values())))
dist.destroy_process_group()
"""


@pytest.mark.slow
def test_fsdp2_ranks_agree_on_an_fp16_overflow_without_an_all_reduce_of_ours(tmp_path):
    """Why labs.training.optimizer_update adds no all-reduce of found_inf: unscale_ on DTensor
    gradients reduces it over the mesh, so a rank whose own shard is finite still skips."""
    script = tmp_path / "found_inf.py"
    script.write_text(FOUND_INF)
    proc = _python("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", str(script),
                   str(tmp_path), timeout=240)
    found = {}
    for rank in (0, 1):
        out = tmp_path / f"rank{rank}.txt"
        assert out.exists(), proc.stdout + proc.stderr[-2000:]
        found[rank] = float(out.read_text())
    assert found == {0: pytest.approx(1.0, abs=0), 1: pytest.approx(1.0, abs=0)}


def test_the_documented_rows_and_estimates_are_the_registry():
    text = (ROOT / "labs" / "reference" / "README.md").read_text()
    rows = [line.split("|")[1:-1] for line in text.splitlines()
            if line.startswith("| ") and line.count("|") == 6 and not line.startswith("| row")]
    documented = [(r[0].strip(), r[1].strip(), r[2].strip(), float(r[3]), r[4].strip() == "yes") for r in rows]
    registry = [(e.label, e.lab, ", ".join(map(str, e.world_sizes or (2, 1))), e.estimate_s, e.gpu_only)
                for e in gpu_check.LABS]
    assert documented == registry
    one_gpu_minutes = sum(e.estimate_s for e in gpu_check.LABS) / 60
    assert f"about {round(one_gpu_minutes * 2) / 2:g} minutes in all" in text
    assert one_gpu_minutes < 5  # the target: under 5 minutes of lab time on one GPU
