"""Class day: the layouts Canvas and Moodle download, their rosters, one row per student
with a status that says what happened, one rule for the file graded, the files each LMS
imports (checked against its documented import rules), and no absolute path anywhere.

One class run per layout is shared by the assertions (module fixtures)."""
from __future__ import annotations

import contextlib
import csv
import datetime
import io
import json
import os
import re
import time
from pathlib import Path

import pytest

from autograde import classrun
from autograde.cli import main
from tests.processes import alive, descendants
from tools.browser import ROOT

REFERENCE = (ROOT / "tests" / "redteam" / "reference_submission.py").read_text()
STUB = "".join(f"def {name}(*args):\n    raise NotImplementedError\n\n\n"
               for name in classrun.FUNCTIONS)
SWAPPED = REFERENCE.replace("return E + A / N**ALPHA + B / D**BETA",
                            "return E + A / N**BETA + B / D**ALPHA", 1)
SEED = "3"


def run(*args) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return main([str(a) for a in args])


def rows_of(path: Path) -> list:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def remove_deep(top: Path) -> None:
    """Remove a folder tree of any depth (pytest's own clean-up recurses, and would fail on
    the 1,100-deep one): each grandchild folder is moved up to ``top`` first."""
    import shutil

    n = 0
    while True:
        dirs = [e.path for e in os.scandir(top) if e.is_dir(follow_symlinks=False)]
        if not dirs:
            break
        for d in dirs:
            for e in list(os.scandir(d)):
                if e.is_dir(follow_symlinks=False):
                    n += 1
                    os.rename(e.path, os.path.join(top, f"_up{n}"))
                else:
                    os.unlink(e.path)
            os.rmdir(d)
    shutil.rmtree(top)


def left_behind(tmp: Path) -> list:
    """What a run left in its temporary folder, the machine's uid locks aside (one folder of
    lock files per machine, kept for every run: sandbox.locks)."""
    return [p for p in tmp.iterdir() if p.name not in ("autograde-uids", "autograde-rank-uids")]


def age(path: Path, seconds: float) -> None:
    """Make ``path`` look ``seconds`` old (the picking rule's tie-break is the newest)."""
    t = time.time() - seconds
    os.utime(path, (t, t))


# ----------------------------------------------------------------------------- folder per student

@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """One folder per student, each a case of the issue's list."""
    out = tmp_path_factory.mktemp("folders")
    klass = out / "class"
    def put(student, name, text, old=0.0):
        path = klass / student / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if old:
            age(path, old)
    put("ada", "09-exercises.py", REFERENCE)
    put("smith", "smith_hw.py", REFERENCE)
    put("smith", "scratch.py", "x = 1\n")  # graded today instead of smith_hw.py
    put("untouched", "09-exercises.py", STUB, old=60)  # the template, never edited
    put("untouched", "final.py", REFERENCE)
    put("draft", "exercises_v1.py", SWAPPED, old=3600)  # an old draft, same functions
    put("draft", "exercises_v2.py", REFERENCE)
    put("pdf", "09-exercises.pdf", "%PDF-1.4\n")
    put("txt", "09-exercises.ipynb.txt", "{}\n")
    put("stub", "09-exercises.py", STUB)
    (klass / "nobody").mkdir()
    put("hoarder", "09-exercises.py", REFERENCE)  # and 300 other files: one row, one graded
    for k in range(300):
        put("hoarder", f"scratch{k:03d}.py", f"x = {k}\n", old=10)
    latin = klass / os.fsdecode(b"jos\xe9")  # a Latin-1 folder name (an old zip)
    latin.mkdir()
    (latin / "09-exercises.py").write_text(REFERENCE)
    deep = klass / "deep"  # 1,100 folders deep: not recursed into, not the end of the run
    deep.mkdir()
    (deep / "09-exercises.py").write_text(REFERENCE)
    fd = os.open(deep, os.O_RDONLY)
    try:
        for _ in range(1100):
            os.mkdir("d", dir_fd=fd)
            fd, old = os.open("d", os.O_RDONLY, dir_fd=fd), fd
            os.close(old)
    finally:
        os.close(fd)
    try:
        code = run(klass, "--jobs", "2", "--seed", SEED, "--timeout", "5",
                   "--csv", out / "grades.csv", "--json", out / "grades.json",
                   "--class-report", out / "class.html", "--feedback", out / "feedback",
                   "--canvas-csv", out / "canvas.csv", "--moodle-csv", out / "moodle.csv")
    finally:
        remove_deep(deep / "d")
    return out, code


