"""Grades files that Canvas and Moodle import as they are, with no editing.

**Canvas** (Grades > Import): Canvas finds each student by its own identifier columns and
offers no step that maps a column of ours to them; every other column is taken as an
assignment, created if no assignment has that name. What this module relies on, from
Canvas's guides "How do I import grades in the Gradebook?" and the gradebook-export notes
(e.g. https://teaching.resources.osu.edu/toolsets/carmencanvas/guides/calculating-final-grades/import-csv-file-carmen-grades
and https://ts.vcu.edu/askit/teaching-and-learning/canvas/faculty/grading-faculty/gradebook-action-menu-faculty/):

* the first columns are ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``,
  in that order, as in the gradebook export; one of Student/ID/SIS User ID identifies the
  student (``ID``, the Canvas user id, which Canvas's submission file names carry);
* then one column per assignment, headed by the assignment's name, or ``Name (12345)``
  with the assignment's id (the export's form, which matches even if the name changes);
* a second row whose ``Student`` says ``Points Possible`` and whose assignment cells say what
  each is worth, as in the export: the importer (``GradebookImporter#process_pp`` in
  canvas-lms) gives a column it creates an assignment for those points, and none without the
  row; every other row is a student;
* a header row, UTF-8, commas; a cell with a comma is quoted.

**Moodle**: the file is the assignment's *grading worksheet* (Assignment > View all
submissions > Grading action "Upload grading worksheet", with offline grading worksheets
enabled in the assignment's feedback types), whose rows Moodle matches by ``Identifier``
("Participant 2002041", the number in the folder names of "Download all submissions"); its
columns ``Identifier``, ``Full name``, ``Email address``, ``Grade``, ``Maximum Grade``,
``Last modified (grade)`` and ``Feedback comments`` are those of the worksheet Moodle exports.
Moodle's worksheet importer (``assignfeedback_offline_grade_importer::init``) refuses a file
that lacks any of ``Identifier``, ``Grade`` and ``Last modified (grade)``; it skips a row whose
grade Moodle changed more than a minute after that time, unless the upload's "Allow updating
records that have been modified more recently in Moodle than in the spreadsheet" is ticked. The
time is copied from the worksheet given as the roster (what Moodle itself round-trips), else it
is the time the file was written. It also skips, as out of range, a grade above the
assignment's maximum grade, and takes the others as points whatever the maximum: the command
line stops before grading when the worksheet's ``Maximum Grade`` is not what the grades are out
of (and, for Canvas, when the gradebook export's "Points Possible" row says so of the column). The same file also imports
through the gradebook (Grades > Import > CSV file), where "Identify user by" maps ``Email
address`` (or ``ID number``) to Moodle's field and ``Grade`` to the grade item
(https://docs.moodle.org/en/Import_grades; :mod:`gradeimport_csv`'s ``map_user_data_with_value``
accepts userid, username, useridnumber and useremail).
"""
from __future__ import annotations

import csv
import datetime
import html
import io

from .reports import csv_cell

CANVAS_ID_COLUMNS = ("Student", "ID", "SIS User ID", "SIS Login ID", "Section")
#: The first cell of the row under the header that says what each column is worth, as Canvas's
#: export writes it (its importer looks for the words).
CANVAS_POINTS_POSSIBLE = "    Points Possible"
MOODLE_COLUMNS = ("Identifier", "Full name", "Email address", "ID number", "Grade",
                  "Maximum Grade", "Last modified (grade)", "Feedback comments")
#: The worksheet's column that Moodle's importer needs besides ``Identifier`` and ``Grade``.
MOODLE_MODIFIED = "Last modified (grade)"


def _points(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}"


def canvas_csv(rows, assignment: str, per_exercise: bool = False) -> str:
    """Canvas's gradebook import file. ``rows``: (report, student) pairs; ``assignment``:
    the column's name (``Exercises (12345)`` with the assignment's id); ``per_exercise``
    adds one column per exercise (each becomes an assignment of its own in Canvas)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    exercises = [e["id"] for e in rows[0][0].exercises()] if rows and per_exercise else []
    base = assignment.rsplit(" (", 1)[0]
    writer.writerow(list(CANVAS_ID_COLUMNS) + [assignment]
                    + [f"{base}: Exercise {e[2:]}" for e in exercises])
    if rows:  # what each column is worth: the points of an assignment Canvas creates from it
        first = rows[0][0]
        most = {e["id"]: e["max_score"] for e in first.exercises()}
        writer.writerow([CANVAS_POINTS_POSSIBLE, "", "", "", "", _points(first.max_score)]
                        + [_points(most[e]) for e in exercises])
    for report, student in rows:
        lms = student.lms if student is not None else {}
        ids = [lms.get("Student") or (student.name if student else report.name),
               lms.get("ID") or report.student_id,
               lms.get("SIS User ID", ""), lms.get("SIS Login ID", ""), lms.get("Section", "")]
        by_id = {e["id"]: e["score"] for e in report.exercises()}
        writer.writerow([csv_cell(x) for x in ids] + [_points(report.score)]
                        + [_points(by_id.get(e, 0.0)) for e in exercises])
    return buffer.getvalue()


def moodle_identifier(report, student) -> str:
    """The worksheet's ``Identifier`` of a row: the roster's, else ``Participant N`` from a
    participant number, else empty (a row Moodle's importer skips without a word)."""
    lms = student.lms if student is not None else {}
    return lms.get("Identifier") or (f"Participant {report.student_id}" if report.student_id.isdigit() else "")


def moodle_unmatched(rows) -> list:
    """The students of ``rows`` whose worksheet row would have no ``Identifier``."""
    return [student.name if student is not None and student.name else report.student_id or report.submission
            for report, student in rows if not moodle_identifier(report, student)]


def moodle_csv(rows, feedback: bool = True, now: str | None = None) -> str:
    """Moodle's grading worksheet, filled in (see this module's docstring). ``now``: the
    ``Last modified (grade)`` of a student the roster gives none for (by default the current
    time, in ISO 8601 with its UTC offset, which PHP's ``strtotime`` reads)."""
    if now is None:
        now = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(MOODLE_COLUMNS)
    for report, student in rows:
        lms = student.lms if student is not None else {}
        modified = lms.get(MOODLE_MODIFIED) or now
        # "-" (no grade yet) goes back as Moodle wrote it, not as the text "'-"
        modified = modified if modified == "-" else csv_cell(modified)
        identifier = moodle_identifier(report, student)
        email = lms.get("Email address") or (report.student_id if "@" in report.student_id else "")
        # Moodle keeps feedback comments as HTML (assign_feedback_comments stores them with
        # FORMAT_HTML): a file name's "<" and "&" are the student's characters, not markup
        comment = html.escape(getattr(report, "status_text", ""), quote=False) if feedback else ""
        writer.writerow([csv_cell(x) for x in (
            identifier, student.name if student else report.name, email, lms.get("ID number", ""))]
            + [_points(report.score), _points(report.max_score),
               modified, csv_cell(comment)])
    return buffer.getvalue()
