"""How long grading an assignment submission takes: each run a cold process
(``python -m assignments``, torch imported from scratch), median of ``--repeat``; then a
class of ``--class-size`` copies graded ``--jobs`` at a time.

    python benchmarks/assignment_grading.py a1 [--repeat 5] [--class-size 50] [--jobs 2]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from assignments import ASSIGNMENTS  # noqa: E402


def one(assignment: str, master: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "assignments", assignment, str(master)], cwd=ROOT, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("assignment", choices=sorted(ASSIGNMENTS))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--class-size", type=int, default=50)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    master = ROOT / ASSIGNMENTS[args.assignment][1]
    times = [one(args.assignment, master) for _ in range(args.repeat)]
    print(f"{args.assignment}: one submission, cold: median {statistics.median(times):.1f} s "
          f"of {args.repeat} ({', '.join(f'{t:.1f}' for t in times)})")
    if args.class_size:
        start = time.perf_counter()
        with ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(lambda _: one(args.assignment, master), range(args.class_size)))
        print(f"{args.assignment}: a class of {args.class_size} with {args.jobs} jobs: "
              f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
