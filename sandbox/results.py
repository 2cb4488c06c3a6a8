"""What grading concludes, for every grader: the one result model that the front ends read.

A graded submission is a :class:`SubmissionReport` of ``(Check, Result)`` pairs in
:class:`Part` s: the check says what was tested and what it is worth, the result what was
found, the part which exercise or assignment it belongs to. The exercises' checks
(:mod:`grading`) conclude in the grader's process, test by test; an assignment's grader
(:mod:`assignments`) concludes from its ranks' runs and hands back the same pairs. Nothing
here runs student code or knows an exercise.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Part:
    """One graded part of the course: an exercise (``ex1``) or an assignment (``a1``).

    ``id``: the reports' key (the CSV's column); ``title``: how reports head it;
    ``function``: what the student writes, as feedback names it; ``max_points``: its worth."""

    id: str
    title: str
    function: str
    max_points: float


@dataclass(frozen=True)
class Result:
    """What one check concluded. ``feedback`` is written for the student."""

    passed: bool
    feedback: str
    not_implemented: bool = False  # the function still raises NotImplementedError
    #: The last call of the checked function and what it gave, as ``"f(args) -> value"``
    #: (the class report lists the most common wrong ones).
    got: str | None = None
    #: For a wrong answer: the known mistake (a key of the grader's table of mistakes) that
    #: the feedback's "Why:" explains, or None ("other").
    mistake: str | None = None
    #: A pass that holds only on a condition the part's own regrade judges (empty:
    #: unconditional; see :class:`grading.Regrade`). Exercise 2: "slip" or "far", the answer is
    #: the best point under the student's own chinchilla_loss, near the exercise's or not.
    condition: str = ""


def _not_run(call):
    raise RuntimeError("this check is concluded by its grader, not run")


@dataclass(frozen=True)
class Check:
    """One test: ``exercise`` is the id of the :class:`Part` it belongs to (an exercise's or
    an assignment's); ``run(call)`` concludes a :class:`Result` from the submission's function
    (the exercises' checks; an assignment's parts are concluded by its own grader)."""

    exercise: str
    name: str
    points: float
    hidden: bool
    function: str
    run: Callable[[Callable[..., Any]], Result] = field(default=_not_run, repr=False, compare=False)
    description: str = ""


@dataclass
class SubmissionReport:
    """Everything known about one graded submission."""

    submission: str
    results: list = field(default_factory=list)  # [(Check, Result)] in check order
    student_id: str = ""  # from the roster, or the student's folder, or the file name
    name: str = ""  # from the roster
    missing: bool = False  # on the roster, but no submission was found
    problems: list = field(default_factory=list)  # cells/statements that did not run
    notes: list = field(default_factory=list)  # what the grader skipped, and why
    isolation: str | None = None
    seconds: float = 0.0
    grader_errors: list = field(default_factory=list)  # not the student's fault
    #: problem (a cell that did not run) -> the student's function in which its error was
    #: raised: then that function's failed test, not the cell, is what to fix first
    problem_causes: dict = field(default_factory=dict)
    #: What was graded, in order (the exercises, or one assignment): the reports' sections
    parts: list = field(default_factory=list)
    #: The grader's known mistakes, name -> the words its feedback uses (an assignment's
    #: ``MISTAKES``; the exercises' are grading.explain.WHY, which the class report reads)
    known_mistakes: dict = field(default_factory=dict)

    @property
    def score(self) -> float:
        return float(sum(c.points for c, r in self.results if r.passed))

    @property
    def max_score(self) -> float:
        return float(sum(c.points for c, _ in self.results))

    def part(self, part_id: str) -> Part:
        """The part ``part_id`` names (a bare one, titled by its id, if the report lacks it)."""
        found = next((p for p in self.parts if p.id == part_id), None)
        return found or Part(part_id, part_id, part_id, 0.0)

    def exercises(self) -> list:
        """The report's ``exercises`` list, a part each (schema in the instructors' guide, "The JSON report")."""
        out = []
        ids = [p.id for p in self.parts]
        ids += [c.exercise for c, _ in self.results if c.exercise not in ids]
        for part_id in dict.fromkeys(ids):
            group = [(c, r) for c, r in self.results if c.exercise == part_id]
            if not group:
                continue
            part = self.part(part_id)
            tests = [{"name": c.name, "passed": bool(r.passed),
                      "points": float(c.points if r.passed else 0), "max_points": float(c.points),
                      "feedback": r.feedback, "hidden": bool(c.hidden),
                      "mistake": r.mistake, "answer": r.got} for c, r in group]
            out.append({"id": part.id, "name": part.title, "function": part.function,
                        "score": sum(t["points"] for t in tests),
                        "max_score": sum(t["max_points"] for t in tests), "tests": tests})
        return out

    def to_json(self) -> dict:
        return {"submission": self.submission, "student_id": self.student_id, "name": self.name,
                "missing": self.missing, "score": self.score, "max_score": self.max_score,
                "exercises": self.exercises(), "problems": self.problems, "notes": self.notes,
                "isolation": self.isolation, "seconds": round(self.seconds, 3),
                "grader_errors": self.grader_errors}
