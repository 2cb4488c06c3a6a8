"""How fast the autograder is, against the targets of the autograder issue (2-core machine):
under 0.5 s per .py submission (cold), under 2 s per notebook, a class of 200 in under 30 s
with --jobs 2. Optionally, the same notebook under otter-grader for comparison.

    python benchmarks/bench_autograde.py [--repeat N] [--class-size 200] [--otter PATH]

Four figures, each a median (wall-clock seconds):

* per submission, in a running grader: what each file of a class costs (the grader's
  imports and the sandbox's template process are paid once per run);
* one submission from the command line, cold: ``python -m autograde FILE`` as a student
  types it, Python start and imports included;
* a class: ``python -m autograde FOLDER --jobs 2`` over copies of the reference (.py and
  notebook) mixed with red-team submissions that fail fast;
* otter (only with ``--otter PATH`` to an ``otter`` executable, e.g. in a throwaway virtual
  environment): ``otter run`` on an equivalent notebook with four doctest-style checks.

CPU contention from other processes inflates every figure; the CPU seconds printed beside
the class time show the work itself.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PY = ROOT / "tests" / "redteam" / "reference_submission.py"
NOTEBOOK = ROOT / "chapters" / "09-exercises.ipynb"
REDTEAM = ROOT / "tests" / "redteam" / "submissions"
#: Red-team cases that hang on purpose cost two time limits each: not what a class looks like.
SLOW_ON_PURPOSE = {"infinite_loop_in_function.py", "infinite_loop_at_import.py",
                   "evil_exception.py"}
TARGETS = {"py": 0.5, "notebook": 2.0, "class": 30.0}


def median_in_process(path: Path, repeat: int) -> float:
    from autograde.grade import grade_submission
    from sandbox.handle import zygote_for
    from grading import load_checks

    checks = load_checks(seed=1)
    zygote_for("auto")
    grade_submission(path, checks)  # warm the file cache
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        report = grade_submission(path, checks)
        times.append(time.perf_counter() - started)
        assert report.score == report.max_score, (path, report.problems)
    return statistics.median(times)


def cli(*args, cwd=ROOT) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the grader and its children, the finished process)."""
    before = os.times()
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "autograde", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    if done.returncode != 0:
        raise SystemExit(f"autograde failed:\n{done.stderr}")
    return wall, cpu, done


def median_cold(path: Path, repeat: int) -> float:
    return statistics.median(cli(path, "--quiet", "--seed", "1")[0] for _ in range(repeat))


def make_class(folder: Path, size: int) -> dict:
    """``size`` submissions, one folder per student: 3/8 .py and 3/8 notebooks of the
    reference, 1/4 red-team cases that fail fast."""
    hostile = sorted(p for p in REDTEAM.iterdir() if p.name not in SLOW_ON_PURPOSE)
    kinds = {"reference .py": 0, "reference notebook": 0, "red-team": 0}
    for i in range(size):
        student = folder / f"student{i:03d}"
        student.mkdir(parents=True)
        slot = i % 8
        if slot < 3:
            shutil.copy(PY, student / "exercises.py")
            kinds["reference .py"] += 1
        elif slot < 6:
            shutil.copy(NOTEBOOK, student / "09-exercises.ipynb")
            kinds["reference notebook"] += 1
        else:
            case = hostile[i % len(hostile)]
            shutil.copy(case, student / case.name)
            kinds["red-team"] += 1
    return kinds


OTTER_TEST = '''test = {{
    "name": "{name}",
    "points": {points},
    "suites": [{{"cases": [{{"code": {code!r}, "hidden": False, "locked": False}}],
                "scored": True, "setup": "", "teardown": "", "type": "doctest"}}],
}}
'''
OTTER_CHECKS = {
    "q1": (10, ">>> abs(chinchilla_loss(175e9, 300e9) - 2.0018) < 1e-3\nTrue"),
    "q2": (20, ">>> N, D, r, L = compute_optimal(1e22)\n>>> abs(6 * N * D / 1e22 - 1) < 1e-9\nTrue"),
    "q3": (30, ">>> memory_per_gpu(7e9, 'fsdp', 8) == 12 * 7e9 / 8\nTrue"),
    "q4": (40, ">>> communication_time_per_step(7e9, 16, 4, 32, 4096, 4, 4096, 0.45) > 0\nTrue"),
}


