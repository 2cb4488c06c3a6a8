"""How long grading an assignment submission takes, and where the time goes.

1. One submission, cold: ``python -m autograde FILE --assignment ID`` as a fresh process
   (Python started and torch imported from scratch), median of ``--repeat``.
2. Where one cold grading's time goes: interpreter start, imports (torch, the course), and
   grading itself, each world size's group of ranks apart.
3. A class of ``--class-size`` copies in one folder, graded by one
   ``python -m autograde CLASS --assignment ID --jobs N`` run (torch imported once; each
   group of ranks is forked from that process).

    python benchmarks/assignment_grading.py a1 [--repeat 5] [--class-size 50] [--jobs 2]

The submission is the assignment's reference (``assignments.common.reference_submission``).
Target: under 10 s wall for one submission, cold, on a 2-core machine, with the ranks forked
from the rank zygote (``sandbox.ranks``), which imports torch once per grading run beside the
grader; the groups after the first cost a fork each.
"""
from __future__ import annotations

import argparse
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
from assignments import ASSIGNMENTS  # noqa: E402

BREAKDOWN = r"""
import sys, time
t0 = time.monotonic()
import sandbox.multirank as multirank
multirank.prestart()  # as the grader does first (autograde.cli, autograde.gradescope): torch on another core
import torch, torch.distributed
t1 = time.monotonic()
import autograde.cli, assignments.common as common
module = common.grader(sys.argv[1])
t2 = time.monotonic()
multirank.rank_zygote()
tz = time.monotonic()
groups, real = [], multirank.run_ranks
def timed(n, *args, **kwargs):
    start = time.monotonic()
    result = real(n, *args, **kwargs)
    groups.append((n, time.monotonic() - start))
    return result
multirank.run_ranks = timed
report = module.grade_file(sys.argv[2])
t3 = time.monotonic()
print(f"import torch {t1 - t0:.2f} s; the course's modules {t2 - t1:.2f} s; then waiting for the rank zygote "
      f"(started first, importing torch beside the grader) {tz - t2:.2f} s; grading {t3 - tz:.2f} s "
      f"(" + ", ".join(f"n={n}: {s:.2f} s" for n, s in groups) + f"); score {report.score:g}/{report.max_score:g}")
"""


def cold(assignment: str, path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "autograde", str(path), "--assignment", assignment, "-q"],
                   cwd=ROOT, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("assignment", choices=sorted(ASSIGNMENTS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--class-size", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    from assignments.common import reference_submission

    with tempfile.TemporaryDirectory(prefix="assignment-bench-") as tmp:
        tmp = Path(tmp)
        submission = reference_submission(args.assignment, tmp / "reference")
        load = os.getloadavg()[0]
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        python = time.perf_counter() - start
        times = [cold(args.assignment, submission) for _ in range(args.repeat)]
        print(f"{args.assignment}: one submission, cold: median {statistics.median(times):.1f} s of "
              f"{args.repeat} ({', '.join(f'{t:.1f}' for t in times)}); load average {load:.1f} "
              f"on {os.cpu_count()} cores")
        done = subprocess.run([sys.executable, "-c", BREAKDOWN, args.assignment, str(submission)],
                              cwd=ROOT, check=True, capture_output=True, text=True)
        print(f"{args.assignment}: where it goes: Python starts in {python:.2f} s; "
              + done.stdout.strip().splitlines()[-1])
        if args.class_size:
            folder = tmp / "class"
            for k in range(args.class_size):
                (folder / f"student{k:03d}").mkdir(parents=True)
                shutil.copy(submission, folder / f"student{k:03d}" / submission.name)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "autograde", str(folder), "--assignment",
                            args.assignment, "--jobs", str(args.jobs), "--csv", str(tmp / "grades.csv"),
                            "-q"], cwd=ROOT, check=True, capture_output=True)
            seconds = time.perf_counter() - start
            rows = (tmp / "grades.csv").read_text(encoding="utf-8").splitlines()[1:]
            print(f"{args.assignment}: a class of {args.class_size} through one run with --jobs "
                  f"{args.jobs}: {seconds:.0f} s ({seconds / args.class_size:.2f} s a submission; "
                  f"{len(rows)} rows; load average {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
