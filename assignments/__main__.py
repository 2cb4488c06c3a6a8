"""Grade assignment submissions.

    python -m assignments a1 SUBMISSION... [--json PATH] [--seeds 0 1 2] [--world-sizes 2 4]

Prints each submission's report; ``--json`` writes ``{file: report}`` with the autograder's
schema (``name``, ``score``, ``max_score``, ``tests``). Exit 0 when every file was graded,
2 for a bad command line.
"""
from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from solutions._validate import terse_argparse_errors

from . import ASSIGNMENTS


def main(argv=None) -> int:
    parser = terse_argparse_errors(argparse.ArgumentParser(prog="python -m assignments",
                                                            description=__doc__.splitlines()[0]))
    parser.add_argument("assignment", choices=sorted(ASSIGNMENTS))
    parser.add_argument("submissions", nargs="+", type=Path)
    parser.add_argument("--json", type=Path, help="write the reports here")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--world-sizes", type=int, nargs="+", default=None)
    args = parser.parse_args(argv)
    for path in args.submissions:
        if not path.is_file():
            parser.error(f"{path}: no such file")
    if args.world_sizes and not all(2 <= n <= 8 for n in args.world_sizes):
        parser.error("--world-sizes: each must be 2 to 8")
    grader = importlib.import_module(ASSIGNMENTS[args.assignment][0])
    allowed = getattr(grader, "ALLOWED_WORLD_SIZES", None)  # a grader's model may fit only some
    if args.world_sizes and allowed and not set(args.world_sizes) <= set(allowed):
        parser.error(f"--world-sizes: {args.assignment} runs at {', '.join(map(str, allowed))} only")
    options = {k: tuple(v) for k, v in (("seeds", args.seeds), ("world_sizes", args.world_sizes)) if v}
    reports = {}
    for path in args.submissions:
        report = grader.grade_file(path, **options)
        print(f"{path.name}\n{report.text()}\n")
        reports[str(path)] = dict(report.as_dict(), wall_s=round(report.wall_s, 3))
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