def test_every_student_gets_one_row_with_a_status_that_explains_it(folders):
    out, code = folders
    assert code == 0
    rows = {r["student_id"]: r for r in rows_of(out / "grades.csv")}
    assert sorted(rows) == sorted(["ada", "smith", "untouched", "draft", "pdf", "txt", "stub",
                                   "nobody", "hoarder", "jos\\xe9", "deep"])
    expect = {"ada": ("100", "graded"), "smith": ("100", "several files: graded smith/smith_hw.py"),
              "untouched": ("100", "several files: graded untouched/final.py"),
              "draft": ("100", "several files: graded draft/exercises_v2.py (the newest script)"),
              "pdf": ("0", "unreadable: submitted a .pdf (a .ipynb, .py or .md is graded)"),
              "txt": ("0", "unreadable: submitted a .ipynb.txt"),
              "stub": ("0", "not attempted (still the stub)"), "nobody": ("0", "missing"),
              "hoarder": ("100", "several files: graded hoarder/09-exercises.py"),
              "jos\\xe9": ("100", "graded"), "deep": ("100", "graded")}
    for sid, (score, status) in expect.items():
        assert float(rows[sid]["score"]) == pytest.approx(float(score), abs=1e-9), (sid, rows[sid])
        assert rows[sid]["status"].startswith(status), (sid, rows[sid]["status"])
    assert "also sent smith/scratch.py" in rows["smith"]["status"]
    assert "and 295 more" in rows["hoarder"]["status"]  # five named, the rest counted


def test_json_is_keyed_by_student_id_and_no_output_holds_an_absolute_path(folders):
    out, _ = folders
    data = json.loads((out / "grades.json").read_text())
    assert sorted(data["submissions"]) == sorted(r["student_id"] for r in rows_of(out / "grades.csv"))
    assert data["submissions"]["smith"]["submission"] == "smith/smith_hw.py"
    written = [p for p in classrun.walk(out) if p.relative_to(out).parts[0] != "class"]
    assert len(written) >= 6 + 11
    for path in written:
        text = path.read_text(encoding="utf-8")  # valid UTF-8, Latin-1 names included
        assert str(out) not in text and "/tmp" not in text and str(ROOT) not in text, path


def test_each_student_gets_a_feedback_file_named_by_id(folders):
    out, _ = folders
    files = sorted(p.name for p in (out / "feedback").iterdir())
    assert "smith.md" in files and "nobody.md" in files and len(files) == 11
    text = (out / "feedback" / "smith.md").read_text()
    assert "File graded: smith/smith_hw.py" in text and "scratch.py" in text
    assert "Score: 100 / 100" in text


def test_the_picking_rule_is_the_same_for_gradescope(tmp_path):
    from autograde.gradescope import pick_submission

    (tmp_path / "09-exercises.py").write_text(STUB)
    age(tmp_path / "09-exercises.py", 60)
    (tmp_path / "final.py").write_text(REFERENCE)
    (tmp_path / "old_draft.py").write_text(SWAPPED + "\n# padding\n" * 2000)  # larger, older
    age(tmp_path / "old_draft.py", 3600)
    chosen, note = pick_submission(tmp_path)
    assert chosen == tmp_path / "final.py"
    assert "old_draft.py" in note and "09-exercises.py" in note


