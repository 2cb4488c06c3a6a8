"""What every assignment's grader shares: loading a submission's function inside a rank,
counting what a rank sends, sending tensors between the grader and its ranks, and the
report (the autograder's schema: ``{name, score, max_score, tests: [...]}``)."""
from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sandbox.submission import plumbing_pattern

#: Cells that set up the self-check (they import this package): not part of the answer.
PLUMBING = plumbing_pattern(("assignments", "tests", "solutions", "labs"), calls=("self_check",))


@dataclass
class Test:
    name: str
    max_points: float
    passed: bool = False
    feedback: str = ""

    @property
    def points(self) -> float:
        return self.max_points if self.passed else 0.0

    def as_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "points": self.points,
                "max_points": self.max_points, "feedback": self.feedback}


@dataclass
class Report:
    name: str
    tests: list = field(default_factory=list)
    wall_s: float = 0.0
    isolated: bool | None = None  # every group of ranks had its own namespaces (None: not run)

    @property
    def score(self) -> float:
        return sum(t.points for t in self.tests)

    @property
    def max_score(self) -> float:
        return sum(t.max_points for t in self.tests)

    def zero(self, reason: str) -> None:
        """Every part scores 0, with ``reason`` said once on each failed or passed part."""
        for t in self.tests:
            t.passed = False
            t.feedback = reason if not t.feedback else f"{reason} ({t.feedback})"

    def as_dict(self) -> dict:
        return {"name": self.name, "score": self.score, "max_score": self.max_score,
                "tests": [t.as_dict() for t in self.tests]}

    def results(self, part) -> list:
        """The parts graded, as every grader hands them to the front ends: ``[(Check, Result)]``
        of the one result model (:mod:`sandbox.results`), in ``part`` (the assignment's
        :class:`~sandbox.results.Part`). An untouched stub (nothing earned, a part saying "not
        implemented yet") is marked so on every test: the class report counts such rows apart
        from work that scored 0."""
        from sandbox.results import Check, Result

        stub = self.score == 0 and any("not implemented yet" in (t.feedback or "") for t in self.tests)
        return [(Check(part.id, t.name, float(t.max_points), False, part.function),
                 Result(bool(t.passed), t.feedback or "", stub)) for t in self.tests]

    def text(self) -> str:
        lines = [f"{self.name}: {self.score:g} / {self.max_score:g} points"]
        for t in self.tests:
            lines.append(f"  {'✓' if t.passed else '✗'} {t.name} ({t.points:g}/{t.max_points:g})")
            if t.feedback and not t.passed:
                lines += ["      " + line for line in t.feedback.splitlines()]
        return "\n".join(lines)


# ----------------------------------------------------------------------------- submissions

def submission_sources(path) -> tuple[list, str | None]:
    """``[(filename, source)]`` of a submitted notebook or .py file (text only: nothing is
    run here), without the cells that set up the self-check; or the reason there are none."""
    from sandbox.submission import read_submission

    sub = read_submission(Path(path))
    if sub.problem:
        return [], sub.problem
    return [(u.filename, u.source) for u in sub.units if not PLUMBING.search(u.source)], None


def load_function(sources: list, name: str):
    """Run a submission's units in one namespace (inside a rank; a failing unit costs only
    itself, as in the exercises' grader) and return the function ``name``, or raise
    LookupError saying why it is missing."""
    return load_names(sources, (name,))[name]


