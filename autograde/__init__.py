"""The course's autograder: grades exercise submissions in a confined worker process.

    python -m autograde alice.ipynb bob.py class-folder/ --json grades.json --jobs 2

Modules: :mod:`.submission` (files -> units of code), :mod:`.confined` (the confined
processes, started by ``worker.py``), :mod:`.protocol` (strict frames), :mod:`.sandbox` (the grader's handle on a worker),
:mod:`.grade` (checks against a sandbox), :mod:`.reports` (console, JSON, CSV, Gradescope),
:mod:`.gradescope` (Gradescope's entry point), :mod:`.release` (student hand-out and
Gradescope bundle, whose scripts are in ``bundle/``), :mod:`.plain` (plain data).
Linux gets the full sandbox; macOS only resource limits (fine for a student grading
their own work); Windows is not supported.
See ``book/instructors.md``.
"""
