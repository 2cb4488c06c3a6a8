"""Grading day, checked against the systems that read the files: Canvas's gradebook import,
Moodle's grading worksheet upload, the class report in a browser, a file system's name limit,
and the copy check on notebooks built from the hand-out itself.

What each rule rests on (the LMSs' own code, as autograde/lms.py cites it):

* Canvas's importer (``GradebookImporter``) takes the points of an assignment it creates from
  the file's "Points Possible" row; without that row the new assignment has none. Scores are
  imported as points, whatever the assignment is worth in Canvas.
* Moodle's worksheet upload (``assign_feedback_offline::process_import_grades``) skips, without
  a word, a grade above the assignment's maximum grade, and stores the feedback comments as
  HTML (``assign_feedback_comments::set_editor_text``: ``FORMAT_HTML``).
"""
from __future__ import annotations

import contextlib
import csv
import io
import os

import pytest

from autograde import lms, reports
from autograde.cli import main
from sandbox.results import SubmissionReport
from tools.browser import ROOT, BrowserUnavailable, chromium

REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
SEED = "3"


def run(*args):
    """(exit status, stderr) of the command line; argparse's exits included."""
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
    return code, err.getvalue()


def table(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


# ----------------------------------------------------------------------------- file names

def test_a_student_id_too_long_for_a_file_name_still_gets_its_feedback_file(tmp_path):
    """A top-level file's name is its student's id: 250 characters is a legal file name, but
    ``<id>.md`` (and the temporary name it is written through) is not. The two long ids below
    differ only at their end and must not share a file."""
    klass = tmp_path / "class"
    klass.mkdir()
    long_a, long_b = "z" * 249 + "a", "z" * 249 + "b"
    for stem in (long_a, long_b, "ok"):
        (klass / f"{stem}.py").write_text(REFERENCE)
    code, err = run(klass, "--seed", SEED, "--timeout", "5", "--feedback", tmp_path / "fb")
    assert code == 0, err
    assert "Traceback" not in err
    names = sorted(os.listdir(tmp_path / "fb"))
    assert len(names) == 3 and "ok.md" in names
    assert all(len(n.encode()) <= 255 for n in names)
    texts = [(tmp_path / "fb" / n).read_text() for n in names if n != "ok.md"]
    assert sum(long_a in t for t in texts) == 1 and sum(long_b in t for t in texts) == 1
