"""A synthetic class as an LMS downloads it, and how long grading it takes.

    python benchmarks/class_day.py [--students 300] [--layout canvas|moodle|folders] [--jobs 2]

:func:`make_class` writes ``students`` students in one of three layouts (Canvas's flat
files, Moodle's folders, one folder per student) with a roster in the LMS's own form, mixing
correct work in several styles, known mistakes, the untouched template, files that do not
parse, wrong-type files (.pdf, .docx, ``.ipynb.txt``), students who sent two files (a
scratch file beside the real one), and students on the roster who sent nothing. It returns,
per student id, the *variant* of work they sent and the status their row must start with;
a variant's score is what grading one file of it alone gives, so a class run is checked
without hard-coding any score. Run as a script it grades the class with ``--jobs`` and
prints the wall time (noisy on a shared machine: say so when you quote it).
"""
from __future__ import annotations

import argparse
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
FUNCTIONS = ("chinchilla_loss", "compute_optimal", "memory_per_gpu", "communication_time_per_step")


def _styled(source: str, style: int) -> str:
    """The same correct work written differently (comments, spacing, an extra helper)."""
    if style == 1:
        return "# my solutions\n\n" + source.replace("    ", "    ", -1) + "\n\ndef helper():\n    return 1\n"
    if style == 2:
        return source.replace("import numpy as np", "import numpy as np  # arrays\nimport math")
    return source


VARIANTS = {  # name: (source, the status its row starts with)
    "correct": (REFERENCE, "graded"),
    "correct_styled": (_styled(REFERENCE, 1), "graded"),
    "correct_imports": (_styled(REFERENCE, 2), "graded"),
    "swapped_exponents": (REFERENCE.replace("return E + A / N**ALPHA + B / D**BETA",
                                            "return E + A / N**BETA + B / D**ALPHA", 1), "graded"),
    "gigabytes": (REFERENCE.replace("return total\n", "return total / 1e9\n", 1), "graded"),
    "bandwidth_gb": (REFERENCE.replace("/ (bandwidth_tb_s * 1e12)", "/ (bandwidth_tb_s * 1e9)", 1),
                     "graded"),
    "template": ("".join(f"def {f}(*args):\n    raise NotImplementedError\n\n\n" for f in FUNCTIONS),
                 "not attempted (still the stub)"),
    "syntax_error": ("def chinchilla_loss(N, D:\n    return 0\n", "not run"),
}
WRONG_TYPES = (".pdf", ".docx", ".ipynb.txt")


def make_class(folder: Path, students: int, layout: str, seed: int = 0) -> dict:
    """Write the class and its roster (``folder/roster.csv``) into ``folder/submissions``;
    return ``{student id: (variant or None, status prefix)}``."""
    rng = random.Random(seed)
    subs = folder / "submissions"
    subs.mkdir(parents=True)
    expected, roster = {}, []
    names = list(VARIANTS)
    for k in range(students):
        kind = rng.random()
        first, last = f"Student{k:03d}", rng.choice(["Ahmed", "Brown", "Chen", "Diaz", "Okafor"])
        uid, sub = 100000 + k, 5000000 + k
        files = []  # (name, text)
        if kind < 0.05:
            variant, status = None, "missing"
        elif kind < 0.12:
            suffix = WRONG_TYPES[k % len(WRONG_TYPES)]
            variant, status = None, "unreadable: submitted a " + suffix
            files.append(("09-exercises" + suffix, "not a notebook\n"))
        else:
            variant = names[k % len(names)]
            source, status = VARIANTS[variant]
            if kind < 0.3 and variant not in ("template", "syntax_error"):
                files.append(("scratch.py", "x = 1\n"))
                status = "several files: "
            files.append(("09-exercises.py" if k % 2 else "final.py", source))
        sid = {"canvas": str(uid), "moodle": str(2000000 + k), "folders": f"s{k:03d}"}[layout]
        for name, text in files:
            if layout == "canvas":
                path = subs / f"{last.lower()}{first.lower()}_{uid}_{sub}_{name}"
            elif layout == "moodle":
                path = subs / f"{first} {last}_{sid}_assignsubmission_file_" / name
            else:
                path = subs / sid / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        expected[sid] = (variant, status)
        roster.append((sid, first, last, uid))
    with (folder / "roster.csv").open("w", newline="") as f:
        if layout == "canvas":
            f.write("Student,ID,SIS User ID,SIS Login ID,Section,Exercises (12345)\n"
                    "    Points Possible,,,,,100\n")
            f.writelines(f'"{last}, {first}",{uid},S{uid},{first.lower()},A,\n'
                         for sid, first, last, uid in roster)
        elif layout == "moodle":
            f.write("Identifier,Full name,Email address,Status,Grade,Maximum Grade\n")
            f.writelines(f"Participant {sid},{first} {last},{first.lower()}@example.edu,,,100\n"
                         for sid, first, last, uid in roster)
        else:
            f.write("student_id,name,file\n")
            f.writelines(f"{sid},{first} {last},submissions/{sid}\n" for sid, first, last, uid in roster)
    return expected


def variant_scores(seed: int, timeout: float = 5.0) -> dict:
    """What each variant scores when graded alone (the hidden tests with ``seed``)."""
    import tempfile

    sys.path.insert(0, str(ROOT))
    from autograde.grade import grade_submission
    from tests.grading import load_checks

    checks = load_checks(include_hidden=True, seed=seed)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (source, _) in VARIANTS.items():
            path = Path(tmp) / f"{name}.py"
            path.write_text(source)
            out[name] = grade_submission(path, checks, timeout=timeout).score
    return out


def grade_class(folder: Path, layout: str, jobs: int, seed: int, *extra) -> tuple[float, int]:
    """(wall seconds, exit status) of ``python -m autograde`` over the class."""
    args = [sys.executable, "-m", "autograde", "--roster", str(folder / "roster.csv"),
            "--jobs", str(jobs), "--seed", str(seed), "--timeout", "5", "--quiet",
            "--csv", str(folder / "grades.csv"), *map(str, extra)]
    if layout != "folders":
        args.insert(3, str(folder / "submissions"))
    started = time.monotonic()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if done.returncode:
        print(done.stderr, file=sys.stderr)
    return time.monotonic() - started, done.returncode


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--layout", choices=("canvas", "moodle", "folders"), default="canvas")
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        make_class(Path(tmp), args.students, args.layout)
        seconds, code = grade_class(Path(tmp), args.layout, args.jobs, 3)
    print(f"{args.students} students ({args.layout}), --jobs {args.jobs}: {seconds:.1f} s wall "
          f"(exit {code})")


if __name__ == "__main__":
    main()