def test_one_students_huge_folder_costs_only_that_student(tmp_path, monkeypatch):
    """A virtual environment sent by one student uses up only their own budget of entries: the
    classmates after them in name order are still found, and the student's status says that
    not everything was looked at."""
    monkeypatch.setattr(classrun, "MAX_ENTRIES", 50)
    (tmp_path / "aaron" / "venv" / "lib").mkdir(parents=True)
    (tmp_path / "aaron" / "09-exercises.py").write_text(REFERENCE)
    for i in range(200):
        (tmp_path / "aaron" / "venv" / "lib" / f"m{i:03}.py").write_text("")
    (tmp_path / "zoe").mkdir()
    (tmp_path / "zoe" / "09-exercises.py").write_text(REFERENCE)
    students = classrun.students_in(tmp_path)
    assert [p.name for p, _ in students["zoe"].files] == ["09-exercises.py"] and not students["zoe"].cut_short
    aaron = classrun.pick(students["aaron"])
    assert aaron.cut_short and aaron.chosen == tmp_path / "aaron" / "09-exercises.py"
    assert len(aaron.files) < 50
    out = tmp_path.parent / f"{tmp_path.name}-grades.csv"
    assert run(tmp_path, "--seed", SEED, "--timeout", "5", "--csv", out) == 0
    by_id = {r["student_id"]: r for r in rows_of(out)}
    assert float(by_id["zoe"]["score"]) == pytest.approx(100.0, abs=1e-9)
    assert float(by_id["aaron"]["score"]) == pytest.approx(100.0, abs=1e-9)
    assert "only the first were looked at" in by_id["aaron"]["status"]
    assert "looked at" not in by_id["zoe"]["status"]
    for i in range(60):  # a class folder with more at its top than the grader looks at
        (tmp_path / f"s{i:02}.py").write_text("")
    with pytest.raises(ValueError, match="more than 50 entries at its top"):
        classrun.students_in(tmp_path)


def test_the_hand_outs_file_is_considered_however_many_newer_files_were_sent(tmp_path):
    """Twelve scratch scripts sent after the exercises notebook do not hide it from the picking rule."""
    student = tmp_path / "dana"
    student.mkdir()
    (student / "09-exercises.py").write_text(REFERENCE)
    age(student / "09-exercises.py", 7200)
    for i in range(classrun.MAX_CANDIDATES):
        (student / f"scratch{i}.py").write_text("import math\n")
    dana = classrun.pick(classrun.students_in(tmp_path)["dana"])
    assert dana.chosen == student / "09-exercises.py"


def test_folders_are_walked_without_recursion():
    import inspect

    assert "rglob" not in inspect.getsource(classrun)


# ----------------------------------------------------------------------------- Canvas

CANVAS_ROSTER = """Student,ID,SIS User ID,SIS Login ID,Section,Exercises (12345)
    Points Possible,,,,,100
"Carlos, Abe",100517,S100517,abe.carlos,Section A,
"Lee, Zoe",100600,S100600,zoe.lee,Section A,
"Okafor, Ngozi",100700,S100700,ngozi.okafor,Section B,
"Student, Test",999999,,,Section A,
"""


@pytest.fixture(scope="module")
def canvas(tmp_path_factory):
    out = tmp_path_factory.mktemp("canvas")
    klass = out / "submissions"
    klass.mkdir()
    (klass / "carlosabe_100517_5899695_09-exercises.py").write_text(REFERENCE)
    # Zoe's first submission, and her late resubmission (Canvas adds -1) that is the one graded
    (klass / "leezoe_100600_5899650_09-exercises.py").write_text(SWAPPED)
    (klass / "leezoe_LATE_100600_5899700_09-exercises-1.py").write_text(REFERENCE)
    (out / "gradebook.csv").write_text(CANVAS_ROSTER)
    code = run(klass, "--roster", out / "gradebook.csv", "--seed", SEED, "--timeout", "5",
               "--canvas-csv", out / "import.csv", "--canvas-assignment", "Exercises (12345)",
               "--canvas-per-exercise", "--csv", out / "grades.csv")
    return out, code


