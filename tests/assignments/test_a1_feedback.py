"""Assignment feedback a student reads, checked without starting ranks: a wrong ring is not
blamed on the padding, a wrong mean is not called a wrong sum, and an untouched stub names the
function to write (not the assignment's title)."""
from __future__ import annotations

import numpy as np

from assignments import a1_ring, a5_pipeline
from autograde.classrun import assignment_checks, assignment_part, graded_names
from grading.report import format_report
from sandbox.results import Result


def test_a_wrong_uneven_size_blames_the_padding_only_when_the_even_sizes_pass():
    n, expected = 4, np.arange(1001, dtype=np.float64)
    got = expected.copy()
    got[:10] += 1.0  # chunk 0 wrong, the others right: the padding's signature
    assert "pad the buffer" in a1_ring._diagnose_sum(got, expected, n, "uneven", even_ok=True)
    text = a1_ring._diagnose_sum(got, expected, n, "uneven", even_ok=False)
    assert "pad" not in text and "divide by the world size first" in text


def test_a_wrong_mean_is_called_a_wrong_mean():
    expected = np.ones(8)
    text = a1_ring._diagnose_sum(expected * 3.0, expected, 2, "mean", op="mean")
    assert "not the mean" in text and "sum" not in text
    assert "which chunk" in text  # every chunk wrong: the ring's chunk indices, most likely


def test_the_stub_line_names_the_function_to_write():
    assert graded_names(a1_ring) == "ring_all_reduce"
    assert graded_names(a5_pipeline) == "one_f_one_b`, `pipeline_step"
    [check] = assignment_checks("a1")
    text = format_report([(check, Result(False, "not implemented yet", True))], parts=[assignment_part("a1")])
    assert "`ring_all_reduce` still raises NotImplementedError" in text
    assert "implement Assignment 1 (`ring_all_reduce`)" in text


def test_a_missing_file_is_one_line_for_the_assignments_command(tmp_path, capsys):
    import pytest

    from assignments.__main__ import main

    with pytest.raises(SystemExit) as stop:
        main(["a1", str(tmp_path / "a1-ring-allreduce.ipynb")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "no such file" in err
    assert len(err.strip().splitlines()) == 1, err  # no usage block


def test_a_file_without_the_function_says_so_not_a_cell_s_error():
    import pytest

    from assignments.common import load_function

    other = [("cell 1", "import no_such_module_here\n"), ("cell 2", "def chinchilla_loss(N, D):\n    return 0\n")]
    with pytest.raises(LookupError, match=r"nowhere does it define `ring_all_reduce` \(the wrong file\?\)"):
        load_function(other, "ring_all_reduce")
    broken = [("cell 1", "import no_such_module_here\ndef ring_all_reduce(t, op='sum'):\n    return t\n")]
    with pytest.raises(LookupError, match="cell 1: ModuleNotFoundError"):  # the cause, when it is one
        load_function(broken, "ring_all_reduce")
