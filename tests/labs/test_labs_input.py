"""Wrong input to the labs: every case gets one line on stderr and exit status 2 before any
rank starts (no process is started here: each call is in-process and stops at validation)."""
from __future__ import annotations

import importlib
import json

import pytest

from labs import launch

HUGE = str(10**14)


def _main(lab: str, argv: list[str], capsys) -> tuple[int, str]:
    mod = importlib.import_module(f"labs.{lab}")
    code = mod.main(["--timeout", "20", *argv])  # argv comes last: it may set --timeout itself
    return code, capsys.readouterr().err


@pytest.mark.parametrize("lab, argv, says", [
    ("ddp", ["--nproc", "2", "--timeout", "inf"], "--timeout must be in"),
    ("ddp", ["--nproc", "2", "--grace", "nan"], "--grace in"),
    ("ddp", ["--nproc", "2", "--lr", "inf"], "lr and grad_clip must be finite"),
    ("ddp", ["--nproc", "2", "--bucket-mb", "inf"], "--bucket-mb must be a finite number"),
    ("ddp", ["--nproc", "2", "--reference-delay", "-1"], "--reference-delay must be seconds >= 0"),
    ("tensor_parallel", ["--nproc", "2", "--seed", str(2**64)], "--seed must be an integer in 0.."),
    ("fsdp", ["--nproc", "2", "--d-model", "100000"], "cannot be done here"),
    ("ddp", ["--nproc", "100000"], "cannot be done here"),
    ("collectives", ["--nproc", "2", "--max-bytes", HUGE], "cannot be done here"),
    ("pipeline_parallel", ["--nproc", "2", "--microbatches", "100000000000"], "cannot be done here"),
    ("tensor_parallel", ["--nproc", "2", "--d-model", "65536"], "cannot be done here"),
    ("grid3d", ["--nproc", "2", "--batch", "1000000"], "cannot be done here"),
    ("scaling_law", ["--nproc", "1", "--cache", "pyproject.toml"], "not a cached grid"),
    ("fsdp", ["--nproc", "2", "--report", "/dev/null"], "not a regular file"),
    ("ddp", ["--nproc", "2", "--report", "pyproject.toml"], "not a lab report"),
])
def test_bad_input_is_one_line_and_status_2(lab, argv, says, capsys):
    code, err = _main(lab, argv, capsys)
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and says in err, err


def test_an_old_lab_report_or_an_empty_file_may_be_overwritten(tmp_path):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"lab": "ddp", "checks": []}))
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert launch.check_report_path(old) == old
    assert launch.check_report_path(empty) == empty


@pytest.mark.parametrize("module", ["labs.ddp", "labs.pipeline_parallel", "labs.gpu_check"])
def test_argparse_typos_are_one_line(module, capsys):
    mod = importlib.import_module(module)
    parse = mod._parse if module == "labs.gpu_check" else mod.build_parser().parse_args
    with pytest.raises(SystemExit) as exc:
        parse(["--no-such-flag"])
    err = capsys.readouterr().err
    assert exc.value.code == 2
    assert err.count("\n") == 1 and "unrecognized arguments: --no-such-flag" in err and "--help" in err, err


def test_collectives_max_bytes_0_skips_the_sweep_as_its_help_says():
    from labs import collectives

    args = collectives.build_parser().parse_args(["--nproc", "2", "--max-bytes", "0"])
    collectives.validate(args, 2)  # no error: 0 is allowed
    with pytest.raises(ValueError, match="--max-bytes must be >= 0"):
        collectives.validate(collectives.build_parser().parse_args(["--nproc", "2", "--max-bytes", "-1"]), 2)


def test_memory_check_passes_small_runs_and_is_skipped_inside_a_rank(monkeypatch):
    launch.check_fits_in_memory(1e6, 2, "tiny", "gloo")  # a few MB always fits
    with pytest.raises(ValueError, match="cannot be done here"):
        launch.check_fits_in_memory(1e18, 2, "huge", "gloo")
    for k, v in {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "x", "MASTER_PORT": "1"}.items():
        monkeypatch.setenv(k, v)
    launch.check_fits_in_memory(1e18, 2, "huge", "gloo")  # inside a rank: not asked again


