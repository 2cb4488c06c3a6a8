"""Grading a class: student ids from a folder per student or a roster, the grades CSV for an
LMS, and the HTML class report (score distributions, how many students made each known
mistake) rendered in Chromium."""
from __future__ import annotations

import contextlib
import csv
import io
import os

import pytest

from autograde.cli import main
from tools.browser import ROOT, BrowserUnavailable, chromium

REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}

#: (how many students, the change to the reference). Swapped exponents is the most common.
MISTAKES = [
    (7, "return E + A / N**ALPHA + B / D**BETA", "return E + A / N**BETA + B / D**ALPHA"),
    (4, "return total\n", "return total / 1e9\n"),
    (3, "BYTES_PER_PARAM = 12", "BYTES_PER_PARAM = 16"),
    (2, "/ (bandwidth_tb_s * 1e12)", "/ (bandwidth_tb_s * 1e9)"),
    (1, "import numpy as np", "import scipy.optimize\nimport numpy as np"),
    (2, "total = BYTES_PER_PARAM * model_params", "raise NotImplementedError"),
]
CORRECT = 25 - sum(n for n, *_ in MISTAKES)


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"{reason} (required under CI)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    folder = tmp_path_factory.mktemp("class") / "submissions"
    number = 0
    for count, old, new in MISTAKES + [(CORRECT, "", "")]:
        for _ in range(count):
            number += 1
            student = folder / f"s{number:02d}"
            student.mkdir(parents=True)
            source = REFERENCE.replace(old, new, 1) if old else REFERENCE
            assert not old or old in REFERENCE
            (student / "09-exercises.py").write_text(source)
    out = folder.parent
    with contextlib.redirect_stdout(io.StringIO()):
        code = main([str(folder), "--jobs", "2", "--seed", "3", "--timeout", "5",
                     "--csv", str(out / "grades.csv"), "--class-report", str(out / "class.html")])
    assert code == 0
    return out


def test_the_grades_csv_has_the_student_id_first_and_documented_columns(graded_class):
    rows = list(csv.DictReader((graded_class / "grades.csv").open()))
    assert len(rows) == 25
    from grading import EXERCISES

    assert list(rows[0]) == ["student_id", "name", "score", "max_score",
                             *[e.id for e in EXERCISES], "status", "submission"]
    assert [e.id for e in EXERCISES] == ["ex1", "ex2", "ex3", "ex4", "ex4b"]  # Exercise 4 in two parts
    assert [r["student_id"] for r in rows] == [f"s{i:02d}" for i in range(1, 26)]
    by_id = {r["student_id"]: r for r in rows}
    assert by_id["s01"]["ex1"] == "0" and by_id["s01"]["ex2"] == "20"  # one slip, one exercise
    assert by_id["s25"]["score"] == "100" and by_id["s25"]["status"] == "graded"
    import autograde.reports as reports
    for column in rows[0]:  # every column is documented
        assert f"``{column}``" in reports.__doc__ or column in [e.id for e in EXERCISES]


def test_a_roster_names_students_and_lists_the_missing(graded_class, tmp_path):
    roster = graded_class / "roster.csv"
    roster.write_text("student_id,name,file\n"
                      "1001,Ada L,submissions/s25\n"
                      "1002,Alan T,submissions/s01/09-exercises.py\n"
                      "1003,Grace H,submissions/nobody\n")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--roster", str(roster), "--csv", str(tmp_path / "g.csv"), "--seed", "3"]) == 0
    rows = {r["student_id"]: r for r in csv.DictReader((tmp_path / "g.csv").open())}
    assert rows["1001"]["name"] == "Ada L" and rows["1001"]["score"] == "100"
    assert rows["1002"]["score"] == "90"
    assert rows["1003"]["status"] == "missing" and rows["1003"]["score"] == "0"
    roster.write_text("id,who\n1,x\n")
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()) as err:
        main(["--roster", str(roster)])
    assert "student_id, name, file" in err.getvalue()


def test_the_class_report_renders_in_chromium_and_names_the_most_common_mistake(graded_class):
    try:
        with chromium() as browser:
            page = browser.new_page()
            errors = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto((graded_class / "class.html").as_uri())
            lead = page.inner_text("#most-common")
            histograms = page.locator("svg.hist").count()
            bars = page.evaluate("""() => [...document.querySelectorAll('svg.hist')].map(
                s => [...s.querySelectorAll('rect')].filter(r => r.getBoundingClientRect().height > 0).length)""")
            rows = page.locator("#misconceptions tr").all_inner_texts()
            box = page.locator("svg.hist").first.bounding_box()
    except BrowserUnavailable as exc:
        _unavailable(str(exc))
    assert not errors
    assert "swapped exponents" in lead and "7 of 25" in lead
    from grading import EXERCISES

    assert histograms == len(EXERCISES) and all(b >= 1 for b in bars) and box["width"] > 100
    counts = {r.split("\t")[0]: r.split("\t")[1] for r in rows[1:]}
    assert counts["Exercise 1: swapped exponents"] == "7"
    assert counts["Exercise 3: returns gigabytes"] == "4"
    assert counts["Exercise 3: zero 16 bytes"] == "3"
    assert counts["Exercise 4: bandwidth gb"] == "2"


def test_the_class_reports_exercise_means_count_the_students_the_summary_counts(tmp_path):
    """The summary's mean is over the students who submitted work (the missing are counted
    apart); each exercise's mean and full-marks count are over the same students, not over
    a roster padded with zeros."""
    import re

    (tmp_path / "s1").mkdir()
    (tmp_path / "s1" / "09-exercises.py").write_text(REFERENCE)
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,file\n1,Ada L,s1\n2,Alan T,nobody\n")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["--roster", str(roster), "--seed", "3", "--timeout", "5",
                     "--class-report", str(tmp_path / "class.html")]) == 0
    page = (tmp_path / "class.html").read_text()
    assert "1 submitted work (mean 100.0 of 100 points" in page
    from grading import EXERCISES

    for exercise in EXERCISES:
        full = f"{exercise.max_points:g}"
        assert re.search(rf"mean {exercise.max_points:.1f} / {full}; full marks: 1 of 1<", page), (exercise.id, page)
