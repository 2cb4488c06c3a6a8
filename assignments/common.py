"""What every assignment's grader shares, on the grader's side: reading a submission (its
self-check left out, statement by statement), the program its ranks run (``*_rank.py`` and
:mod:`.rank_common`, sent as source: :func:`rank_program`), what each rank is sent
(:func:`payload`, its own inputs only), running every case on its own (:func:`run_cases`,
:class:`CaseBarrier`: restarts, checkpoints, the traffic seen between the ranks), the
training loop of Assignments 2 and 3 (:func:`grade_training`), seeding models apart from
other grading threads (:func:`seeded`), and the report (the autograder's schema:
``{name, score, max_score, tests: [...]}``)."""
from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .rank_common import load_names  # noqa: F401  (the rank's loader, also used by the tests)

HERE = Path(__file__).resolve().parent


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
    isolation: str | None = None  # the weakest walls a group had (sandbox.multirank.ISOLATION_ORDER)

    def ran(self, runs) -> None:
        """Note how the groups of ``runs`` (a :class:`CaseRuns`) were walled."""
        from sandbox.multirank import weaker

        self.isolated = runs.isolated and self.isolated is not False
        self.isolation = weaker(self.isolation, runs.isolation)

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
    run here), without the statements that set up or run the self-check (one rule with the
    exercises': :func:`sandbox.submission.is_self_check_statement`); or the reason there
    are none."""
    from sandbox.submission import read_submission

    sub = read_submission(Path(path), assignment=True)
    if sub.problem:
        return [], sub.problem
    return [(u.filename, u.source) for u in sub.units], None


@dataclass(frozen=True)
class Student:
    """The code being graded: a submission's ``sources`` (``[(filename, source)]``, run
    inside each rank), or, for a notebook's self-check, ``local``: a callable returning
    ``{name: object}`` from the notebook's own process (its ranks are forked from it)."""

    sources: tuple = ()
    local: object = None


def load_function(sources: list, name: str):
    """The function ``name`` from a submission's units (see :func:`load_names`)."""
    return load_names(sources, (name,))[name]


_SOURCES: dict = {}


def rank_source(name: str) -> str:
    """The source of a module the ranks run: ``assignments/NAME.py``; ``model`` (the
    course's model, ``labs/model.py``, which the ranks of A4 and A5 build) or ``stage``
    (the labs' pipeline stage, which A5's ranks run)."""
    if name not in _SOURCES:
        if name == "stage":
            _SOURCES[name] = _stage_source()
        elif name == "moe":
            _SOURCES[name] = _moe_source()
        else:
            path = HERE.parent / "labs" / "model.py" if name == "model" else HERE / f"{name}.py"
            _SOURCES[name] = path.read_text(encoding="utf-8")
    return _SOURCES[name]


def _moe_source() -> str:
    """The labs' MoE layer pieces Assignment 6's ranks use (``MoEConfig``, ``Experts`` with its
    pacing helpers, ``route``), alone: not the module around them, whose dispatch and combine
    are the answer."""
    import inspect

    from labs import expert_parallel as lab

    pieces = [lab.MoEConfig, lab._sleep_until, lab._PaceBackwardStart, lab._PaceBackwardEnd, lab.Experts, lab.route]
    return ("from __future__ import annotations\n\nimport math\nimport time\nfrom dataclasses import asdict, "
            "dataclass\n\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
            + "\n\n".join(inspect.getsource(piece) for piece in pieces))


def _stage_source() -> str:
    """The labs' pipeline ``Stage`` (and ``stage_bounds``), alone: the ranks of Assignment 5
    get these two, not the module around them (whose schedules are the answer)."""
    import inspect

    from labs import pipeline_parallel

    return ("from __future__ import annotations\n\nimport torch.nn as nn\n\n\n"
            + inspect.getsource(pipeline_parallel.stage_bounds) + "\n\n"
            + inspect.getsource(pipeline_parallel.Stage))