def check_canvas_import(path: Path, roster: Path) -> list:
    """Canvas's gradebook import rules (see autograde/lms.py for the sources): the identifier
    columns first, by these names, in this order; every other column an assignment (a name,
    optionally with ' (id)'), none of the read-only totals; then the "Points Possible" row,
    a number for each assignment; each other row a student Canvas knows (by ID), with a number
    of points."""
    with path.open(newline="", encoding="utf-8") as f:
        table = list(csv.reader(f))
    header, possible, body = table[0], table[1], table[2:]
    assert possible[0].strip() == "Points Possible" and len(possible) == len(header)
    assert all(re.fullmatch(r"\d+(\.\d+)?", cell) for cell in possible[5:]), possible
    assert header[:5] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    read_only = {"Current Score", "Final Score", "Unposted Current Score", "Current Grade"}
    assert len(header) > 5 and not read_only & set(header[5:])
    assert all(re.fullmatch(r"[^,]+?( \(\d+\))?", h) for h in header[5:])
    known = {r["ID"]: r for r in rows_of(roster) if r["ID"]}
    for row in body:
        assert len(row) == len(header)
        assert row[1] in known and row[0] == known[row[1]]["Student"], row
        assert row[2] == known[row[1]]["SIS User ID"] and row[4] == known[row[1]]["Section"]
        for cell in row[5:]:
            assert re.fullmatch(r"\d+(\.\d+)?", cell), row
    return body


def test_canvas_download_and_gradebook_give_a_file_canvas_imports(canvas):
    out, code = canvas
    assert code == 0
    body = check_canvas_import(out / "import.csv", out / "gradebook.csv")
    header = next(csv.reader((out / "import.csv").open()))
    assert header[5] == "Exercises (12345)" and header[6] == "Exercises: Exercise 1"
    scores = {row[1]: float(row[5]) for row in body}  # compared as numbers (tolerance 1e-9)
    assert scores == pytest.approx({"100517": 100, "100600": 100, "100700": 0}, abs=1e-9)  # no test student
    rows = {r["student_id"]: r for r in rows_of(out / "grades.csv")}
    assert rows["100700"]["status"] == "missing" and rows["100700"]["name"] == "Okafor, Ngozi"
    assert "the latest resubmission" in rows["100600"]["status"]


def test_the_canvas_rule_check_catches_a_wrong_column(canvas, tmp_path):
    out, _ = canvas
    wrong = tmp_path / "wrong.csv"
    lines = (out / "import.csv").read_text().splitlines()
    wrong.write_text("\n".join([lines[0].replace("SIS User ID,SIS Login ID", "SIS Login ID,SIS User ID")]
                               + lines[1:]) + "\n")
    with pytest.raises(AssertionError):
        check_canvas_import(wrong, out / "gradebook.csv")


# ----------------------------------------------------------------------------- Moodle

MOODLE_WORKSHEET = """Identifier,Full name,Email address,Status,Grade,Maximum Grade,Grade can be changed,Last modified (submission),Last modified (grade),Feedback comments
Participant 2002041,Aisha Ahmed,aisha@example.edu,Submitted for grading,,100.00,Yes,,-,
Participant 2002042,Ben Brown,ben@example.edu,Submitted for grading,,100.00,Yes,,-,
Participant 2002043,Chen Wei,chen@example.edu,No submission,,100.00,Yes,,-,
"""


