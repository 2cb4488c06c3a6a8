"""An assignment's grader reads a hostile file in time linear in its size: a 99,000-line
``.py`` (a string of blank lines, then the stub; under the 100,000-line limit) reaches the
ranks at once. The self-check filter used to start with ``^\\s*`` in multiline mode, which
runs over every blank line below each line start: 90-170 s of grader CPU on this file.

The time is the grader's CPU time until it first asks for ranks (``run_ranks``, stopped
there), so a loaded machine does not make the test flaky; torch is imported before the clock
starts (a second of CPU that every grading pays once, whatever the file)."""
import time

import pytest

import assignments
from assignments.common import grader

FILLER_LINES = 99_000


def hostile_file(folder, function: str):
    source = 'PADDING = """' + "\n" * FILLER_LINES + '"""\n\n\ndef ' + function + \
        '(*args, **kwargs):\n    raise NotImplementedError\n'
    path = folder / "submission.py"
    path.write_text(source, encoding="utf-8")
    return path


class ReachedTheRanks(Exception):
    pass


@pytest.mark.parametrize("assignment", sorted(assignments.ASSIGNMENTS))
def test_a_99000_line_file_reaches_the_ranks_within_2_cpu_seconds(tmp_path, monkeypatch, assignment):
    import sandbox.multirank as multirank

    module = grader(assignment)
    function = getattr(module, "FUNCTION", None) or getattr(module, "CLASS", None) or module.FUNCTIONS[0]
    path = hostile_file(tmp_path, function)
    reached = []

    def stop_at_the_ranks(*args, **kwargs):
        reached.append(time.process_time())
        raise ReachedTheRanks

    monkeypatch.setattr(multirank, "run_ranks", stop_at_the_ranks)
    import torch.distributed  # noqa: F401  (paid once per grading run, not per file)

    started = time.process_time()
    try:
        module.grade_file(path, seeds=(0,), world_sizes=(2,))
    except ReachedTheRanks:
        pass
    assert reached, f"{assignment}: the grader never asked for ranks on a file that defines `{function}`"
    assert reached[0] - started < 2.0, f"{assignment}: {reached[0] - started:.1f} CPU s before the ranks"