def rank_program(entry: str, student: Student, names, quiet: bool = True, extra: tuple = ()):
    """The :class:`sandbox.multirank.RankProgram` running ``entry`` (``"a1_rank:main"``) on
    ``student``'s code: :mod:`.rank_common`, the modules of ``extra`` (``(name, source)``)
    and the entry's module, as source."""
    from sandbox.multirank import RankProgram

    module = entry.split(":")[0]
    modules = (("rank_common", rank_source("rank_common")),) + tuple(extra) + ((module, rank_source(module)),)
    return RankProgram(modules=modules, entry=entry, sources=tuple(tuple(u) for u in student.sources),
                       names=tuple(names), local=student.local, quiet=quiet)


# ----------------------------------------------------------------------------- random numbers

_TORCH_RNG = threading.Lock()


@contextlib.contextmanager
def seeded(seed: int):
    """torch's global generator seeded with ``seed`` for the block, and restored after it,
    with no other grading thread drawing from it meanwhile: models built by ``nn.Module``
    initialisers (which draw from the global generator) are then the same in the grader,
    in every rank and whatever runs beside them (``--jobs 2``)."""
    import torch

    with _TORCH_RNG, torch.random.fork_rng():
        torch.manual_seed(seed)
        yield


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


def built_in_collectives(calls: dict) -> list:
    """The built-in collectives among a counter's ``calls`` (everything but send/recv)."""
    return sorted(name for name in calls if name not in ("send", "recv"))


# ----------------------------------------------------------------------------- the registry

def grader(assignment: str):
    """The grader module of a registered assignment (``assignments.ASSIGNMENTS``), checked
    against the graders' contract (:func:`assignments.check_grader`). Unknown id: ValueError
    naming the known ones. Starts nothing: what grades calls :func:`sandbox.multirank.prestart`
    (an exercises class run looks up assignments only to tell a forgotten ``--assignment``)."""
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


_THREADS = threading.Lock()
_THREAD_USERS = [0, 0]  # grading threads inside one_thread(), torch's thread count before the first


@contextlib.contextmanager
def one_thread():
    """Compute a baseline in the grader's process with one torch thread: tiny matrices on a
    shared machine run many times slower with a thread pool fighting for the cores. (The
    setting is the process's: the first grading thread in sets it, the last one out
    restores it.)"""
    import torch

    with _THREADS:
        if _THREAD_USERS[0] == 0:
            _THREAD_USERS[1] = torch.get_num_threads()
            torch.set_num_threads(1)
        _THREAD_USERS[0] += 1
    try:
        yield
    finally:
        with _THREADS:
            _THREAD_USERS[0] -= 1
            if _THREAD_USERS[0] == 0:
                torch.set_num_threads(_THREAD_USERS[1])


def first_cause(errors: list) -> tuple:
    """Among ``[(rank, error text)]``, the error that started it: a rank that stopped makes
    its peers fail in gloo with a connection error, which names a consequence, not the
    cause."""
    consequence = ("gloo/transport", "Connection reset by peer", "Connection closed by peer")
    causes = [(r, e) for r, e in errors if not any(c in e for c in consequence)]
    return (causes or errors)[0]


def grade_submitted(path, name: str, titles: dict, points: dict, grade, **kwargs) -> Report:
    """Grade a submitted notebook or .py file with ``grade(Student(sources), **kwargs)``: its
    code runs inside the ranks. Unless ``salt`` is given the inputs are drawn afresh (a
    submission that regenerates them from the seeds learns nothing); a file with no code to
    grade scores 0 on every part, saying why."""
    import secrets

    from sandbox.multirank import prestart

    if kwargs.get("isolate", True):
        prestart()
    kwargs.setdefault("salt", secrets.randbits(32))
    sources, problem = submission_sources(path)
    if problem:
        return Report(name, [Test(t, p, False, problem) for t, p in zip(titles.values(), points.values())])
    return grade(Student(tuple(sources)), **kwargs)


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