@pytest.fixture(scope="module")
def moodle(tmp_path_factory):
    out = tmp_path_factory.mktemp("moodle")
    klass = out / "submissions"
    (klass / "Aisha Ahmed_2002041_assignsubmission_file_").mkdir(parents=True)
    (klass / "Aisha Ahmed_2002041_assignsubmission_file_" / "09-exercises.py").write_text(REFERENCE)
    (klass / "Ben Brown_2002042_assignsubmission_file_").mkdir()
    (klass / "Ben Brown_2002042_assignsubmission_file_" / "report.docx").write_text("x")
    (out / "worksheet.csv").write_text(MOODLE_WORKSHEET)
    code = run(klass, "--roster", out / "worksheet.csv", "--seed", SEED, "--timeout", "5",
               "--moodle-csv", out / "import.csv", "--csv", out / "grades.csv")
    return out, code


#: What Moodle's worksheet upload cannot do without: its importer
#: (``assignfeedback_offline_grade_importer::init``) refuses the file, as an invalid grading
#: worksheet, when any of these three columns is missing.
MOODLE_REQUIRED = ("Identifier", "Grade", "Last modified (grade)")


def check_moodle_import(path: Path, worksheet: Path | None) -> list:
    """Moodle's grading worksheet upload: the columns its importer requires; an ``Identifier``
    of "Participant N" that the worksheet it exported holds, ``Grade`` a number within
    ``Maximum Grade``, header names as the worksheet's, ``Last modified (grade)`` the
    worksheet's own or a time with its offset (``strtotime`` reads both); the gradebook import
    maps ``Email address`` to the user's email. ``worksheet``: None when graded without one."""
    rows = rows_of(path)
    header = next(csv.reader(path.open()))
    assert header[0] == "Identifier"
    assert set(MOODLE_REQUIRED) <= set(header)
    assert {"Full name", "Email address", "Grade", "Maximum Grade", "Feedback comments"} <= set(header)
    exported = {r["Identifier"]: r for r in rows_of(worksheet)} if worksheet else {}
    for row in rows:
        assert re.fullmatch(r"Participant \d+", row["Identifier"])
        assert 0 <= float(row["Grade"]) <= float(row["Maximum Grade"])
        if worksheet:
            assert row["Identifier"] in exported
            assert row["Email address"] == exported[row["Identifier"]]["Email address"]
            assert row["Last modified (grade)"] == exported[row["Identifier"]]["Last modified (grade)"]
        else:
            assert datetime.datetime.fromisoformat(row["Last modified (grade)"]).utcoffset() is not None
    return rows


def test_moodle_download_and_worksheet_give_a_file_moodle_imports(moodle):
    out, code = moodle
    assert code == 0
    rows = {r["Identifier"]: r for r in check_moodle_import(out / "import.csv", out / "worksheet.csv")}
    assert float(rows["Participant 2002041"]["Grade"]) == pytest.approx(100, abs=1e-9)
    assert float(rows["Participant 2002042"]["Grade"]) == pytest.approx(0, abs=1e-9)
    assert rows["Participant 2002042"]["Feedback comments"].startswith("unreadable: submitted a .docx")
    assert rows["Participant 2002043"]["Feedback comments"] == "missing"
    assert len(rows) == 3


def test_moodle_download_without_folders_gives_the_same_rows(tmp_path):
    """Moodle's "Download submissions in folders" unticked (a per-user setting; some sites
    force it): the files are flat, ``Full Name_id_assignsubmission_file_name``. They are the
    same students as in folders, found on the worksheet by participant number."""
    klass = tmp_path / "submissions"
    klass.mkdir()
    (klass / "Aisha Ahmed_2002041_assignsubmission_file_09-exercises.py").write_text(REFERENCE)
    (klass / "Aisha Ahmed_2002041_assignsubmission_file_scratch.py").write_text("x = 1\n")
    (klass / "Ben Brown_2002042_assignsubmission_file_report.docx").write_text("x")
    (tmp_path / "worksheet.csv").write_text(MOODLE_WORKSHEET)
    assert run(klass, "--roster", tmp_path / "worksheet.csv", "--seed", SEED, "--timeout", "5",
               "--moodle-csv", tmp_path / "import.csv", "--csv", tmp_path / "grades.csv") == 0
    rows = {r["student_id"]: r for r in rows_of(tmp_path / "grades.csv")}
    assert sorted(rows) == ["2002041", "2002042", "2002043"]  # the worksheet's, nobody else
    assert float(rows["2002041"]["score"]) == pytest.approx(100, abs=1e-9)
    assert rows["2002041"]["submission"] == "09-exercises.py"
    assert rows["2002041"]["status"].startswith("several files: graded 09-exercises.py")
    assert rows["2002042"]["status"].startswith("unreadable: submitted a .docx")
    assert rows["2002043"]["status"] == "missing"
    grades = {r["Identifier"]: r for r in check_moodle_import(tmp_path / "import.csv", tmp_path / "worksheet.csv")}
    assert float(grades["Participant 2002041"]["Grade"]) == pytest.approx(100, abs=1e-9)


