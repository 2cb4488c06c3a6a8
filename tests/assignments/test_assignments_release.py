"""The assignments' masters never ship: the student release and the public site get the
student version, whose solution is one ``raise NotImplementedError`` line."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import ASSIGNMENTS
from instructor.release import STUDENT_EXCLUDED
from instructor.student_notebook import BEGIN, END, write_student_version

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("assignment", sorted(ASSIGNMENTS))
def test_the_master_is_left_out_and_its_student_version_has_no_solution(assignment, tmp_path):
    master = ASSIGNMENTS[assignment][1]
    text = (ROOT / master).read_text(encoding="utf-8")
    solution = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert master.startswith(STUDENT_EXCLUDED)
    assert master.replace(".md", ".ipynb").startswith(STUDENT_EXCLUDED)
    ipynb, md = write_student_version(ROOT / master, tmp_path)
    student = md.read_text(encoding="utf-8")
    assert BEGIN not in student and "NotImplementedError" in student
    for line in solution.strip().splitlines():
        if len(line.strip()) > 25:  # distinctive lines of the answer
            assert line.strip() not in student, line
