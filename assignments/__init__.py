"""Assignments: students write torch.distributed code, graded on real gloo ranks in the
multi-rank sandbox (``sandbox.multirank``). One module per assignment holds its grader;
its notebook (``assignments/a1-*.md``) holds the statement, the stub and, in the master,
the reference solution.

What a grader module must define (checked by :func:`check_grader` when
``assignments.common.grader`` loads it; CONTRIBUTING.md says how to add an assignment):

``NAME``
    the assignment's title, as reports head it ("Assignment 1: ring all-reduce");
``TITLES``, ``POINTS``
    part key -> the part's title, and part key -> its points (the same keys, in order);
``FUNCTION``, ``CLASS`` or ``FUNCTIONS``
    what the student writes: one function's name, one class's name, or a tuple of names;
``grade_file(path, **options) -> assignments.common.Report``
    grade a notebook or ``.py`` file (options: ``seeds``, ``world_sizes``, ``salt``);
    never raises for anything the submission does;
``self_check(...)``
    what the statement's check cells call: the same grading, printed for the student.

Optional: ``ALLOWED_WORLD_SIZES`` (the world sizes its model fits), ``MISTAKES`` (known
mistake -> the words its feedback uses, for the class report), ``reference_submission(folder)``
(a file holding the reference answer, when the master notebook is not one).
"""

#: id -> (grader module, notebook master)
ASSIGNMENTS = {
    "a1": ("assignments.a1_ring", "assignments/a1-ring-allreduce.md"),
    "a2": ("assignments.a2_ddp", "assignments/a2-ddp-by-hand.md"),
    "a3": ("assignments.a3_zero", "assignments/a3-zero-sharded-optimizer.md"),
    "a4": ("assignments.a4_tp", "assignments/a4-tensor-parallel.md"),
    "a5": ("assignments.a5_pipeline", "assignments/a5-pipeline-1f1b.md"),
    "a6": ("assignments.a6_moe", "assignments/a6-expert-parallel.md"),
}


def check_grader(module) -> None:
    """Raise TypeError, in one line naming the module, if it breaks the contract above."""
    where = module.__name__
    problems = []
    if not isinstance(getattr(module, "NAME", None), str):
        problems.append("NAME (a string)")
    titles, points = getattr(module, "TITLES", None), getattr(module, "POINTS", None)
    if not (isinstance(titles, dict) and isinstance(points, dict) and list(titles) == list(points)
            and all(isinstance(p, (int, float)) and p > 0 for p in points.values())):
        problems.append("TITLES and POINTS (dicts with the same part keys; points positive)")
    wants = [getattr(module, name, None) for name in ("FUNCTION", "CLASS", "FUNCTIONS")]
    if sum(w is not None for w in wants) != 1 or not (
            isinstance(wants[0] or wants[1], str) or (isinstance(wants[2], tuple) and wants[2]
                                                      and all(isinstance(n, str) for n in wants[2]))):
        problems.append("exactly one of FUNCTION, CLASS (a name) or FUNCTIONS (a tuple of names)")
    for name in ("grade_file", "self_check"):
        if not callable(getattr(module, name, None)):
            problems.append(f"{name}()")
    if problems:
        raise TypeError(f"{where} is not an assignment grader: it lacks {'; '.join(problems)} "
                        "(see the assignments package's docstring)")