def test_the_moodle_check_catches_a_worksheet_moodle_would_refuse(moodle, tmp_path):
    out, _ = moodle
    table = list(csv.reader((out / "import.csv").open()))
    drop = table[0].index("Last modified (grade)")
    with (tmp_path / "old.csv").open("w", newline="") as f:
        csv.writer(f).writerows([r[:drop] + r[drop + 1:] for r in table])
    with pytest.raises(AssertionError):
        check_moodle_import(tmp_path / "old.csv", out / "worksheet.csv")


def test_a_moodle_download_graded_without_its_worksheet_still_gives_a_file_moodle_imports(tmp_path):
    folder = tmp_path / "class" / "Aisha Ahmed_2002041_assignsubmission_file_"
    folder.mkdir(parents=True)
    (folder / "09-exercises.py").write_text(REFERENCE)
    assert run(tmp_path / "class", "--seed", SEED, "--timeout", "5", "--moodle-csv", tmp_path / "m.csv") == 0
    (row,) = check_moodle_import(tmp_path / "m.csv", None)
    assert row["Identifier"] == "Participant 2002041"
    assert float(row["Grade"]) == pytest.approx(100, abs=1e-9)


def test_a_moodle_file_with_rows_moodle_cannot_match_says_so_in_one_line(tmp_path):
    """Per-student folders of the course's own form have no participant number: the
    worksheet's rows get no Identifier, which Moodle's importer skips without a word. The
    run says how many and what to give instead."""
    (tmp_path / "class" / "alice").mkdir(parents=True)
    (tmp_path / "class" / "alice" / "09-exercises.py").write_text(REFERENCE)
    (tmp_path / "class" / "2002041").mkdir()
    (tmp_path / "class" / "2002041" / "09-exercises.py").write_text(REFERENCE)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
        assert main([str(tmp_path / "class"), "--seed", str(SEED), "--timeout", "5",
                     "--moodle-csv", str(tmp_path / "m.csv")]) == 0
    said = [line for line in err.getvalue().splitlines() if "Identifier" in line]
    assert len(said) == 1 and said[0].startswith("autograde: 1 of 2 rows") and "(alice)" in said[0], err.getvalue()
    assert "--roster" in said[0]
    assert sorted(r["Identifier"] for r in rows_of(tmp_path / "m.csv")) == ["", "Participant 2002041"]


def test_a_roster_of_the_courses_own_form_keys_missing_students_apart(tmp_path):
    (tmp_path / "a.py").write_text(REFERENCE)
    (tmp_path / "roster.csv").write_text("student_id,name,file\n1,Ann,a.py\n2,Bo,none.py\n3,Cy,\n")
    assert run("--roster", tmp_path / "roster.csv", "--json", tmp_path / "r.json",
               "--seed", SEED) == 0
    data = json.loads((tmp_path / "r.json").read_text())["submissions"]
    assert sorted(data) == ["1", "2", "3"]  # each missing student under their own id
    assert data["1"]["score"] == pytest.approx(100, abs=1e-9)
    assert data["2"]["status"] == data["3"]["status"] == "missing"


