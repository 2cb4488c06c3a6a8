"""Copy detection on a class the size of a real one (306 students): 15 honest students who
share one correct solution are one group, shown once, and every one of 14 copies of unique
work (renamed, padded with statements that do nothing, or with unused functions added) is
shown as a pair; two untouched templates are no evidence of anything."""
import random
import re

import pytest

from autograde import similarity

FORMS = ["{a} {op} {c}", "({a} {op} {b}) * {c}", "np.sqrt(abs({a})) + {c}", "max({a}, {b}) {op} {c}",
         "{a} ** 2 {op} {b}", "np.log1p(abs({a} {op} {c}))", "min({a} {op} {c}, {b})", "{c} / (1 + abs({a}))"]
SHARED = '''import numpy as np

E, A, B, ALPHA, BETA = 1.69, 406.0, 410.0, 0.34, 0.28


def chinchilla_loss(N, D):
    return E + A / N ** ALPHA + B / D ** BETA
'''


def unique_work(rng: random.Random) -> str:
    """A chinchilla_loss of its own: a random chain of statements with random constants."""
    lines, names = ["import numpy as np", "", "", "def chinchilla_loss(N, D):"], ["N", "D"]
    for i in range(rng.randint(10, 16)):
        a, b = rng.sample(names, 2)
        form = rng.choice(FORMS).format(a=a, b=b, op=rng.choice("+-*/"), c=round(rng.uniform(0.1, 99), 3))
        lines.append(f"    t{i} = {form}")
        names.append(f"t{i}")
    lines.append(f"    return {names[-1]}")
    return "\n".join(lines) + "\n"


def disguised(source: str, rng: random.Random, how: str) -> str:
    """A copy of ``source``: every local name renamed, and padded as ``how`` says."""
    copy = re.sub(r"\bt(\d+)\b", lambda m: f"value_{int(m.group(1)) * 7 + 3}", source)
    lines = copy.splitlines()
    if how == "pass":
        lines = [x for line in lines for x in ([line, "    pass"] if line.startswith("    t") or
                                                line.startswith("    value") else [line])]
    elif how == "unused":
        lines += ["", "", unique_work(rng).replace("chinchilla_loss", "scratch_helper")]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def klass():
    rng = random.Random(2026)
    codes = {f"honest{k:02d}": SHARED for k in range(15)}
    copies = {}
    for k in range(14):
        original = unique_work(rng)
        codes[f"orig{k:02d}"] = original
        codes[f"copy{k:02d}"] = disguised(original, rng, ("rename", "pass", "unused")[k % 3])
        copies[f"copy{k:02d}"] = f"orig{k:02d}"
    codes["untouched1"] = codes["untouched2"] = "def chinchilla_loss(N, D):\n    raise NotImplementedError\n"
    k = 0
    while len(codes) < 306:
        codes[f"unique{k:03d}"] = unique_work(rng)
        k += 1
    return codes, copies


def test_a_shared_correct_answer_is_one_group_and_every_copy_is_shown(klass):
    codes, copies = klass
    template = "def chinchilla_loss(N, D):\n    raise NotImplementedError\n"
    groups, pairs = similarity.similar(codes, template=template, keep=("chinchilla_loss",))
    assert [g.ids for g in groups] == [tuple(sorted(f"honest{k:02d}" for k in range(15)))]
    shown = {frozenset((p.a, p.b)) for p in pairs}
    assert {frozenset(pair) for pair in copies.items()} <= shown  # all 14, within the 30 slots
    assert all(p.similarity > 0.9 for p in pairs if frozenset((p.a, p.b)) in
               {frozenset(pair) for pair in copies.items()})
    flagged = {sid for p in pairs for sid in (p.a, p.b)}
    assert not flagged & {"untouched1", "untouched2"}
    assert not [p for p in pairs if p.a.startswith("unique") and p.b.startswith("unique")]
    html = "".join(similarity.pairs_html((groups, pairs)))
    assert html.count('class="group"') == 1 and html.count('class="pair"') == len(pairs)


def test_two_untouched_assignment_notebooks_share_nothing_but_the_template(tmp_path):
    from pathlib import Path

    from instructor.student_notebook import write_student_version

    master = Path(similarity.ROOT) / "assignments" / "a1-ring-allreduce.md"
    notebook, _ = write_student_version(master, tmp_path)
    code = similarity.student_code(notebook)
    assert "ring_all_reduce" in code
    groups, pairs = similarity.similar({"ann": code, "bob": code}, template=similarity.template_code("a1"),
                                       keep=("ring_all_reduce",), threshold=0.0)
    assert groups == [] and pairs == []
    _, with_the_exercises_template = similarity.similar({"ann": code, "bob": code},
                                                        template=similarity.template_code(), threshold=0.0)
    assert with_the_exercises_template  # the wrong template: what the class report used to show


def test_a_statement_too_deep_to_print_does_not_hide_the_code_around_it():
    """Padding a copied cell with ``0+0+...+0`` (too deep for ``ast.unparse``) must not remove
    the cell from the comparison: the copy is still found."""
    rng = random.Random(7)
    original = unique_work(rng)
    padded = original + "\n_pad = " + "+".join(["0"] * 3000) + "\n"
    _, scored, prints = similarity.compare({"orig": original, "copy": padded, "other": unique_work(rng)},
                                           keep=("chinchilla_loss",))
    assert "copy" in prints and "chinchilla_loss" in prints["copy"].raw_code
    assert scored and scored[0][1:] == ("copy", "orig") and scored[0][0] > 0.5
