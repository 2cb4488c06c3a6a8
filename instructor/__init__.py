"""What instructors hand out, built from the master: the student release
(:mod:`.release` ``student``: no solutions, no hidden tests), the Gradescope autograder
(:mod:`.release` ``gradescope``, whose scripts are in ``bundle/``) and the student version of
a notebook (:mod:`.student_notebook`). Nothing in the course imports this package."""
