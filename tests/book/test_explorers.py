"""The ring collective stepper (book/explore/collectives), driven in headless Chromium.

At 1280 and 390 px the test picks collectives, ring sizes and buffers as a reader would, steps
through every step with the buttons and the slider, and compares what the page shows with
`solutions.communication`, computed here in the test: the chunks each GPU holds after each
step (the ring simulation, run on buffers that mark whose values each chunk has summed), the
chunk each GPU sends next, and the bytes each GPU has sent so far (one chunk, a p-th of the
buffer, per step; after the last step the ring formula 2(p-1)/p or (p-1)/p times the buffer).
One page load per width. The checks of the other explorers are in test_book_explorers.py.

Also, without a browser: the table the book's build writes for the stepper agrees with the
simulation, so a wrong table fails here even where Chromium is missing.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

from solutions import communication, facts, memory
from tests.book.test_book_explorers import WIDTHS, Visit, choose

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "book" / "_ext"))
import explore  # noqa: E402

#: Bytes are shown to four significant digits (in MB or GB).
REL = 1e-3

#: The buffers the page offers, computed here from facts: 1 GB and two models' bf16 gradients.
GRAD_BYTES = memory.BYTE_CONVENTIONS["zero_16"].grads
BUFFERS = {0: 1e9, 1: facts.ARCHITECTURES["Llama 3 8B"].params * GRAD_BYTES,
           2: facts.ARCHITECTURES["Llama 3 70B"].params * GRAD_BYTES}
FORMULA = {"all-reduce": communication.allreduce_bytes_per_rank,
           "reduce-scatter": communication.reduce_scatter_bytes_per_rank,
           "all-gather": communication.allgather_bytes_per_rank}


def simulated_masks(p: int) -> list:
    """masks[k][r][c]: bitmask of the GPUs whose values chunk c of GPU r holds after k steps of
    the ring all-reduce (k = 0: the start), from simulate_ring_allreduce on one-hot buffers."""
    start = np.zeros((p, p, p))
    for r in range(p):
        start[r, :, r] = 1.0
    result = communication.simulate_ring_allreduce(start)
    assert np.array_equal(result.final, np.ones((p, p, p)))  # every GPU has every sum
    weights = 2 ** np.arange(p)
    states = [start] + [s.state for s in result.steps]
    return [[[int(st[r, c] @ weights) for c in range(p)] for r in range(p)] for st in states], result


def expected_view(kind: str, p: int):
    """(masks per shown step, chunk sent by each GPU at each step) for one collective."""
    masks, result = simulated_masks(p)
    full = 2 ** p - 1
    sends = [s.sends for s in result.steps]
    if kind == "all-reduce":
        return masks, sends
    if kind == "reduce-scatter":
        return masks[:p], sends[:p - 1]
    # all-gather: from the end of the reduce-scatter, only finished chunks are there
    return [[[m if m == full else 0 for m in row] for row in st] for st in masks[p - 1:]], sends[p - 1:]


#: (collective, p, buffer index), visited in this order (every p from 2 to 8 is checked against
#: the simulation without a browser, in test_stepper_table_is_the_simulation)
CASES = [("all-reduce", 4, 0), ("reduce-scatter", 5, 1), ("all-gather", 3, 0), ("all-reduce", 3, 2)]


def shown_bytes(text: str) -> float:
    """'250.0 MB' or '1.333 GB' or '2,800 GB' as bytes."""
    m = re.fullmatch(r"([\d,]*\.?\d+) (MB|GB)", text)
    assert m, f"not a byte count: {text!r}"
    return float(m.group(1).replace(",", "")) * {"MB": 1e6, "GB": 1e9}[m.group(2)]


def shown_state(root) -> dict:
    """Everything the stepper shows, read in one call: the step, the chunk grid, what each GPU
    sends next, the bytes each has sent, and the formula's total."""
    return root.evaluate("""r => ({
        step: r.querySelector('[data-out="step"]').textContent,
        cells: [...r.querySelectorAll('td.chunk')].map(c => [Number(c.dataset.gpu), Number(c.dataset.chunk),
                                                              Number(c.dataset.mask), c.textContent]),
        sends: [...r.querySelectorAll('td[data-out="sends"]')].map(c => c.textContent),
        sent: [...r.querySelectorAll('td[data-out="sent"]')].map(c => c.textContent),
        formula: r.querySelector('td[data-out="formula"]').textContent,
    })""")


