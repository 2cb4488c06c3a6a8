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

from autograde import lms
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


# ----------------------------------------------------------------------------- Canvas

CANVAS_ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Exercises (12345),Current Score
    Points Possible,,,,,{points},(read only)
"Carlos, Abe",100517,S100517,abe.carlos,Section A,,
"Lee, Zoe",100600,S100600,zoe.lee,Section A,,
"""


def canvas_class(tmp_path, points="100"):
    klass = tmp_path / "submissions"
    klass.mkdir()
    (klass / "carlosabe_100517_5899695_09-exercises.py").write_text(REFERENCE)
    (tmp_path / "gradebook.csv").write_text(CANVAS_ROSTER.format(points=points))
    return klass


def test_the_canvas_file_says_each_columns_points_possible(tmp_path):
    """Canvas creates an assignment for a column it does not know (each of
    ``--canvas-per-exercise``'s, or the first upload of a name without its id) with the points
    of the file's "Points Possible" row, as its own export writes it: the row must be there."""
    klass = canvas_class(tmp_path)
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--timeout", "5",
                    "--canvas-csv", tmp_path / "import.csv", "--canvas-assignment", "Exercises (12345)",
                    "--canvas-per-exercise")
    assert code == 0, err
    rows = table(tmp_path / "import.csv")
    header, possible = rows[0], rows[1]
    assert possible[0].strip() == "Points Possible" and possible[1:5] == ["", "", "", ""]
    from grading import EXERCISES

    expected = [sum(e.max_points for e in EXERCISES)] + [e.max_points for e in EXERCISES]
    assert [float(x) for x in possible[5:]] == pytest.approx(expected, abs=1e-9)
    assert len(possible) == len(header)
    students = {r[1]: r for r in rows[2:]}
    assert sorted(students) == ["100517", "100600"]
    assert float(students["100517"][5]) == pytest.approx(100, abs=1e-9)


def test_a_canvas_assignment_worth_other_points_is_refused_before_grading(tmp_path):
    """Canvas imports a score as points: 87 of our 100 on an assignment worth 10 in Canvas is
    870%. The gradebook export says what the column is worth; a mismatch is one line, exit 2."""
    klass = canvas_class(tmp_path, points="10")
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED,
                    "--canvas-csv", tmp_path / "import.csv", "--canvas-assignment", "Exercises (12345)")
    assert code == 2
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")]
    assert len(said) == 1 and "10" in said[0] and "100" in said[0] and "Exercises (12345)" in said[0], err
    assert not (tmp_path / "import.csv").exists()


def test_students_not_on_the_roster_are_graded_but_left_out_of_the_lms_file(tmp_path):
    """Canvas's download holds its test student's file (the gradebook export has the test
    student on a row of its own, which the roster skips) and may hold a dropped student's:
    Canvas cannot match either, and asks the instructor what to do with each. They are graded
    for the instructor (grades.csv) and left out of the import file, in one line."""
    klass = canvas_class(tmp_path)
    (klass / "studenttest_999999_5899700_09-exercises.py").write_text(REFERENCE)
    (klass / "dropped_100999_5899701_09-exercises.py").write_text(REFERENCE)
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--timeout", "5",
                    "--canvas-csv", tmp_path / "import.csv", "--csv", tmp_path / "grades.csv")
    assert code == 0, err
    assert sorted(r[1] for r in table(tmp_path / "import.csv")[2:]) == ["100517", "100600"]
    graded = {r["student_id"] for r in csv.DictReader(open(tmp_path / "grades.csv", encoding="utf-8"))}
    assert {"999999", "100999", "100517", "100600"} <= graded
    said = [line for line in err.splitlines() if "not on the roster" in line]
    assert len(said) == 1 and "2 submitting students" in said[0] and "999999" in said[0], err
    # without them, nothing is said
    for name in ("studenttest_999999_5899700_09-exercises.py", "dropped_100999_5899701_09-exercises.py"):
        (klass / name).unlink()
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--timeout", "5",
                    "--canvas-csv", tmp_path / "import2.csv")
    assert code == 0 and "not on the roster" not in err, err