#: How long a rank of a submission that has already hung may wait, its group idle, before it
#: is stuck too (the first hang waits ``Limits.stall_s``).
RESTART_STALL_S = 2.0
#: How long a rank of a submission that has already stopped a group may do nothing (no CPU, no
#: message awaited: a sleep) before it is stopped too (the first waits ``Limits.idle_s``).
RESTART_IDLE_S = 4.0
#: How long rank 0, let go alone at a hold checkpoint, may sit idle before it is taken to
#: wait for a peer held back (it is then let go: see CaseBarrier.tick).
HOLD_S = 2.0


class CaseBarrier:
    """The checkpoints of a group that runs cases in turn. Each rank calls
    ``ctx.checkpoint("case", case=index, raised=bool)`` after each case, and may checkpoint
    inside one (``ctx.checkpoint(label, case=index, point=...)``, where the grader cuts the
    traffic it sees). Once every rank still running waits at the same checkpoint, all go
    on; at a case's end, unless some ranks raised and others did not (those would be out
    of step: their messages of the next case could meet a peer still in this one). Ranks
    out of step are all stopped, and :func:`run_cases` starts a fresh group at the next
    case. Ranks that all raised (an untouched stub) go on together. ``settle(label, point)``
    names the checkpoints whose traffic is cut only once the group has gone idle (where
    collectives started asynchronously before them may still be on their way: see
    ``sandbox.multirank._settle``)."""

    record = False

    def __init__(self, world_size: int, settle=None):
        self.world_size, self.waiting, self.done = world_size, {}, set()
        self.settle = settle
        self.stopped_after = None  # the case after which the group was told to stop
        self.holds = {}  # case -> "went on" | "waited" (see arrive: the "hold" checkpoints)
        self._hold = None  # (case, since when rank 0 alone was let go, whether it reached B)

    def arrive(self, rank: int, message: dict) -> dict:
        """A rank waits at a checkpoint. The ``hold`` checkpoints (``point`` "A", then "B")
        test, from outside, that a rank goes on while a peer is held back: when every rank is
        at A, rank 0 alone goes on; the others follow once it reaches B (it "went on"), or
        once it has sat idle for :data:`HOLD_S` without reaching it (it "waited": for a peer
        held back)."""
        if (message.get("checkpoint") == "hold" and self._hold is not None and not self._hold[2] and rank == 0
                and message.get("point") == "B"):
            case, _, _ = self._hold
            self._hold = (case, 0.0, True)
            self.holds[case] = "went on"
            others = {r: "go" for r in self.waiting if r != 0}
            self.waiting = {0: message}
            return others
        self.waiting[rank] = message
        return self._decide()

    def settles(self, message: dict) -> bool:
        return self.settle is not None and bool(self.settle(message.get("checkpoint"), message.get("point")))

    def tick(self, now: float, idle_for) -> dict:
        """Rank 0, let go alone at a hold, has not reached B and the group has been idle for
        :data:`HOLD_S` (``idle_for(seconds)``: no CPU spent, no thread waiting to run; the
        others wait at A, so it is rank 0 that waits): let the others go too. On a loaded
        machine a rank 0 that is slow, not waiting, keeps running until it gets there."""
        if self._hold is None or self._hold[2] or now - self._hold[1] < HOLD_S or not idle_for(HOLD_S):
            return {}
        case = self._hold[0]
        self._hold = (case, 0.0, True)
        self.holds[case] = "waited"
        others = {r: "go" for r, m in self.waiting.items() if m.get("point") == "A"}
        for r in others:
            del self.waiting[r]
        return others

    def finished(self, rank: int) -> dict:
        self.done.add(rank)
        self.waiting.pop(rank, None)
        return self._decide()

    def _decide(self) -> dict:
        live = set(range(self.world_size)) - self.done
        if not self.waiting or not live <= set(self.waiting):
            return {}
        where = {(m.get("checkpoint"), m.get("case"), str(m.get("point"))) for m in self.waiting.values()}
        raised = {bool(m.get("raised")) for m in self.waiting.values()}
        go = len(where) == 1 and len(raised) == 1 and live == set(range(self.world_size))
        if go and where == {("hold", next(iter(where))[1], "A")} and self.world_size > 1:
            self._hold = (next(iter(where))[1], time.monotonic(), False)
            del self.waiting[0]
            return {0: "go"}
        if go and next(iter(where))[0] == "hold":
            self._hold = None
        if not go and all(label == "case" for label, _, _ in where):
            self.stopped_after = min((c for _, c, _ in where if isinstance(c, int)), default=None)
        answers = {r: "go" if go else "stop" for r in self.waiting}
        self.waiting = {}
        return answers


