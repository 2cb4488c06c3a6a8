"""A synthetic class as an LMS downloads it, and how long grading it takes.

    python benchmarks/class_day.py [--students 300] [--layout canvas|moodle|folders] [--jobs 2]

:func:`make_class` writes ``students`` students in one of three layouts (Canvas's flat
files, Moodle's folders, one folder per student) with a roster in the LMS's own form, mixing
correct work in several styles, known mistakes, the untouched template, files that do not
parse, wrong-type files (.pdf, .docx, ``.ipynb.txt``), students who sent two files (a
scratch file beside the real one), students on the roster who sent nothing, and about one in
twenty who sent another student's file (correct or partly wrong) with its identifiers renamed
and its comments rewritten. Every student who wrote code adds checks of their own (calls with
numbers of their choosing), as students do, so honest work differs where it can. It returns,
per student id, the *variant* of work they sent and the status their row must start with;
a variant's score is what grading one file of it alone gives, so a class run is checked
without hard-coding any score. Run as a script it grades the class with ``--jobs`` and
prints the wall time (noisy on a shared machine: say so when you quote it); with
``--similarity`` it also runs the copy check and prints where each planted copy ranks.
"""
from __future__ import annotations

import argparse
import io
import random
import subprocess
import sys
import time
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
sys.path.insert(0, str(ROOT))
from grading import EXERCISES  # noqa: E402 (the registry: every function a submission defines)

FUNCTIONS = tuple(e.function for e in EXERCISES)


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
#: What a copier renames: the module's constants and the functions' local names (never the
#: graded functions or their parameters, which the grader calls by name).
RENAMES = {"E": "E_INF", "A": "COEF_N", "B": "COEF_D", "ALPHA": "exp_n", "BETA": "exp_d",
           "BYTES_PER_PARAM": "STATE_BYTES", "total": "state", "best": "where", "pick": "take",
           "loss": "values", "dp_volume": "grad_traffic", "tp_volume": "act_traffic",
           "helper": "util", "math": "m"}
COPY_COMMENTS = ("# done", "# checked against the notes", "# see lecture", "# works", "# ok")
COPY_RATE = 0.065  # share of students who send a renamed copy (about 15 of 300)


def _own_checks(rng: random.Random) -> str:
    """A student's own checks: calls with numbers of their choosing, never run by the grader."""
    def number(lo, hi):
        return f"{rng.uniform(1, 9.99):.{rng.randint(1, 3)}f}e{rng.randint(lo, hi)}"

    lines = ["", "", f"def {rng.choice(['my_checks', 'try_it', 'scratch', 'sanity'])}():"]
    for _ in range(rng.randint(8, 14)):
        kind = rng.randrange(4)
        if kind == 0:
            lines.append(f"    print(chinchilla_loss({number(7, 11)}, {number(9, 13)}))")
        elif kind == 1:
            lines.append(f"    print(memory_per_gpu({number(8, 11)}, {rng.choice(['dp', 'tp', 'pp', 'fsdp'])!r}, "
                         f"{rng.choice([2, 4, 8, 16, 64])}))")
        elif kind == 2:
            lines.append(f"    print(compute_optimal({number(19, 25)})[{rng.randrange(4)}])")
        else:
            lines.append(f"    print(communication_time_per_step({number(8, 11)}, {rng.randint(1, 64)}, "
                         f"{rng.choice([1, 2, 4, 8])}, {rng.randint(12, 96)}, {rng.choice([1024, 2048, 4096])}, "
                         f"{rng.randint(1, 8)}, {rng.choice([2048, 4096, 8192])}, {rng.uniform(0.05, 0.9):.2f}))")
    return "\n".join(lines) + "\n"


def renamed_copy(source: str, rng: random.Random) -> str:
    """``source`` with the identifiers of RENAMES renamed and every comment rewritten (tokens,
    so strings and numbers stay as they are)."""
    edits = []  # (row, col, old length, new text)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string in RENAMES:
            edits.append((*tok.start, len(tok.string), RENAMES[tok.string]))
        elif tok.type == tokenize.COMMENT:
            edits.append((*tok.start, len(tok.string), rng.choice(COPY_COMMENTS)))
    lines = source.splitlines(keepends=True)
    for row, col, length, new in sorted(edits, reverse=True):
        line = lines[row - 1]
        lines[row - 1] = line[:col] + new + line[col + length:]
    return "".join(lines)