@pytest.mark.parametrize("extra, words", [
    (["--assignment", "a1", "--canvas-csv", "import.csv"], "an assignment has none"),
    ([], "add --canvas-csv"),
])
def test_canvas_per_exercise_columns_where_there_are_none_is_one_line(tmp_path, extra, words):
    """An assignment is graded as one part: per-exercise columns would be one column named
    'Exercises: Exercise ' repeating the grade; without --canvas-csv the flag does nothing."""
    klass = canvas_class(tmp_path)
    extra = [str(tmp_path / x) if x.endswith(".csv") else x for x in extra]
    code, err = run(klass, "--canvas-per-exercise", *extra)
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")]
    assert code == 2 and len(said) == 1 and words in said[0], err
    assert not (tmp_path / "import.csv").exists()


def test_a_canvas_roster_that_agrees_on_points_or_does_not_name_the_column_is_accepted(tmp_path):
    klass = canvas_class(tmp_path, points="100.00")
    assert run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--timeout", "5",
               "--canvas-csv", tmp_path / "a.csv", "--canvas-assignment", "Exercises (12345)")[0] == 0
    # a column the export does not have is a new assignment: nothing to compare with
    assert run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--timeout", "5",
               "--canvas-csv", tmp_path / "b.csv", "--canvas-assignment", "Homework 2")[0] == 0


# ----------------------------------------------------------------------------- Moodle

MOODLE_WORKSHEET = """Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,Last modified (submission),Last modified (grade),Feedback comments
Participant 2002041,Aisha Ahmed,aisha@example.edu,Submitted for grading,,{maximum},Yes,,-,
Participant 2002042,Ben Brown,ben@example.edu,Submitted for grading,,{maximum},Yes,,-,
"""


def moodle_class(tmp_path, maximum):
    folder = tmp_path / "submissions" / "Aisha Ahmed_2002041_assignsubmission_file_"
    folder.mkdir(parents=True)
    (folder / "09-exercises.py").write_text(REFERENCE)
    (tmp_path / "worksheet.csv").write_text(MOODLE_WORKSHEET.format(maximum=maximum))
    return tmp_path / "submissions"


@pytest.mark.parametrize("maximum", ["20.00", '"20,00"'])  # the teacher's locale writes either
def test_a_moodle_assignment_with_another_maximum_grade_is_refused_before_grading(tmp_path, maximum):
    """Moodle's upload skips every grade above the assignment's maximum without a word, and
    takes the others as they are (73 of 100 would be 73 of 20)."""
    klass = moodle_class(tmp_path, maximum)
    code, err = run(klass, "--roster", tmp_path / "worksheet.csv", "--seed", SEED,
                    "--moodle-csv", tmp_path / "import.csv")
    assert code == 2
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")]
    assert len(said) == 1 and "20" in said[0] and "100" in said[0], err
    assert not (tmp_path / "import.csv").exists()


def test_a_moodle_worksheet_with_the_same_maximum_grade_is_accepted(tmp_path):
    klass = moodle_class(tmp_path, "100.00")
    code, err = run(klass, "--roster", tmp_path / "worksheet.csv", "--seed", SEED, "--timeout", "5",
                    "--moodle-csv", tmp_path / "import.csv")
    assert code == 0, err
    rows = {r[0]: r for r in table(tmp_path / "import.csv")[1:]}
    assert float(rows["Participant 2002041"][4]) == pytest.approx(100, abs=1e-9)


def test_moodle_feedback_comments_show_a_file_name_with_markup_as_written():
    """Moodle keeps the comments as HTML: a student's file named ``<b>notes</b>.py`` must
    come out as those characters, not as bold text or a dropped tag."""
    report = SubmissionReport(submission="09-exercises.py", student_id="2002041", name="Aisha Ahmed")
    report.status_text = "several files: graded 09-exercises.py; also sent <b>notes</b>.py & x<!--.py"
    text = lms.moodle_csv([(report, None)], now="2026-01-01T00:00:00+00:00")
    (row,) = list(csv.DictReader(io.StringIO(text)))
    comment = row["Feedback comments"]
    assert "<" not in comment and ">" not in comment
    import html

    assert html.unescape(comment) == report.status_text


# ----------------------------------------------------------------------------- class report

@pytest.fixture(scope="module")
def long_names_report(tmp_path_factory):
    """A class with a student whose id is 240 characters without a break, one with markup in
    the name, and a plain one."""
    out = tmp_path_factory.mktemp("report")
    klass = out / "class"
    klass.mkdir()
    for stem in ("y" * 240, "<b>bold<b>", "ada"):
        (klass / f"{stem}.py").write_text(REFERENCE.replace("BYTES_PER_PARAM = 12", "BYTES_PER_PARAM = 16")
                                          if stem == "ada" else REFERENCE)
    code, err = run(klass, "--seed", SEED, "--timeout", "5", "--class-report", out / "class.html")
    assert code == 0, err
    return out / "class.html"


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