# ----------------------------------------------------------------------------- interruptions

SLOW = "import time\ntime.sleep(0.4)\n"  # each student's file takes a moment: time to interrupt


@pytest.fixture(scope="module")
def slow_class(tmp_path_factory):
    """Twelve students, and the CSV of one uninterrupted run."""
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("interrupt")
    klass = out / "class"
    for k in range(12):
        (klass / f"s{k:02d}").mkdir(parents=True)
        source = SWAPPED if k % 3 == 0 else STUB if k % 5 == 0 else REFERENCE
        (klass / f"s{k:02d}" / "09-exercises.py").write_text(SLOW + source)
    (out / "tmp").mkdir()

    def grader(*args, ignore_sigint=False):
        import signal

        return subprocess.Popen(
            [sys.executable, "-m", "autograde", str(klass), "--seed", SEED, "--jobs", "2",
             "--timeout", "5", "--quiet", *map(str, args)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(out / "tmp")},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None)

    done = grader("--csv", out / "reference.csv")
    assert done.wait(timeout=300) == 0, done.stderr.read()
    return out, grader


@pytest.mark.slow
@pytest.mark.parametrize("signame", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_an_interrupted_run_keeps_what_is_done_and_resumes_to_the_same_grades(slow_class, signame):
    import signal

    out, grader = slow_class
    csv_path = out / f"{signame}.csv"
    journal = Path(str(csv_path) + ".journal")
    process = grader("--csv", csv_path, ignore_sigint=signame == "SIGINT")
    until = time.monotonic() + 120
    while time.monotonic() < until and process.poll() is None:
        if journal.exists() and len(journal.read_text().splitlines()) >= 4:  # header + 3 students
            break
        time.sleep(0.05)
    assert process.poll() is None, "the run ended before it could be interrupted"
    below = descendants(process.pid)
    assert below, "no sandbox process was found"
    sent = time.monotonic()
    process.send_signal(getattr(signal, signame))
    code = process.wait(timeout=30)
    took = time.monotonic() - sent
    if signame == "SIGKILL":
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and any(alive(p) for p in below):
            time.sleep(0.02)
        assert not [p for p in below if alive(p)], "a sandbox outlived the grader by over 1 s"
        assert not csv_path.exists()
    else:
        assert took < 2.0, f"{signame} took {took:.1f} s to stop the run"
        assert code == 128 + getattr(signal, signame)
        assert b"--resume" in process.stderr.read()
        partial = rows_of(csv_path)
        assert 3 <= len(partial) < 12
        assert not [p for p in below if alive(p)]
        assert not left_behind(out / "tmp"), "temporary folders were left behind"
    kept = len(journal.read_text().splitlines()) - 1
    assert kept >= 3
    resumed = grader("--csv", csv_path, "--resume")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()
    assert csv_path.read_text() == (out / "reference.csv").read_text()
    graded = [json.loads(line)["entry"]["student_id"] for line in journal.read_text().splitlines()[1:]]
    assert sorted(graded) == [f"s{k:02d}" for k in range(12)]  # each graded once, in all
    assert not left_behind(out / "tmp"), "temporary folders were left behind"


def test_the_class_report_counts_absent_work_apart_and_fits_a_phone(folders):
    from tools.browser import BrowserUnavailable, chromium

    out, _ = folders
    try:
        with chromium() as browser:
            page = browser.new_page(viewport={"width": 390, "height": 844})
            page.goto((out / "class.html").as_uri())
            summary = page.inner_text("#summary")
            rates = page.locator("#test-failure-rates tr").all_inner_texts()
            width = page.evaluate("() => document.documentElement.scrollWidth")
    except BrowserUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    # 11 students: nobody, pdf and txt sent nothing gradable; stub sent the template
    assert "7 submitted work" in summary and "3 sent nothing gradable" in summary
    assert "1 only the untouched template" in summary
    mean = re.search(r"mean ([0-9.]+) of 100", summary)  # the 7 who worked all earned full marks
    assert mean and float(mean.group(1)) == pytest.approx(100, abs=0.05)
    assert len(rates) > 10 and all(" of 7 (0%)" in r for r in rates[1:])
    assert width <= 390, f"the report is {width} px wide on a 390 px phone"


# ----------------------------------------------------------------------------- a generated class

@pytest.fixture(scope="module")
def variant_scores():
    import importlib.util

    spec = importlib.util.spec_from_file_location("class_day", ROOT / "benchmarks" / "class_day.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module, module.variant_scores(int(SEED))


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["canvas", "moodle", "folders"])
def test_a_generated_class_gets_one_right_row_per_student(variant_scores, layout, tmp_path):
    generator, scores = variant_scores
    record = {}
    expected = generator.make_class(tmp_path, 48, layout, seed=1, record=record)
    seconds, code = generator.grade_class(tmp_path, layout, 2, int(SEED))
    assert code == 0
    rows = rows_of(tmp_path / "grades.csv")
    assert sorted(r["student_id"] for r in rows) == sorted(expected)  # each exactly once
    for row in rows:
        variant, status = expected[row["student_id"]]
        want = scores[variant] if variant else 0.0
        assert float(row["score"]) == pytest.approx(want, abs=1e-9), row
        assert row["status"].startswith(status), row
    assert {v for v, _ in expected.values()} >= set(generator.VARIANTS) | {None}
    if layout == "canvas":  # the copy check on the same class (one layout: about 2 s)
        ranks, honest = generator.copy_ranks(record)
        assert ranks and None not in [rank for *_, rank, _ in ranks], ranks  # every copy is shown
        paired = [rank for *_, rank, _ in ranks if rank != "group"]  # the rest: in a group
        assert sorted(paired) == list(range(1, len(paired) + 1))  # above every honest pair
        assert all(share > max(honest, 0.9) for *_, share in ranks), (ranks, honest)


# ----------------------------------------------------------------------------- similarity

def rename(source: str, names) -> str:
    for old, new in names:
        source = re.sub(rf"\b{old}\b", new, source)
    return source


def test_renamed_copies_rank_above_every_honest_pair(tmp_path):
    from autograde import similarity

    independent = (ROOT / "grading" / "independent.py").read_text()
    codes = {"original": REFERENCE,
             "copier": rename(REFERENCE, [("model_params", "P"), ("num_gpus", "g"),
                                          ("ratios", "grid"), ("loss", "value"), ("best", "k")]),
             "honest": independent, "template": STUB}
    pairs = similarity.similar_pairs(codes, threshold=0.0)
    ranked = [(p.a, p.b) for p in pairs]
    assert ranked[0] == ("copier", "original") and pairs[0].similarity > 0.9
    honest = [p.similarity for p in pairs if {p.a, p.b} != {"copier", "original"}]
    assert all(s < 0.5 < pairs[0].similarity for s in honest)
    assert not [p for p in pairs if "template" in (p.a, p.b)]  # the template is not evidence
    assert "<mark>" in pairs[0].evidence[0] and "<mark>" in pairs[0].evidence[1]


def test_the_class_report_shows_copies_side_by_side(tmp_path):
    for sid, source in [("ann", REFERENCE), ("bob", rename(REFERENCE, [("ratios", "grid")])),
                        ("cy", STUB)]:
        (tmp_path / "class" / sid).mkdir(parents=True)
        (tmp_path / "class" / sid / "09-exercises.py").write_text(source)
    assert run(tmp_path / "class", "--seed", SEED, "--class-report", tmp_path / "r.html",
               "--similarity") == 0
    html = (tmp_path / "r.html").read_text()
    section = html[html.index('id="similarity"'):]
    assert "ann and bob" in section and section.count('class="pair"') == 1
    assert section.count("<pre") == 2 and "<mark>" in section
