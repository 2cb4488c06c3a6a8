"""Write every red-team case of ``cases.py`` into ``submissions/``.

    python -m tests.redteam.build          # rewrite the files
    python -m tests.redteam.build --check  # exit 1 if a committed file is out of date

A ``.py`` case is ``reference_submission.py`` with its exercise blocks replaced; a notebook
case turns the same blocks into cells (a markdown heading, the code, and a self-check cell
per exercise, like the course's exercises notebook) and then applies its transformation.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from .cases import CASES, Case

HERE = Path(__file__).parent
REFERENCE = HERE / "reference_submission.py"
OUT = HERE / "submissions"
EXERCISE_IDS = ("ex1", "ex2", "ex3", "ex4", "ex4b")


def reference_blocks() -> tuple[str, dict]:
    """(header, {exercise id: code}) from the reference, split at '# Exercise N' lines
    ('# Exercise 4(b)' is part (b) of Exercise 4, id ``ex4b``; '4(a)' is ``ex4``)."""
    text = REFERENCE.read_text(encoding="utf-8")
    text = text.split('\nif __name__ == "__main__":')[0].rstrip() + "\n"
    parts = re.split(r"^(?=# Exercise \d)", text, flags=re.M)
    header, blocks = parts[0], {}
    for part in parts[1:]:
        number, sub = re.match(r"# Exercise (\d)(?:\((\w)\))?", part).groups()
        blocks[f"ex{number}" + ("" if sub in (None, "a") else sub)] = part.strip() + "\n"
    assert set(blocks) == set(EXERCISE_IDS), blocks.keys()
    return header.strip() + "\n", blocks


def case_blocks(case: Case) -> tuple[str, dict]:
    header, blocks = reference_blocks()
    for exercise, code in case.replace.items():
        blocks[exercise] = (f"# Exercise {exercise[2:]}: red team: {case.attack}\n"
                            + code.strip() + "\n")
    return header, blocks


def python_text(case: Case) -> str:
    header, blocks = case_blocks(case)
    pieces = [f'"""Red team: {case.attack}."""\n', header.split('"""', 2)[-1].strip() + "\n"]
    if case.prefix:
        pieces.append(case.prefix.strip() + "\n")
    pieces += [blocks[e] for e in EXERCISE_IDS]
    return "\n\n".join(pieces)


# ----------------------------------------------------------------------------- notebooks

def _cell(kind: str, source: str, **extra) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": source.strip("\n")}
    if kind == "code":
        cell.update(execution_count=extra.get("count"), outputs=extra.get("outputs", []))
    return cell


def _stream(text: str) -> list:
    return [{"name": "stdout", "output_type": "stream", "text": text}]


def notebook_cells(case: Case) -> list:
    header, blocks = case_blocks(case)
    body = header.split('"""', 2)[-1].strip()
    cells = [_cell("markdown", f"# Exercises\n\nRed team: {case.attack}."), _cell("code", body)]
    for exercise in EXERCISE_IDS:
        cells.append(_cell("markdown", f"## Exercise {exercise[2:]}"))
        cells.append(_cell("code", blocks[exercise]))
        cells.append(_cell("code", "from autograde.selfcheck import self_check\n"
                                   f"self_check({exercise!r}, globals());"))
    transform = case.notebook or "plain"
    code_of = {e: 3 + 3 * i for i, e in enumerate(EXERCISE_IDS)}  # index of each code cell
    if transform == "stale_outputs":
        count = 1
        for cell in cells:
            if cell["cell_type"] == "code":
                cell["execution_count"] = count
                if "self_check" in cell["source"]:
                    cell["outputs"] = _stream("  ✓ every test  10/10\nAll tests passed.\n")
                count += 1
    elif transform.startswith("delete:"):
        del cells[code_of[transform.split(":")[1]]]
    elif transform.startswith("markdown:"):
        cell = cells[code_of[transform.split(":")[1]]]
        cells[code_of[transform.split(":")[1]]] = _cell("markdown", cell["source"])
    elif transform == "duplicate":
        _, reference = reference_blocks()
        ex1, ex2 = code_of["ex1"], code_of["ex2"]
        wrong = cells[ex2]["source"]
        cells[ex2]["source"] = reference["ex2"].strip("\n")  # the right version first...
        cells.insert(ex2 + 1, _cell("code", wrong))  # ...then an older, wrong copy below it
        cells.insert(ex1 + 1, _cell("code", cells[ex1]["source"]))
    elif transform == "magics":
        cells[1]["source"] = "%matplotlib inline\n!pip install numpy\n" + cells[1]["source"]
        cells[code_of["ex1"]]["source"] += (
            "\n\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\n"
            "for n in (1e9, 1e10):\n    %time chinchilla_loss(n, 1e11)\n"
            "ax.loglog([1e9, 1e10], [chinchilla_loss(1e9, 1e11), chinchilla_loss(1e10, 1e11)])\n"
            "plt.show()")
        cells.insert(2, _cell("code", "%%bash\necho this is not python; exit 1"))
    elif transform.startswith("surrogate:"):
        cell = cells[code_of[transform.split(":")[1]]]
        cell["source"] = ("x = 1  # \ud800 is half of a character\nraise ValueError\n"
                          + cell["source"])
    elif transform.startswith("blank_lines:"):
        # 40,000 short blank lines in one cell (once quadratic in the grader's regex).
        cells[code_of[transform.split(":")[1]]]["source"] += "\n" + " \n" * 40_000 + "# end"
    elif transform.startswith("unused_import:"):
        # A module the sandbox does not have, imported and never used, above the function.
        cell = cells[code_of[transform.split(":")[1]]]
        cell["source"] = "import scipy.optimize  # tried once, not needed\n" + cell["source"]
    elif transform != "plain":
        raise ValueError(f"unknown notebook transformation {transform!r}")
    return cells


def notebook_text(case: Case) -> str:
    notebook = {"cells": notebook_cells(case),
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                            "name": "python3"}},
                "nbformat": 4, "nbformat_minor": 5}
    text = json.dumps(notebook, indent=1, ensure_ascii=False) + "\n"
    # A lone surrogate cannot be written as UTF-8; JSON's escape for it is valid.
    return re.sub("[\ud800-\udfff]", lambda m: f"\\u{ord(m.group()):04x}", text)


def content(case: Case) -> bytes:
    if case.raw is not None:
        return case.raw
    if case.suffix == ".ipynb":
        return notebook_text(case).encode()
    return python_text(case).encode()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    stale = []
    for case in CASES:
        path = OUT / case.name
        data = content(case)
        if path.exists() and path.read_bytes() == data:
            continue
        stale.append(case.name)
        if not args.check:
            path.write_bytes(data)
    known = {c.name for c in CASES}
    extra = [p.name for p in OUT.iterdir() if p.name not in known]
    if args.check and (stale or extra):
        print("out of date:", ", ".join(stale + extra), file=sys.stderr)
        return 1
    print(f"{len(CASES)} cases; {'would rewrite' if args.check else 'rewrote'} {len(stale)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
