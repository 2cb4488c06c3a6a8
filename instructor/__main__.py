"""``python -m instructor`` is ``python -m instructor.release``: the student release and the
Gradescope autograder (``make student-release``, ``make gradescope``)."""
import sys

from .release import main

sys.exit(main())