def make_class(folder: Path, students: int, layout: str, seed: int = 0,
               record: dict | None = None) -> dict:
    """Write the class and its roster (``folder/roster.csv``) into ``folder/submissions``;
    return ``{student id: (variant or None, status prefix)}``. ``record``, when given, gets
    ``files`` (student id -> the file that must be graded), ``wrote_code`` (the students
    whose file holds work of their own: not the template, not a file that does not parse) and
    ``copies`` (the planted (copier, original) pairs: the answer key of the copy check)."""
    rng = random.Random(seed)
    subs = folder / "submissions"
    subs.mkdir(parents=True)
    expected, roster = {}, []
    names = list(VARIANTS)
    written: dict = {}  # student id -> (variant, source) of those an honest copier can copy
    copied: set = set()
    record = {} if record is None else record
    record.update(files={}, copies=[], wrote_code=set())
    for k in range(students):
        kind = rng.random()
        first, last = f"Student{k:03d}", rng.choice(["Ahmed", "Brown", "Chen", "Diaz", "Okafor"])
        uid, sub = 100000 + k, 5000000 + k
        sid = {"canvas": str(uid), "moodle": str(2000000 + k), "folders": f"s{k:03d}"}[layout]
        files = []  # (name, text)
        originals = sorted(set(written) - copied)
        if kind < 0.05:
            variant, status = None, "missing"
        elif kind < 0.12:
            suffix = WRONG_TYPES[k % len(WRONG_TYPES)]
            variant, status = None, "unreadable: submitted a " + suffix
            files.append(("09-exercises" + suffix, "not a notebook\n"))
        elif kind < 0.12 + COPY_RATE and originals:
            original = rng.choice(originals)
            copied.add(original)
            variant, source = written[original]
            status = "graded"
            files.append(("09-exercises.py" if k % 2 else "final.py", renamed_copy(source, rng)))
            record["copies"].append((sid, original))
            record["wrote_code"].add(sid)
        else:
            variant = names[k % len(names)]
            source, status = VARIANTS[variant]
            if variant not in ("template", "syntax_error"):
                source += _own_checks(rng)
                written[sid] = (variant, source)
                record["wrote_code"].add(sid)
            if kind < 0.3 and variant not in ("template", "syntax_error"):
                files.append(("scratch.py", "x = 1\n"))
                status = "several files: "
            files.append(("09-exercises.py" if k % 2 else "final.py", source))
        for name, text in files:
            if layout == "canvas":
                path = subs / f"{last.lower()}{first.lower()}_{uid}_{sub}_{name}"
            elif layout == "moodle":
                path = subs / f"{first} {last}_{sid}_assignsubmission_file_" / name
            else:
                path = subs / sid / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            if name != "scratch.py":
                record["files"][sid] = path
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
    from grading import load_checks

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


def copy_ranks(record: dict) -> tuple[list, float]:
    """Run the copy check (autograde.similarity) on every student's graded file; return where
    each planted copy is shown, as ``[(copier, original, rank, similarity)]``: its rank among
    the pairs (1 = the most similar pair of the class), or ``"group"`` when the copy and its
    original are in one group of students with the same code (a copy of the common correct
    answer is that answer); and the highest similarity of an honest pair."""
    sys.path.insert(0, str(ROOT))
    from autograde import similarity

    # Only work of the student's own: the untouched template and files that do not parse
    # hold none (identical stubs are no evidence of copying).
    codes = {sid: similarity.student_code(path) for sid, path in record["files"].items()
             if sid in record["wrote_code"]}
    groups, pairs = similarity.similar(codes, template=similarity.template_code(), threshold=0.0,
                                       limit=len(codes) ** 2)
    group_of = {sid: g.ids for g in groups for sid in g.ids}
    planted = {frozenset(pair) for pair in record["copies"]}
    rank = {frozenset((p.a, p.b)): (i + 1, p.similarity) for i, p in enumerate(pairs)}
    honest = max((p.similarity for p in pairs if frozenset((p.a, p.b)) not in planted), default=0.0)
    out = []
    for a, b in record["copies"]:
        if group_of.get(a) is not None and group_of.get(a) == group_of.get(b):
            out.append((a, b, "group", 1.0))
        else:
            out.append((a, b, *rank.get(frozenset((a, b)), (None, 0.0))))
    return out, honest


def main() -> None:
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--layout", choices=("canvas", "moodle", "folders"), default="canvas")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--class-report", action="store_true",
                        help="also write the class report (the grader's --class-report)")
    parser.add_argument("--similarity", action="store_true",
                        help="also run the copy check (with the class report), and print where each "
                             "planted copy ranks")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        record: dict = {}
        make_class(Path(tmp), args.students, args.layout, record=record)
        # the grader's --similarity needs --class-report (it lists the pairs there)
        extra = (["--class-report", Path(tmp) / "report.html"] if args.class_report or args.similarity else []) + \
            (["--similarity"] if args.similarity else [])
        seconds, code = grade_class(Path(tmp), args.layout, args.jobs, 3, *extra)
        print(f"{args.students} students ({args.layout}), --jobs {args.jobs}"
              f"{' '.join([''] + [str(e) for e in extra if str(e).startswith('--')])}: "
              f"{seconds:.1f} s wall (exit {code})")
        if args.similarity:
            started = time.monotonic()
            ranks, honest = copy_ranks(record)
            print(f"copy check over {len(record['files'])} graded files: "
                  f"{time.monotonic() - started:.1f} s")
            for copier, original, rank, share in ranks:
                print(f"  planted copy {copier} of {original}: rank {rank}, similarity {share:.0%}")
            worst = max((r for _, _, r, _ in ranks if r != "group"), key=lambda r: r or 10**9, default=0)
            print(f"{len(ranks)} planted copies rank 1 to {worst}; the most similar honest pair: "
                  f"{honest:.0%}; every copy above every honest pair: "
                  f"{all(s > honest for *_, s in ranks)}")


if __name__ == "__main__":
    main()