@dataclass
class CaseRuns:
    """What the ranks reported about each case (:func:`run_cases`)."""

    messages: list  # per case: {rank: message}
    stopped: dict = field(default_factory=dict)  # case -> why it did not finish on every rank
    isolated: bool | None = None  # every group had its own namespaces (None: none ran)
    isolation: str | None = None  # the weakest walls a group had (None: none ran)
    missing: str | None = None  # why the submission has nothing to grade, where a rank said so
    sockets: list = field(default_factory=list)  # outside addresses a rank tried to reach
    groups: int = 0
    #: per case: the traffic seen between its checkpoints on the group's loopback, in order
    #: (``[{"checkpoint": label, "point": ..., "traffic": [per rank]}]``); absent for a case
    #: no capture saw (ranks without a network namespace: then only the ranks' claims count)
    segments: dict = field(default_factory=dict)
    wired: bool = True  # every group's traffic was seen whole
    holds: dict = field(default_factory=dict)  # case -> what rank 0 did at a hold (see CaseBarrier)
    outside: list = field(default_factory=list)  # traffic past gloo, the store or any owner: what, per group
    #: case -> {rank process: bytes it held more at the case's ``end`` memory checkpoint than at
    #: its group's ``start`` one}, measured from outside (:attr:`GroupResult.memory`)
    grew: dict = field(default_factory=dict)

    def traffic(self, case: int, label: str = "case", point=None) -> list | None:
        """Each rank's traffic of ``case`` up to its checkpoint ``label`` (and ``point``), or
        None where no capture saw it."""
        for segment in self.segments.get(case, []):
            if segment["checkpoint"] == label and (point is None or segment.get("point") == point):
                return segment["traffic"]
        return None


def stop_reason(group, messages: dict) -> str:
    """Why a case did not finish on every rank: a rank's own error first (its peers then
    waited for it, which is the consequence, not the cause), else what the watchdog saw."""
    errors = [(r, m["error"]) for r, m in sorted(messages.items()) if "error" in m]
    detail = group.detail or "some ranks reported nothing"
    if errors:
        r, e = first_cause(errors)
        text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
        return f"{text} (then {detail})" if not group.ok else text
    return detail


def restart_limits(limits):
    """The limits of a group started after one of the same submission stopped: this code has
    stopped once, so an idle group (waiting for a message, or asleep) is stuck sooner
    (:data:`RESTART_STALL_S`, :data:`RESTART_IDLE_S`). A rank that sleeps in every case cost
    ``idle_s`` a case before: 110 s for Assignment 2's six, 40 s now."""
    import dataclasses

    return dataclasses.replace(limits, stall_s=min(limits.stall_s, RESTART_STALL_S),
                               idle_s=min(limits.idle_s, RESTART_IDLE_S))