def test_ctrl_c_is_one_line_and_status_130(monkeypatch, capsys):
    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(launch, "run", interrupted)
    assert launch.main("ddp", None, None, []) == 130
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "interrupted" in err, err


def test_a_rank_stopped_before_it_could_dump_its_stack_is_said_to_be_starting_up():
    import signal

    assert launch._fate(-signal.SIGUSR1, stopped=True) == "stopped while still starting up"
    assert launch._fate(-signal.SIGUSR1, stopped=False) == "killed by SIGUSR1"
    assert launch._fate(-signal.SIGKILL, stopped=True) == "killed by SIGKILL"


def test_run_lab_with_report_and_no_path_is_one_line():
    with pytest.raises(ValueError, match="--report needs a path after it"):
        launch.run_lab("ddp", "--nproc", 2, "--report")


# ----------------------------------------------------------------------------- stopping a lab

def _lab(*args, **kw):
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(launch.REPO_ROOT)}
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LABS_LAUNCHER_PID"):
        env.pop(k, None)
    env.update(kw.pop("env", {}))
    return subprocess.Popen([sys.executable, "-m", *args], cwd=launch.REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _left_behind(before: set) -> tuple[list, list]:
    import glob
    import subprocess

    logs = sorted(set(glob.glob("/tmp/lab-ddp-*")) - before)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return logs, [line for line in ps.splitlines() if "-m labs.ddp" in line and "--steps 5000" in line]


@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM"])
def test_stopping_the_launcher_stops_every_rank_and_removes_their_logs(tmp_path, signame):
    """Ctrl-C or SIGTERM (what `timeout` and job schedulers send) to a running lab: one line,
    status 130, no rank left and no log folder left."""
    import glob
    import signal
    import time

    before = set(glob.glob("/tmp/lab-ddp-*"))
    proc = _lab("labs.ddp", "--nproc", "2", "--steps", "5000", "--report", str(tmp_path / "r.json"))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (set(glob.glob("/tmp/lab-ddp-*")) - before):
        time.sleep(0.1)  # the ranks are started
    time.sleep(1.0)
    proc.send_signal(getattr(signal, signame))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "every rank it started was killed" in err, err
    time.sleep(0.5)
    assert _left_behind(before) == ([], [])


def test_ctrl_c_while_the_lab_is_still_importing_is_one_line(tmp_path):
    import signal
    import time

    proc = _lab("labs.ddp", "--nproc", "2", "--report", str(tmp_path / "r.json"))
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_run_lab_stops_a_lab_at_its_timeout(tmp_path, capsys):
    import glob
    import time

    before = set(glob.glob("/tmp/lab-ddp-*"))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not finish within 3 s"):
        launch.run_lab("ddp", "--nproc", "2", "--steps", "5000", "--report", tmp_path / "r.json", timeout=3)
    assert time.monotonic() - started < 20
    assert _left_behind(before) == ([], [])


def test_a_rank_that_cannot_join_its_store_says_so_in_one_line(tmp_path):
    """A rank environment set by hand whose MASTER_PORT is taken: one line, not torch's traceback."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = _lab("labs.collectives", "--report", str(tmp_path / "r.json"),
                    env={"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "cannot join the job's store" in err and "Traceback" not in err, err


def test_the_step_split_is_said_as_it_is():
    from labs.training import split_steps, steps_words

    assert steps_words(split_steps(6, None), 6) == "steps 1-3 checked, steps 4-6 timed"
    assert steps_words(split_steps(5, 4), 5) == "steps 1-4 checked, step 5 timed"
    assert steps_words(split_steps(1, None), 1) == "step 1 checked, none timed (--steps 2 or more times one)"


def test_the_gpu_check_takes_ctrl_c_back_from_the_early_handler(monkeypatch):
    """``python -m labs.gpu_check`` handles KeyboardInterrupt itself (it writes its summary): it
    must get Ctrl-C back from the one-line handler labs/__init__ sets while a lab is starting."""
    import signal

    from labs import gpu_check

    previous = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGINT, lambda *a: None)
    try:
        monkeypatch.setattr(gpu_check, "_parse", lambda argv: (_ for _ in ()).throw(SystemExit(0)))
        with pytest.raises(SystemExit):
            gpu_check.main([])
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous[0])
        signal.signal(signal.SIGTERM, previous[1])
