"""The grading engine: where a student's code runs, and what may come back from it.

It knows no exercise and no assignment; the graders above it (:mod:`grading`,
:mod:`assignments`) bring their checks, the front ends (:mod:`autograde`) their reports.

* :mod:`.submission` turns a submitted file into units of code (nothing runs there);
* :mod:`.handle` is the grader's handle on one submission in a confined worker
  (:class:`~sandbox.handle.Sandbox`), forked from a template process that
  ``worker.py`` starts and :mod:`.confined` walls in;
* :mod:`.protocol` parses, strictly, the frames a worker sends back; :mod:`.plain` is the
  only data that may cross (and :class:`~sandbox.plain.SubmissionError`, a call that failed);
* :mod:`.multirank` runs an assignment's ranks as one group with its own network;
* :mod:`.textsafe` makes text from a submission safe to show.

Linux gets the full sandbox; macOS only resource limits (fine for a student grading their
own work); Windows is not supported.
"""
