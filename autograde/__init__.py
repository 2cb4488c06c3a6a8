"""The course's autograder: grades exercise submissions in a confined worker process.

    python -m autograde alice.ipynb bob.py class-folder/ --json grades.json --jobs 2

Modules: :mod:`.submission` (files -> units of code), :mod:`.worker` (the confined process),
:mod:`.protocol` (strict frames), :mod:`.sandbox` (the grader's handle on a worker),
:mod:`.grade` (checks against a sandbox), :mod:`.reports` (console, JSON, CSV, Gradescope),
:mod:`.release` (student hand-out and Gradescope bundle), :mod:`.plain` (plain data).
See ``book/instructors.md``.
"""
