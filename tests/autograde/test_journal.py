"""``--resume`` trusts only what the grader wrote: every journal line is signed with a key
kept beside it (mode 600), so a line forged by anything else (a full mark for oneself, a
line copied from a classmate with the score edited) is ignored and that student is graded
again."""
import json
import os
import stat

import pytest

from autograde.classrun import Journal, read_journal
from sandbox.results import Check, Part, Result, SubmissionReport

CHECKS = [Check("ex1", "ex1_gpt3", 10, False, "chinchilla_loss")]


def report(passed: bool) -> SubmissionReport:
    return SubmissionReport(submission="x.py", parts=[Part("ex1", "Exercise 1", "chinchilla_loss", 10)],
                            results=[(CHECKS[0], Result(passed, "ok" if passed else "wrong"))])


def test_only_signed_lines_are_read_back(tmp_path):
    path = tmp_path / "grades.csv.journal"
    journal = Journal(path, {"seed": 7})
    journal.add("alice", "hash-a", report(True))
    journal.add("bob", "hash-b", report(False))
    journal.close()
    assert stat.S_IMODE(os.stat(str(path) + ".key").st_mode) == 0o600
    lines = path.read_text().splitlines()
    bob = json.loads(lines[2])
    bob["entry"]["report"]["results"][0][1] = True  # bob's own line, his test now "passed"
    unsigned = {"entry": {"student_id": "carol", "hash": "hash-c", "report": {}}, "mac": "0" * 64}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(bob) + "\n" + json.dumps(unsigned) + "\n"
                + json.dumps({"student_id": "dave", "hash": "h", "report": {}}) + "\n")
    header, done = read_journal(path)
    assert header["seed"] == 7
    assert set(done) == {"alice", "bob"}
    assert done["bob"][1]["results"][0][1] is False  # the grader's line, not the edited copy


def test_a_journal_without_its_key_is_not_trusted(tmp_path):
    path = tmp_path / "grades.csv.journal"
    Journal(path, {"seed": 7}).close()
    os.unlink(str(path) + ".key")
    with pytest.raises(ValueError, match="key .* is missing"):
        read_journal(path)


def test_a_journal_whose_key_was_replaced_is_not_trusted(tmp_path):
    path = tmp_path / "grades.csv.journal"
    journal = Journal(path, {"seed": 7})
    journal.add("alice", "hash-a", report(True))
    journal.close()
    with open(str(path) + ".key", "w") as f:
        f.write(os.urandom(32).hex())
    with pytest.raises(ValueError, match="no header this grader signed"):
        read_journal(path)