def check_step(visit, kind, p, buffer, k, masks, sends):
    shown = shown_state(visit.root)
    assert shown["step"] == f"{k} of {len(sends)}"
    full = 2 ** p - 1
    assert len(shown["cells"]) == p * p
    for r, c, mask, text in shown["cells"]:
        assert mask == masks[k][r][c], (kind, p, k, r, c)
        if kind == "all-gather":
            assert text == ("\u2713" if mask == full else "\u2013")
        else:
            assert text == f"{bin(mask).count('1')}/{p}"
    size = BUFFERS[buffer]
    assert len(shown["sent"]) == len(shown["sends"]) == p
    for r in range(p):
        assert shown_bytes(shown["sent"][r]) == pytest.approx(k * size / p, rel=REL, abs=1), (kind, p, k, r)
        assert shown["sends"][r] == (f"chunk {sends[k][r]}" if k < len(sends) else "\u2013"), (kind, p, k, r)
    assert shown_bytes(shown["formula"]) == pytest.approx(FORMULA[kind](size, p), rel=REL), (kind, p)


@pytest.mark.site
@pytest.mark.parametrize("width", WIDTHS, ids=lambda w: f"{w}px")
def test_collective_stepper(browser, server, width):
    visit = Visit(browser, server, "collectives", width)
    root = visit.root
    for kind, p, buffer in CASES:
        choose(root, "collective", kind)
        choose(root, "p", str(p))
        root.locator('select[name="buffer"]').select_option(str(buffer))
        masks, sends = expected_view(kind, p)
        steps = len(sends)
        assert steps == (2 * (p - 1) if kind == "all-reduce" else p - 1)
        check_step(visit, kind, p, buffer, 0, masks, sends)
        for k in range(1, steps + 1):
            root.locator('button[name="forward"]').click()
            check_step(visit, kind, p, buffer, k, masks, sends)
        # After the last step: the sum everywhere (all-reduce, all-gather), or each GPU's own
        # finished chunk (reduce-scatter: GPU r holds chunk (r + 1) % p, as the simulation says).
        full = 2 ** p - 1
        if kind == "reduce-scatter":
            assert all(masks[-1][r][(r + 1) % p] == full for r in range(p))
        else:
            assert all(m == full for row in masks[-1] for m in row)
        root.locator('button[name="back"]').click()
        check_step(visit, kind, p, buffer, steps - 1, masks, sends)
        root.locator('input[name="step"]').fill("1")
        check_step(visit, kind, p, buffer, 1, masks, sends)
        root.locator('button[name="start"]').click()
        check_step(visit, kind, p, buffer, 0, masks, sends)
    # Play moves on by itself and pause holds it; the figures are those of the step shown.
    kind, p, buffer = CASES[-1]
    play, step = root.locator('button[name="play"]'), root.locator('input[name="step"]')
    play.click()
    visit.page.wait_for_function("s => Number(s.value) >= 1", arg=step.element_handle(), timeout=5000)
    play.click()
    assert play.get_attribute("aria-pressed") == "false"
    masks, sends = expected_view(kind, p)
    check_step(visit, kind, p, buffer, int(step.input_value()), masks, sends)
    visit.finish()


def test_stepper_table_is_the_simulation():
    """The build's table (book/_ext/explore.py) against the simulation and the ring formula."""
    data = explore.collective_data()
    assert data["p"] == list(range(2, 9))
    sizes = [BUFFERS[i] for i in range(len(data["buffers"]))]
    for p in data["p"]:
        for kind in FORMULA:
            run = data["runs"][f"{kind},{p}"]
            masks, sends = expected_view(kind, p)
            assert [run["start"]] + [s["mask"] for s in run["steps"]] == masks, (kind, p)
            assert [tuple(s["sends"]) for s in run["steps"]] == [tuple(s) for s in sends], (kind, p)
            for b, size in enumerate(sizes):
                want = [[k * size / p] * p for k in range(1, len(sends) + 1)]
                np.testing.assert_allclose(run["sent"][b], want, rtol=1e-5)
                assert run["formula"][b] == pytest.approx(FORMULA[kind](size, p), rel=1e-5)
                assert run["sent"][b][-1][0] == pytest.approx(FORMULA[kind](size, p), rel=1e-5)