AXE = ROOT / "tests" / "assets" / "axe-core" / "axe.min.js"
_AXE_RUN = """async () => {
  const result = await axe.run(document, {resultTypes: ['violations']});
  return result.violations.map(v => [v.id, v.impact, v.nodes.map(n => n.target.join(' '))]);
}"""
_STUDENTS = "[...document.querySelectorAll('table')].find(t => t.querySelector('th').textContent === 'student')"
_SCORES_HEADER = """() => {
  const table = """ + _STUDENTS + """;
  const box = table.closest('.wide') || table.parentElement;
  const right = box.getBoundingClientRect().right;
  return [...table.querySelectorAll('th')].map(th => [th.textContent, th.getBoundingClientRect().right <= right + 1]);
}"""


@pytest.mark.parametrize("width", [1280, 390])
def test_the_class_report_keeps_scores_in_view_and_passes_axe(long_names_report, width):
    """One student's unbreakable 240-character id must not push every student's score out of
    the table's view (at the desktop's width; on a phone the table scrolls, but the name
    column must not be what makes it); axe-core (vendored, offline) finds nothing."""
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": width, "height": 900})
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda d: (errors.append(d.message), d.dismiss()))
            page.goto(long_names_report.as_uri())
            in_view = page.evaluate(_SCORES_HEADER)
            name_width = page.evaluate(f"() => {_STUDENTS}.querySelector('td').getBoundingClientRect().width")
            page.add_script_tag(content=AXE.read_text(encoding="utf-8"))
            violations = page.evaluate(_AXE_RUN)
    except BrowserUnavailable as exc:
        _unavailable(str(exc))
    assert not errors
    if width >= 1000:
        assert all(ok for _, ok in in_view), in_view
    assert name_width <= width * 0.6, name_width
    assert violations == [], violations


def test_the_class_report_shows_markup_in_names_as_text(long_names_report):
    page = long_names_report.read_text(encoding="utf-8")
    assert "<b>bold<b>" not in page and "&lt;b&gt;bold&lt;b&gt;" in page


# ----------------------------------------------------------------------------- copy check

def test_students_with_the_same_notebook_built_on_the_hand_out_are_one_group():
    """Three students whose code is the master notebook's, byte for byte (the hand-out's cells
    and the worked answers), are "the same code": one group, no pairs. The hand-out's own
    lines, left out as boilerplate, must not make identical code score below "the same"."""
    from autograde import similarity

    code = similarity.student_code(similarity.TEMPLATE)
    groups, pairs = similarity.similar({"a": code, "b": code, "c": code}, similarity.template_code())
    assert [g.ids for g in groups] == [("a", "b", "c")]
    assert pairs == []
    groups, pairs = similarity.similar({"a": code, "b": code}, similarity.template_code())
    assert groups == [] and [(p.a, p.b) for p in pairs] == [("a", "b")]
    assert pairs[0].similarity == pytest.approx(1.0, abs=1e-9)


def test_short_answers_alike_but_for_their_names_are_not_the_same_code():
    """Three students who wrote the one natural answer, each with names of their own, are not
    "the same code": copydetect's filtered tokens call every name V, and the shares keep such
    short runs (below RUN) apart. Only the code as written is compared whole."""
    from autograde import similarity

    template = ('def flops(n, d):\n    """FLOPs."""\n    raise NotImplementedError\n\n'
                'def memory(p, b):\n    """Bytes."""\n    raise NotImplementedError\n')

    def answer(x, y, z, u, v):
        return (f'def flops({x}, {y}):\n    """FLOPs."""\n    {z} = 6 * {x} * {y}\n    return {z}\n\n'
                f'def memory({u}, {v}):\n    """Bytes."""\n    return {u} * {v}\n')

    codes = {"s1": answer("params", "tokens", "total", "p", "b"),
             "s2": answer("n", "d", "out", "x", "y"), "s3": answer("a1", "a2", "res", "m", "k")}
    groups, scored, _ = similarity.compare(codes, template, keep=("flops", "memory"))
    assert groups == []
    assert all(score < similarity.SAME for score, _, _ in scored)
    # the same answer, names and all, is still the same code
    groups, _, _ = similarity.compare({s: codes["s1"] for s in codes}, template, keep=("flops", "memory"))
    assert groups == [("s1", "s2", "s3")]