def time_otter(otter: str, repeat: int) -> float | None:
    """``otter run`` on a notebook holding the reference's four functions, graded by four
    doctest checks (otter's OK format) in an autograder made by ``otter generate``."""
    with tempfile.TemporaryDirectory(prefix="bench-otter-") as tmp:
        tmp = Path(tmp)
        tests = tmp / "tests"
        tests.mkdir()
        for name, (points, code) in OTTER_CHECKS.items():
            (tests / f"{name}.py").write_text(OTTER_TEST.format(name=name, points=points, code=code))
        source = PY.read_text().split('if __name__ == "__main__":')[0]
        notebook = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None,
                               "outputs": [], "source": source}],
                    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                "language": "python"}},
                    "nbformat": 4, "nbformat_minor": 5}
        (tmp / "submission.ipynb").write_text(json.dumps(notebook))
        (tmp / "requirements.txt").write_text("")
        generated = subprocess.run([otter, "generate", "--tests-dir", "tests"], cwd=tmp,
                                   capture_output=True, text=True)
        if generated.returncode != 0:
            print(f"otter generate failed:\n{generated.stderr[-2000:]}")
            return None
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            done = subprocess.run([otter, "run", "-a", "autograder.zip", "submission.ipynb"],
                                  cwd=tmp, capture_output=True, text=True)
            times.append(time.perf_counter() - started)
            if done.returncode != 0:
                print(f"otter run failed:\n{done.stderr[-2000:]}")
                return None
        return statistics.median(times)


def verdict(value: float, target: float) -> str:
    return f"target < {target:g} s: {'met' if value < target else 'MISSED'}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--class-size", type=int, default=200)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--otter", help="path to an `otter` executable (optional)")
    args = parser.parse_args(argv)

    print(f"Autograder timings ({os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}); medians of {args.repeat} runs")
    py_warm = median_in_process(PY, args.repeat)
    nb_warm = median_in_process(NOTEBOOK, args.repeat)
    print(f"  one .py, in a running grader:       {py_warm:6.3f} s   {verdict(py_warm, TARGETS['py'])}")
    print(f"  one notebook, in a running grader:  {nb_warm:6.3f} s   {verdict(nb_warm, TARGETS['notebook'])}")
    cold_repeat = max(3, args.repeat // 2)
    py_cold = median_cold(PY, cold_repeat)
    nb_cold = median_cold(NOTEBOOK, cold_repeat)
    print(f"  one .py, cold command line:         {py_cold:6.3f} s   {verdict(py_cold, TARGETS['py'])}")
    print(f"  one notebook, cold command line:    {nb_cold:6.3f} s   {verdict(nb_cold, TARGETS['notebook'])}")
    with tempfile.TemporaryDirectory(prefix="bench-class-") as tmp:
        kinds = make_class(Path(tmp), args.class_size)
        wall, cpu, done = cli(tmp, "--jobs", args.jobs, "--quiet", "--seed", "1",
                              "--json", Path(tmp) / "grades.json")
        grades = json.loads((Path(tmp) / "grades.json").read_text())["submissions"]
    mix = ", ".join(f"{v} {k}" for k, v in kinds.items())
    print(f"  class of {args.class_size}, --jobs {args.jobs}:          {wall:6.1f} s   "
          f"{verdict(wall, TARGETS['class'])} ({cpu:.1f} CPU s; {mix})")
    full = sum(r["score"] == r["max_score"] for r in grades.values())
    print(f"    {full} of {len(grades)} submissions earned full marks")
    otter = args.otter or shutil.which("otter")
    if otter and Path(otter).exists():
        seconds = time_otter(otter, max(3, args.repeat // 3))
        if seconds is not None:
            print(f"  otter run, one notebook (cold):     {seconds:6.3f} s   "
                  f"{seconds / nb_cold:.1f}x the cold autograde notebook time")
    else:
        print("  otter: not measured (pass --otter PATH to an otter-grader installation)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