def load_names(sources: list, names) -> dict:
    """``{name: object}`` for each of ``names`` (functions or classes), the submission's
    units run once in one namespace; LookupError naming the first one missing."""
    namespace = {"__name__": "submission"}
    errors = []
    with contextlib.redirect_stdout(io.StringIO()):
        for filename, source in sources:
            try:
                exec(compile(source, filename, "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - the student's cell, not ours
                errors.append(f"{filename}: {type(exc).__name__}: {exc}")
    for name in names:
        if not callable(namespace.get(name)):
            defined = re.compile(rf"^[ \t]*(?:async[ \t]+)?(?:def|class)[ \t]+{re.escape(name)}\b", re.M)
            if not any(defined.search(source) for _, source in sources):
                # Not written anywhere: most likely another file (a cell's error would mislead).
                raise LookupError(f"no function `{name}` in the submission: nowhere does it "
                                  f"define `{name}` (the wrong file?)")
            more = f" ({errors[0]})" if errors else ""
            raise LookupError(f"no function `{name}` in the submission{more}")
    return {name: namespace[name] for name in names}


def quiet_stdio() -> None:
    """Send a rank's own prints to /dev/null (a grader's console is not the student's)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def open_rank(data: bytes, get, report, quiet: bool):
    """A rank's first steps, the same in every grader: silence its prints (``quiet``), read
    what the grader sent it (:func:`unpack`) and fetch the submission's code with ``get()``.
    Returns ``(header, arrays, code)``; or None once it has reported ``{"missing": why}``,
    where the submission lacks what the assignment asks for."""
    if quiet:
        quiet_stdio()
    header, arrays = unpack(data)
    try:
        code = get()
    except Exception as exc:  # noqa: BLE001 - a rank reports, it never raises
        report({"missing": str(exc)[:300]})
        return None
    return header, arrays, code


# ----------------------------------------------------------------------------- tensors on the wire

def encode(array) -> str:
    a = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    return base64.b64encode(a.tobytes()).decode()


def decode(text: str, size: int) -> np.ndarray | None:
    """A float32 vector of ``size`` elements from what a rank reported, or None if it is not
    one (the grader trusts nothing a rank writes)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        return None
    if len(raw) != 4 * size:
        return None
    return np.frombuffer(raw, dtype=np.float32).copy()


def payload(header: dict, arrays: list) -> bytes:
    """What the grader sends one rank: a JSON header line, then its float32 arrays."""
    head = dict(header, sizes=[int(np.asarray(a).size) for a in arrays])
    body = b"".join(np.ascontiguousarray(np.asarray(a, dtype=np.float32)).tobytes() for a in arrays)
    return json.dumps(head).encode() + b"\n" + body


def unpack(data: bytes) -> tuple[dict, list]:
    head, _, body = data.partition(b"\n")
    header = json.loads(head)
    arrays, offset = [], 0
    for size in header["sizes"]:
        arrays.append(np.frombuffer(body, dtype=np.float32, count=size, offset=offset).copy())
        offset += 4 * size
    return header, arrays


# ----------------------------------------------------------------------------- traffic

def traffic_counter():
    """The labs' collective counter (``labs.training.CollectiveCounter``), extended to the
    point-to-point operations a hand-written collective is made of: ``calls["send"]``,
    ``bytes["send"]`` (and ``recv``) beside the built-in collectives it already counts."""
    import torch
    from labs.training import _COLLECTIVES, CollectiveCounter, _nbytes

    # CollectiveCounter's own method, without the dynamo.disable wrapper torch put on it.
    count_collective = getattr(CollectiveCounter.__torch_dispatch__, "__wrapped__",
                               CollectiveCounter.__torch_dispatch__)
    c10d = torch.ops.c10d
    p2p = {c10d.send: "send", c10d.recv_: "recv"}

    class TrafficCounter(CollectiveCounter):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            # torch wraps a mode's __torch_dispatch__ in dynamo.disable, which imports
            # torch._dynamo (1.5 s) on first use; a grader's rank never compiles.
            return False

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = p2p.get(func._overloadpacket)
            if name is not None:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.bytes[name] = self.bytes.get(name, 0) + _nbytes(args[0])
            elif func.namespace == "c10d" and func._overloadpacket not in _COLLECTIVES:
                other = str(func._overloadpacket).split(".")[-1].rstrip("_")  # allgather_, ...
                if other not in ("barrier", "monitored_barrier"):
                    self.calls[other] = self.calls.get(other, 0) + 1
            return count_collective(self, func, types, args, kwargs)

    return TrafficCounter()




def warm_up() -> None:
    """Import, in a rank, what the grader's side of it uses (the counter's dispatch mode
    imports modules on first use), before the rank loses the right to read them. That
    includes torch._dynamo (with sympy and mpmath): torch imports it on first use from
    several places a submission reaches (a collective inside an autograd.Function, torch's
    disable wrapper), and a rank whose ids were dropped may no longer read the files of a
    Python installed under a private home folder. About 1.5 s, paid once in the grading
    process, whose forked ranks inherit it."""
    import cProfile  # noqa: F401  (imported lazily by torch's dispatch-mode machinery)
    import torch
    import torch._dynamo  # noqa: F401

    with traffic_counter():
        torch.zeros(1).add_(1)


def built_in_collectives(calls: dict) -> list:
    """The built-in collectives among a counter's ``calls`` (everything but send/recv)."""
    return sorted(name for name in calls if name not in ("send", "recv"))


# ----------------------------------------------------------------------------- the registry

def grader(assignment: str):
    """The grader module of a registered assignment (``assignments.ASSIGNMENTS``), checked
    against the graders' contract (:func:`assignments.check_grader`). Unknown id: ValueError
    naming the known ones."""
    import importlib

    from . import ASSIGNMENTS, check_grader

    if assignment not in ASSIGNMENTS:
        raise ValueError(f"no assignment {assignment!r}; the course has {', '.join(sorted(ASSIGNMENTS))}")
    module = importlib.import_module(ASSIGNMENTS[assignment][0])
    check_grader(module)
    return module


def max_points(assignment: str) -> float:
    """Points an assignment is worth: its grader's ``POINTS`` (part -> points), summed;
    0.0 for a grader that does not say (the rows then take it from a graded report)."""
    points = getattr(grader(assignment), "POINTS", None)
    return float(sum(points.values())) if isinstance(points, dict) else 0.0


def reference_submission(assignment: str, folder) -> Path:
    """A file holding the assignment's reference answer, as a student would submit it: what
    the grader module's own ``reference_submission(folder)`` writes where it has one, else
    the master notebook (whose solution cell is the answer)."""
    from . import ASSIGNMENTS

    module = grader(assignment)
    if hasattr(module, "reference_submission"):
        return Path(module.reference_submission(Path(folder)))
    return Path(__file__).resolve().parents[1] / ASSIGNMENTS[assignment][1]


@contextlib.contextmanager
def one_thread():
    """Compute a baseline in the grader's process with one torch thread: tiny matrices on a
    shared machine run many times slower with a thread pool fighting for the cores."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def first_cause(errors: list) -> tuple:
    """Among ``[(rank, error text)]``, the error that started it: a rank that stopped makes
    its peers fail in gloo with a connection error, which names a consequence, not the
    cause."""
    consequence = ("gloo/transport", "Connection reset by peer", "Connection closed by peer")
    causes = [(r, e) for r, e in errors if not any(c in e for c in consequence)]
    return (causes or errors)[0]


def grade_submitted(path, name: str, titles: dict, points: dict, load, grade, **kwargs) -> Report:
    """Grade a submitted notebook or .py file with ``grade(get_functions, **kwargs)``, where
    ``load(sources)`` finds what the assignment asks for in the file's code. Unless ``salt``
    is given the inputs are drawn afresh (a submission that regenerates them from the seeds
    learns nothing); a file with no code to grade scores 0 on every part, saying why."""
    import secrets

    kwargs.setdefault("salt", secrets.randbits(32))
    sources, problem = submission_sources(path)
    if problem:
        return Report(name, [Test(t, p, False, problem) for t, p in zip(titles.values(), points.values())])
    return grade(lambda: load(sources), **kwargs)


def messages_by_case(group, count: int, missing=None) -> tuple:
    """``(by_case, missing)``: what each rank of a finished ``group`` reported about each of
    ``count`` cases, ``[{rank: message}]`` (a message names its case by index, ``"case"``),
    and why the submission has nothing to grade where a rank said so (``{"missing": why}``;
    else ``missing`` as given)."""
    by_case = [{} for _ in range(count)]
    for rank, messages in enumerate(group.messages):
        for m in messages:
            if "missing" in m:
                missing = m["missing"]
            c = m.get("case")
            if isinstance(c, int) and 0 <= c < count:
                by_case[c][rank] = m
    return by_case, missing


def finish_report(report: Report, titles: dict, points: dict, problems: dict, missing, started: float) -> Report:
    """Fill ``report`` with one test per part of ``points``: passed when ``problems[part]``
    (its feedback, a list of lines) is empty, else failed with those lines. A submission
    that lacks what the assignment asks for (``missing``: why, or None) fails every part
    with that reason. ``started``: ``time.monotonic()`` when grading began."""
    for part, worth in points.items():
        lines = problems[part]
        report.tests.append(Test(titles[part], worth, not lines, "\n".join(lines)))
    if missing:
        for t in report.tests:
            t.passed, t.feedback = False, missing
    report.wall_s = time.monotonic() - started
    return report


def run_cases_in_rank(get_class, quiet: bool, run):
    """A rank's main for :func:`grade_case_by_case`: the cases the grader sent, in turn,
    each with ``run(cls, rank, world_size, case, salt) -> message``; the rank stops at its
    first case that raises (the other ranks would wait for it), reporting the error."""
    def main(rank, world_size, data, report):
        opened = open_rank(data, get_class, report, quiet)
        if opened is None:
            return
        header, _, cls = opened
        for index, case in enumerate(header["cases"]):
            try:
                message = run(cls, rank, world_size, case, header["salt"])
            except NotImplementedError as exc:
                report({"case": index, "error": "NotImplementedError", "message": str(exc)[:200]})
                return
            except Exception as exc:  # noqa: BLE001  (the other ranks would wait for this one)
                report({"case": index, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                return
            report(dict(message, case=index))
    return main


def grade_case_by_case(name: str, titles: dict, points: dict, get_class, run, cases: list, *, describe,
                       reference, check, earns_after=None, world_sizes, salt: int, quiet: bool, limits,
                       isolate: bool, warm) -> Report:
    """The grading loop of the assignments that train a student's class (2 and 3). At each
    world size n one group of ranks runs every case of ``cases`` (JSON values) in turn
    (:func:`run_cases_in_rank`). A case that some rank failed or did not finish costs every
    part, and ends that world size (the ranks stopped there). For the others
    ``ref = reference(n, case)`` is computed once, and ``check(n, case, rank, message, ref)``
    returns each rank's failures, ``{part: text}``; ``describe(case)`` names the case in the
    feedback. A part's feedback is its first failure at each world size. ``earns_after``,
    ``{part: (other parts, text)}``: a part that an empty answer would pass earns its points
    only once those others pass; until then it fails saying ``text``. ``warm()`` runs once
    here and in each rank before it drops its privileges."""
    from sandbox.multirank import run_ranks

    warm()
    started = time.monotonic()
    fails = {p: [] for p in points}
    missing, isolated = None, None
    for n in world_sizes:
        payloads = [payload({"cases": cases, "salt": salt}, [])] * n
        group = run_ranks(n, run_cases_in_rank(get_class, quiet, run), payloads, limits, isolate=isolate,
                          prepare=warm)
        isolated = group.isolated and isolated is not False  # every group had its own namespaces
        by_case, missing = messages_by_case(group, len(cases), missing)
        for c, case in enumerate(cases):
            ranks = by_case[c]
            label = f"n={n}, {describe(case)}"
            errors = [(r, m["error"]) for r, m in sorted(ranks.items()) if "error" in m]
            if errors or len(ranks) < n:
                if errors:
                    r, e = first_cause(errors)
                    text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
                else:
                    text = f"not finished ({group.detail or 'some ranks reported nothing'})"
                for p in points:
                    fails[p].append(f"{label}: {text}")
                break  # the ranks stop at the first case that fails
            ref = reference(n, case)
            for r, m in sorted(ranks.items()):
                for part, text in check(n, case, r, m, ref).items():
                    fails[part].append(f"{label}, rank {r}: {text}")
    shown = {p: [] for p in points}
    for part in points:
        feedback = list(dict.fromkeys(fails[part]))
        for n in world_sizes:  # the first failure per world size is enough
            shown[part] += [f for f in feedback if f.startswith(f"n={n},")][:1]
    for part, (others, text) in (earns_after or {}).items():
        if not shown[part] and any(fails[p] for p in others):
            shown[part] = [text]
    report = finish_report(Report(name), titles, points, shown, missing, started)
    report.isolated = isolated
    return report


def self_check(grade, get, world_sizes, seeds) -> float:
    """What a notebook's self-check does: ``grade(get, ...)`` with the ranks' prints shown
    (they are forked from the notebook's process, so they have what it defines), then the
    report printed. Returns the score."""
    report = grade(get, world_sizes=world_sizes, seeds=seeds, quiet=False)
    print(report.text())
    return report.score


def defined(namespace: dict, names) -> dict:
    """``{name: namespace[name]}`` for each of ``names``; NameError naming those not defined yet."""
    absent = [name for name in names if name not in namespace]
    if absent:
        raise NameError(f"define {', '.join(absent)} first (run the cells above)")
    return {name: namespace[name] for name in names}
