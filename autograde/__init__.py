"""The grader's front ends: grade one file or a whole class, and write what people read.

    python -m autograde alice.ipynb bob.py class-folder/ --json grades.json --jobs 2
    python -m autograde a1-ring-allreduce.ipynb --assignment a1

Modules: :mod:`.cli` (the command line), :mod:`.classrun` (a class folder in any LMS's
layout: who submitted what, which file is graded, one row each, the journal), :mod:`.grade`
(a grader's checks against a sandboxed submission, and the graders' regrade hooks),
:mod:`.reports` (console, JSON, CSV, the HTML class report, Gradescope's ``results.json``),
:mod:`.lms` (Canvas and Moodle import files), :mod:`.gradescope` (Gradescope's entry point),
:mod:`.selfcheck` (a notebook's check cells), :mod:`.similarity` (copied code in a class).
The engine they drive is :mod:`sandbox`; the checks come from :mod:`grading` and
:mod:`assignments`. The instructors' guide (the course site's "For instructors") says how to use them.
"""
