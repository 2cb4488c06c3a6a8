"""Assignment 4 (tensor-parallel MLP and attention), graded as the autograder grades it: the
master's reference earns every point at world sizes 2 and 4 and three seeds; the student's
stub earns 0 saying so; each planted mistake loses points with feedback that names it."""
from __future__ import annotations

from pathlib import Path

import pytest

from assignments import a4_tp

ROOT = Path(__file__).resolve().parents[2]
MASTER = ROOT / "assignments" / "a4-tensor-parallel.md"

pytestmark = pytest.mark.slow


def test_reference_scores_full_marks_at_two_world_sizes_and_three_seeds():
    report = a4_tp.grade_file(MASTER, world_sizes=(2, 4), seeds=(0, 1, 2), salt=11)
    assert report.max_score == 10
    assert report.score == report.max_score, report.text()


def test_the_students_stub_scores_zero_and_says_not_implemented(grade_stub):
    report = grade_stub(a4_tp, MASTER, world_sizes=(2,), seeds=(0,))
    assert report.score == 0, report.text()
    assert all("not implemented yet" in t.feedback for t in report.tests), report.text()


F_BEFORE_MLP = "    h = CopyToTensorParallel.apply(x)\n    y = F.linear(F.gelu"
MUTANTS = {
    # name: (replacements, points lost at least, words the feedback must hold)
    "f and g swapped": ((
        (F_BEFORE_MLP, "    h = ReduceFromTensorParallel.apply(x)\n    y = F.linear(F.gelu"),
        ("    return ReduceFromTensorParallel.apply(y) + shard", "    return CopyToTensorParallel.apply(y) + shard"),
    ), 2, "f and g are swapped"),
    "g without its all-reduce": ((("        x = x.contiguous().clone()\n        dist.all_reduce(x)\n",
                                   "        x = x.contiguous().clone()\n"),), 3, "the all-reduce is missing"),
    "no f before the MLP": (((F_BEFORE_MLP, "    h = x\n    y = F.linear(F.gelu"),), 2,
                            "f (an all-reduce in the backward pass) is missing"),
    "row/column split swapped": ((
        ('    hidden = params["fc.weight"].shape[0] // world_size\n    rows = slice(rank * hidden, (rank + 1) * hidden)\n'
         '    return {"fc.weight": params["fc.weight"][rows], "fc.bias": params["fc.bias"][rows],\n'
         '            "proj.weight": params["proj.weight"][:, rows], "proj.bias": params["proj.bias"]}',
         '    d = params["fc.weight"].shape[1] // world_size\n    cols = slice(rank * d, (rank + 1) * d)\n'
         '    return {"fc.weight": params["fc.weight"][:, cols], "fc.bias": params["fc.bias"],\n'
         '            "proj.weight": params["proj.weight"][cols], "proj.bias": params["proj.bias"]}'),
    ), 1, "row/column split swapped"),
    "heads split wrong": ((("        return torch.cat([part[mine] for part in t.split(d)])",
                            "        return t.chunk(world_size)[rank]"),), 1, "heads split wrong"),
    "row-parallel bias added before g": ((('    return ReduceFromTensorParallel.apply(y) + shard["proj.bias"]',
                                           '    return ReduceFromTensorParallel.apply(y + shard["proj.bias"])'),),
                                         2, "add it once, after g"),
}


@pytest.mark.parametrize("name", list(MUTANTS))
def test_each_planted_mistake_loses_points_and_is_named(grade_planted, name):
    pairs, lost, words = MUTANTS[name]
    report = grade_planted(a4_tp, MASTER, *pairs, world_sizes=(2,), seeds=(0,))
    assert report.score <= report.max_score - lost, report.text()
    assert words in report.text(), report.text()


def test_the_labs_tensor_parallel_operators_pass_the_graders_f_and_g_checks():
    """Lab 4's f and g (``labs.tensor_parallel``) and the assignment's reference are held
    to the same checks: the lab's operators, wrapped to the assignment's signature, with the
    master's shards and blocks."""
    import jupytext

    from labs.tensor_parallel import CopyToTensorParallel, ReduceFromTensorParallel, TensorParallelComm

    namespace = {}
    for cell in jupytext.read(MASTER).cells:
        if cell.cell_type == "code" and "def tp_mlp" in cell.source:
            exec(cell.source, namespace)

    def lab(operator):
        class Wrapped:
            @staticmethod
            def apply(x):
                return operator.apply(x, TensorParallelComm(mode="builtin"))
        return Wrapped

    def functions():
        namespace["CopyToTensorParallel"] = lab(CopyToTensorParallel)
        namespace["ReduceFromTensorParallel"] = lab(ReduceFromTensorParallel)
        return {name: namespace[name] for name in a4_tp.FUNCTIONS}

    from assignments.common import Student

    report = a4_tp.grade(Student(local=functions), world_sizes=(2,), seeds=(0,))
    assert report.score == report.max_score, report.text()


# tp_attention takes n_head, and the blocks any width h; a grader whose every case had the
# same block (h = 32, 4 heads, b = 2, s = 8) gave 10/10 to an attention with its heads' width
# typed in.
SPECIAL_CASED = {
    "head width typed in": ('    width, head_dim = shard["proj.weight"].shape[1], C // n_head\n',
                            '    width, head_dim = shard["proj.weight"].shape[1], 8\n'),
    "local heads typed in": ("    q, k, v = (z.reshape(B, T, width // head_dim, head_dim)",
                             "    q, k, v = (z.reshape(B, T, 4 // dist.get_world_size(), head_dim)"),
}


@pytest.mark.parametrize("name", list(SPECIAL_CASED))
def test_an_attention_special_cased_to_one_block_loses_the_attention(grade_planted, name):
    report = grade_planted(a4_tp, MASTER, SPECIAL_CASED[name], world_sizes=(2,), seeds=(0, 1, 2), salt=2)
    assert not report.tests[list(a4_tp.POINTS).index("attn")].passed, report.text()


def test_the_seeds_vary_the_block_the_statement_leaves_open():
    from assignments.a4_rank import block_shape

    shapes = [block_shape(seed) for seed in a4_tp.SEEDS]
    for field in ("d_model", "n_head", "seq", "batch"):
        assert len({shape[field] for shape in shapes}) > 1, field
    for shape in shapes:
        assert shape["d_model"] % shape["n_head"] == 0 and shape["seq"] != shape["batch"]
        assert all(shape["n_head"] % n == 0 for n in a4_tp.WORLD_SIZES)