def run_cases(world_size: int, count: int, payloads_for, program, limits, isolate: bool,
              signature=None, settle=None) -> CaseRuns:
    """Run ``count`` cases on groups of ``world_size`` ranks, every case on its own: one group
    runs them in turn (``payloads_for(indices)`` builds what each rank gets for the cases
    ``indices``; ``program`` runs them, reporting ``{"case": index, ...}`` and checkpointing
    after each, see :class:`CaseBarrier`), and when a group stops at a case (a hang, a crash,
    a rank that raised while its peers did not), a fresh group runs the cases after it. A case
    whose ``signature(index)`` equals that of a case that stopped a group is not run again
    (the same code on other random numbers would stop it the same way): it is recorded as
    stopped, saying so. The groups of a world size share ``limits.wall_s`` and
    ``limits.cpu_s``: once spent, the cases left are not run. ``settle``: see
    :class:`CaseBarrier`."""
    import dataclasses

    from sandbox.multirank import run_ranks, weaker

    runs = CaseRuns([{} for _ in range(count)])
    pending = list(range(count))
    spent_wall = spent_cpu = 0.0  # the world size's groups together
    while pending:
        if runs.stopped:
            limits = restart_limits(limits)
        if spent_wall >= limits.wall_s or spent_cpu >= limits.cpu_s:
            for c in pending:
                runs.stopped[c] = (f"not run: the ranks used up the {limits.wall_s:g} s (or {limits.cpu_s:g} CPU s) "
                                   "a world size may take")
            break
        barrier = CaseBarrier(world_size, settle)
        group = run_ranks(world_size, program, payloads_for(pending),
                          dataclasses.replace(limits, wall_s=limits.wall_s - spent_wall,
                                              cpu_s=limits.cpu_s - spent_cpu),
                          isolate=isolate, checkpoints=barrier)
        spent_wall += group.wall_s
        spent_cpu += group.cpu_s
        runs.groups += 1
        runs.holds.update(barrier.holds)
        runs.isolated = group.isolated and runs.isolated is not False
        runs.isolation = weaker(runs.isolation, group.isolation)
        runs.sockets += group.sockets
        runs.wired = runs.wired and group.segments is not None and group.wire_complete
        for segment in group.segments or []:
            if isinstance(segment.get("case"), int):
                runs.segments.setdefault(segment["case"], []).append(segment)
            for r, counts in enumerate(segment["traffic"]):
                if counts["store"] or counts["garbage"]:
                    runs.outside.append(f"rank {r}: " + ("sent data through the rendezvous store"
                                                         if counts["store"] else "wrote bytes to gloo's "
                                                         "connections that are no gloo message"))
        start = next((m["held"] for m in group.memory if m["point"] == "start"), None)
        for m in group.memory:
            if start and m["point"] == "end" and isinstance(m["case"], int):
                runs.grew[m["case"]] = {pid: held - start[pid] for pid, held in m["held"].items() if pid in start}
        if group.unowned_bytes:
            runs.outside.append(f"{group.unowned_bytes:,} bytes on a connection no rank opened at the rendezvous")
        by_case, runs.missing = messages_by_case(group, count, runs.missing)
        for c in pending:
            runs.messages[c].update(by_case[c])
        if runs.missing:
            break
        unfinished = [c for c in pending if len(runs.messages[c]) < world_size]
        if not unfinished:
            break
        if barrier.stopped_after is not None and unfinished[0] > barrier.stopped_after:
            pending = unfinished  # stopped on purpose after a complete case: go on from there
            continue
        stop = unfinished[0]
        runs.stopped[stop] = stop_reason(group, runs.messages[stop])
        pending = []
        for c in unfinished[1:]:
            if signature is not None and signature(c) == signature(stop):
                runs.stopped[c] = f"not run: the same case stopped the ranks before ({runs.stopped[stop]})"
            else:
                pending.append(c)
    return runs