@pytest.mark.parametrize("text, value", [
    ("100", 100.0), ("100.00", 100.0), ("100,00", 100.0), ("7,5", 7.5), ("1,000", 1000.0),
    ("1,000.50", 1000.5), ("12,345,678", 12345678.0), ("\u00a0100 ", 100.0),
    ("1 000", 1000.0), ("1\u00a0000,50", 1000.5),  # a space or no-break space between thousands
    ("(read only)", None), ("", None), ("A-F", None), ("1,0000", None), ("1.000,50", None),
])
def test_an_lms_points_cell_is_read_in_the_teachers_locale(text, value):
    """What an LMS's export says an assignment is worth: a decimal comma has one or two digits
    after it, a thousands separator three; anything else is not a number to compare."""
    from autograde.classrun import _number

    got = _number(text)
    assert (got is None) if value is None else got == pytest.approx(value, abs=1e-9), (text, got)


@pytest.mark.parametrize("header, kind", [
    ("Student,ID,SIS User ID,SIS Login ID,Section,Exercises (12)", "canvas"),
    ("Identifier,Full name,Email address,Status,Grade,Maximum Grade", "moodle worksheet"),
    ("First name,Last name,Email address,ID number", "moodle participants"),
    ("student_id,name,file", "course"),
    ("name,grade", None),
])
def test_a_roster_is_told_apart_by_its_header(tmp_path, header, kind):
    from autograde import classrun

    assert classrun.roster_kind(header.split(",")) == kind
    # an unknown header is refused in one line even when no student follows it
    roster = tmp_path / "roster.csv"
    roster.write_text(header + "\n")
    if kind is None:
        with pytest.raises(ValueError, match="must be Canvas's gradebook export"):
            classrun.read_roster(roster)
    else:
        assert classrun.read_roster(roster) == []


def test_a_canvas_column_named_by_its_id_is_checked_against_its_points(tmp_path):
    """Canvas matches an import column by the id in ``Name (12345)`` even where the name has
    changed since the export; the points of the export's column with that id are the ones to
    agree with."""
    klass = canvas_class(tmp_path, points="10")
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED,
                    "--canvas-csv", tmp_path / "import.csv", "--canvas-assignment", "Homework 1 (12345)")
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")]
    assert code == 2 and len(said) == 1 and "worth 10 points" in said[0], err


def test_an_assignments_points_are_what_the_lms_column_must_be_worth(tmp_path):
    """With --assignment the grades are out of the assignment's points, not the exercises'."""
    from autograde import classrun

    klass = canvas_class(tmp_path, points="100")
    code, err = run(klass, "--roster", tmp_path / "gradebook.csv", "--seed", SEED, "--assignment", "a1",
                    "--canvas-csv", tmp_path / "import.csv", "--canvas-assignment", "Exercises (12345)")
    said = [line for line in err.splitlines() if line.strip() and not line.startswith("usage:")]
    out_of = classrun.assignment_part("a1").max_points
    assert code == 2 and len(said) == 1 and f"out of {out_of:g}" in said[0], err
    assert not (tmp_path / "import.csv").exists()


def test_students_not_on_the_moodle_worksheet_are_left_out_of_its_import_file(tmp_path):
    """A participant the worksheet lacks (added or dropped since it was downloaded) is graded
    and left out of the file Moodle imports, as for Canvas."""
    klass = moodle_class(tmp_path, "100.00")
    stranger = klass / "Zed Zhou_2009999_assignsubmission_file_"
    stranger.mkdir()
    (stranger / "09-exercises.py").write_text(REFERENCE)
    code, err = run(klass, "--roster", tmp_path / "worksheet.csv", "--seed", SEED, "--timeout", "5",
                    "--moodle-csv", tmp_path / "import.csv")
    assert code == 0, err
    assert [r[0] for r in table(tmp_path / "import.csv")[1:]] == ["Participant 2002041", "Participant 2002042"]
    said = [line for line in err.splitlines() if "not on the roster" in line]
    assert len(said) == 1 and "1 submitting student is not on the roster" in said[0], err
