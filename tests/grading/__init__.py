"""The grading package's old name. The exercise checks moved to :mod:`grading` (and the
self-check to :mod:`autograde.selfcheck`); notebooks released before the move import
``tests.grading``, and this shim keeps them running until the end of the term
(the instructors' guide, "Where the grader lives"). The tests of :mod:`grading` live beside it."""
from grading import *  # noqa: F401,F403
from grading import __all__  # noqa: F401