def grade_training(name: str, titles: dict, points: dict, program, cases: list, *, header: dict, describe,
                   reference, check, world_sizes, limits, isolate: bool, check_wire=None, wire_parts=(),
                   wire_decides=(), payloads=None, check_memory=None, judges=None, settle=None) -> Report:
    """The grading loop of the assignments that train a student's class (2 and 3): at each
    world size ``n`` the ranks run every case of ``cases`` (each on its own:
    :func:`run_cases`; every rank gets ``header`` plus the indices of its cases). A case that
    did not finish, or that some rank failed, costs every part (its feedback names the rank's
    own error first). For the others ``ref = reference(n, case)`` is computed once and
    ``check(n, case, rank, message, ref)`` returns each rank's failures, ``{part: text}``;
    ``check_wire(n, case, segments, held, messages)``, the failures the grader's own view shows: the
    traffic seen between the ranks (``segments``: the case's, see :class:`CaseRuns`; None
    where no capture saw it) and what a rank did while its peers were held back (``held``,
    see :class:`CaseBarrier`; None where the case held none), against what the ranks
    reported (``{rank: message}``). ``describe(case)`` names
    the case. ``payloads(n, indices)``: what each rank gets, when not ``header`` alone. A
    part's feedback is its first failure at each world size; every part is judged on its
    own evidence. Traffic past the ranks' gloo connections (the store, raw bytes) costs the
    parts of ``wire_parts``; the parts of ``wire_decides`` are judged by the traffic alone
    where it was seen (what the ranks said about them is then set aside: a claim).
    ``check_memory(n, case, grew)``: the failures what the ranks held shows (``grew``:
    :attr:`CaseRuns.grew` of the case, None where it was not measured). ``judges(case)``: the
    parts a case is evidence for (default: all); a case that did not finish costs only those.
    ``settle(label, point)``: the checkpoints cut once the group is idle (:class:`CaseBarrier`)."""
    started = time.monotonic()
    fails = {p: [] for p in points}
    missing = None
    report = Report(name)
    for n in world_sizes:
        def payloads_for(indices, n=n):
            if payloads is not None:
                return payloads(n, indices)
            return [payload(dict(header, cases=indices), [])] * n

        runs = run_cases(n, len(cases), payloads_for, program, limits, isolate, settle=settle)
        report.ran(runs)
        missing = missing or runs.missing
        if runs.outside:
            for part in wire_parts:
                fails[part].append(f"n={n}, {runs.outside[0]}: the ranks' data must travel by torch.distributed")
        for c, case in enumerate(cases):
            label = f"n={n}, {describe(case)}"
            ranks = runs.messages[c]
            costs = judges(case) if judges is not None else points
            if c in runs.stopped:
                for p in costs:
                    fails[p].append(f"{label}: not finished ({runs.stopped[c]})")
                continue
            errors = [(r, m["error"]) for r, m in sorted(ranks.items()) if "error" in m]
            if errors:
                r, e = first_cause(errors)
                text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
                for p in costs:
                    fails[p].append(f"{label}: {text}")
                continue
            ref = reference(n, case)
            seen = runs.segments.get(c) if runs.wired else None
            for r, m in sorted(ranks.items()):
                for part, text in check(n, case, r, m, ref).items():
                    if seen is None or part not in wire_decides:
                        fails[part].append(f"{label}, rank {r}: {text}")
            if check_memory is not None:
                for part, text in check_memory(n, case, runs.grew.get(c)).items():
                    fails[part].append(f"{label}: {text}")
            if check_wire is not None and (seen is not None or c in runs.holds):
                for part, text in check_wire(n, case, seen, runs.holds.get(c), ranks).items():
                    fails[part].insert(0, f"{label}: {text}")  # the grader's own view comes first
    shown = {p: [] for p in points}
    for part in points:
        feedback = list(dict.fromkeys(fails[part]))
        for n in world_sizes:  # the first failure per world size is enough
            shown[part] += [f for f in feedback if f.startswith(f"n={n},")][:1]
    return finish_report(report, titles, points, shown, missing, started)


def self_check(grade, objects: dict, world_sizes, seeds) -> float:
    """What a notebook's self-check does: ``grade`` on ``objects`` (``{name: object}`` as the
    notebook defines them) with the ranks' prints shown (they are forked from the notebook's
    process, so they have what it defines), then the report printed. Returns the score."""
    report = grade(Student(local=lambda: objects), world_sizes=world_sizes, seeds=seeds, quiet=False)
    print(report.text())
    return report.score


def defined(namespace: dict, names) -> dict:
    """``{name: namespace[name]}`` for each of ``names``; NameError naming those not defined yet."""
    absent = [name for name in names if name not in namespace]
    if absent:
        raise NameError(f"define {', '.join(absent)} first (run the cells above)")
    return {name: namespace[name] for name in names}
