"""What the assignments' grader tests share: a master notebook graded with a mistake
planted in its reference answer, and the student's version of it (the stub) graded."""
from __future__ import annotations

import pytest

from instructor.student_notebook import write_student_version


@pytest.fixture
def grade_planted(tmp_path):
    """``grade_planted(grader, master, (old, new), ..., **options)``: the master notebook
    with each ``old`` of its reference replaced by ``new``, graded as a submission by
    ``grader.grade_file(path, **options)``. Each ``old`` must occur exactly once, so a
    planted mistake that no longer applies fails loudly instead of grading the reference."""
    def grade(grader, master, *pairs, **options):
        source = master.read_text(encoding="utf-8")
        for old, new in pairs:
            assert source.count(old) == 1, f"the reference no longer holds {old!r}"
            source = source.replace(old, new)
        path = tmp_path / "submission.md"
        path.write_text(source, encoding="utf-8")
        return grader.grade_file(path, **options)
    return grade


@pytest.fixture
def grade_stub(tmp_path):
    """``grade_stub(grader, master, **options)``: the student's version of the master
    notebook (what the release ships; no solution left in it) graded as a submission."""
    def grade(grader, master, **options):
        ipynb, _ = write_student_version(master, tmp_path)
        assert "BEGIN SOLUTION" not in ipynb.read_text(encoding="utf-8")
        return grader.grade_file(ipynb, **options)
    return grade
