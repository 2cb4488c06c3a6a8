"""``python -m solutions``: the two commands of the library (the planner and the model's check
against published runs)."""
from __future__ import annotations

COMMANDS = (
    ("python -m solutions.plan --model 70e9 --tokens 1.4e12 --gpu H100 --count 1024",
     "plan a run: allocation, layout, memory, step time, MFU, days (--help lists every flag; --json)"),
    ("python -m solutions.calibration --set table",
     "the step-time model against published runs: the course's table, heldout, other-stacks"),
)


def main() -> int:
    print("The course's library; everything else is imported (from solutions import scaling, memory, ...):")
    for command, what in COMMANDS:
        print(f"  {command}\n      {what}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
