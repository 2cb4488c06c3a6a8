"""Assignment 1's grader: a ring all-reduce written from point-to-point sends and receives.

The student writes ``ring_all_reduce(tensor, op="sum")``: reduce a contiguous float32
``tensor`` over all ranks of the default group, in place, and return it; ``op="mean"``
divides the sum by the world size. Any size (also not a multiple of the world size, also
smaller than it), any world size from 2 to 8.

Each world size runs as one group of real gloo ranks (``sandbox.multirank``: a private
loopback, every rank dies with the group), every case on its own (``common.run_cases``).
The grader sends each rank its own random inputs, gets back what the ring left in the
tensor, sees what each rank sent on the group's loopback (``sandbox.wire``, outside the
ranks: the rank's own count is used only where no capture is possible), and compares:

* the result with the float64 sum (or mean) of every rank's input, to
  ``TOLERANCE_ULPS * n * eps32 * max|sum|``: the same n numbers summed in another order
  differ by at most a few roundings of the largest partial sum;
* the bytes each rank sends with ``2 (n-1)/n`` of the buffer
  (``solutions.communication.allreduce_bytes_per_rank``; Patarasuk & Yuan 2009) on sizes
  divisible by ``n``, to one float32 element per step (:func:`traffic_slack`: chunks of
  uneven sizes);
* that no built-in collective is called (any gloo collective is seen on the wire, however
  it was called): a submission that uses one scores 0 on every part, as does one whose code
  opens a socket to anything but its own ranks, or whose data travels past gloo's messages
  (the rendezvous store, raw bytes).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from solutions.communication import allreduce_bytes_per_rank

from .common import (Report, built_in_collectives, decode, finish_report, first_cause, grade_submitted, payload,
                     rank_program, run_cases)
from .common import self_check as run_self_check

NAME = "Assignment 1: ring all-reduce"
FUNCTION = "ring_all_reduce"
#: The world sizes graded: an odd one among them, so that a method that needs a power of two
#: (recursive halving and doubling) does not pass for the ring the statement asks for.
WORLD_SIZES = (2, 3, 4)
SEEDS = (0, 1, 2)
#: Relative tolerance in units of float32's epsilon, times n (see the module docstring).
TOLERANCE_ULPS = 4
POINTS = {"sum": 3, "uneven": 2, "mean": 2, "traffic": 2, "p2p": 1}
TITLES = {
    "sum": "sum, sizes divisible by the world size",
    "uneven": "sum, sizes not divisible by the world size (1, n-1, 1001, 4099 elements)",
    "mean": "op='mean'",
    "traffic": "bytes each rank sends = 2(n-1)/n of the buffer",
    "p2p": "built from send/recv only (no built-in collective)",
}

#: The known mistakes, by name, and words that only their feedback holds (the class report
#: counts how many students made each).
MISTAKES = {
    "the ring sends the whole buffer at a step": "sends the whole buffer at a step",
    "mean not divided by the world size": "the mean is the sum: divide",
    "mean divided twice": "divided by the world size twice",
    "sizes not a multiple of the world size": "which is not a multiple of the world",
    "wrong chunk sent or received at a step": "check which chunk each step sends",
    "result returned but not reduced in place": "leaves the tensor unchanged: reduce in place",
    "a deadlock (a rank hung in a blocking call)": " hung in ",
    "a method that needs a power of two ranks (halving and doubling)": "powers of two: does your method pair",
    "a send or receive to a rank that does not exist": "which does not exist: the ranks are",
    "a built-in collective instead of send/recv": "the ring must be built from send/recv",
}


def divisible_sizes(n: int) -> list:
    return [n * 256, n * 37]


def uneven_sizes(n: int) -> list:
    return [s for s in sorted({1, max(1, n - 1), 1001, 4099}) if s % n]


def cases(n: int, seeds=SEEDS) -> list:
    """``(part, size, op)`` in the order the ranks run them: the parts most submissions get
    right first, so that a hang in a later one costs only the later ones."""
    out = []
    for _ in seeds:
        out += [("sum", size, "sum") for size in divisible_sizes(n)]
        out += [("mean", size, "mean") for size in divisible_sizes(n)[:1]]
        out += [("uneven", size, "sum") for size in uneven_sizes(n)]
        out += [("mean", 1001, "mean")]
    return out


def inputs(n: int, seeds=SEEDS, salt: int = 0) -> list:
    """Per case, per rank, a float32 input; ``salt`` varies them between gradings."""
    rows = []
    for seed in seeds:
        rng = np.random.default_rng([seed, n, salt])
        rows += [[rng.standard_normal(size).astype(np.float32) for _ in range(n)]
                 for _, size, _ in cases(n, [seed])]
    return rows


# ----------------------------------------------------------------------------- the grader's side

def _elements(size: int) -> str:
    return f"{size} element" + ("" if size == 1 else "s")


def _tolerance(expected, n):
    return TOLERANCE_ULPS * n * np.finfo(np.float32).eps * max(1.0, float(np.abs(expected).max(initial=0)))


def _close(got, want, n) -> bool:
    return got is not None and bool(np.all(np.abs(got - want) <= _tolerance(want, n)))


def _wrong_chunks(got, expected, n) -> list:
    chunks = np.array_split(np.arange(expected.size), n)
    return [k for k, idx in enumerate(chunks)
            if idx.size and not np.allclose(got[idx], expected[idx], rtol=1e-4, atol=1e-4)]


def _diagnose_sum(got, expected, n, part, op="sum", even_ok=True, uneven_ok=()):
    """One line naming what the evidence shows when a sum is wrong. ``even_ok``: the sizes
    that divide by ``n`` came out right at this world size; ``uneven_ok``: the sizes that do
    not divide and came out right. Only a ring right on every size that divides and wrong
    on every one that does not is told to pad: else padding is a false lead."""
    if got is None:
        return "the tensor came back with the wrong number of elements"
    if np.isnan(got).any():
        return "the result holds NaN (uninitialised memory? torch.empty where zeros were meant?)"
    bad = _wrong_chunks(got, expected, n)
    if part == "uneven" and not even_ok:
        return (f"the result is not the {op} of every rank's input here either: fix the sizes "
                "that divide by the world size first")
    if part == "uneven" and uneven_ok:
        few = " (fewer elements than ranks: some chunks are empty)" if expected.size < n else ""
        return (f"sizes {', '.join(map(str, uneven_ok))} come out right but {expected.size}{few} does not: "
                f"chunks {bad} of {n} are wrong here")
    if part == "uneven" and len(bad) < n:
        return (f"chunks {bad} of {n} are wrong at this size, which is not a multiple of the world "
                "size: pad the buffer (or split it into uneven chunks) and copy back only the real elements")
    if 0 < len(bad) < n:
        return (f"chunks {bad} of {n} are wrong: check which chunk each step sends and receives "
                "(reduce-scatter step s: send (r - s) mod n, receive (r - s - 1) mod n; all-gather: "
                "send (r + 1 - s) mod n)")
    if bad:
        return (f"the result is not the {op} of every rank's input, in any of the {n} chunks: check "
                "which chunk each step sends, receives and adds or copies (the hint 'which chunk "
                "at which step')")
    return f"the result is not the {op} of every rank's input"


def _diagnose_mean(got, total, n, sums_ok: bool) -> str:
    """Why ``op='mean'`` is wrong, from what it left (``total``: the float64 sum)."""
    if got is None:
        return "the tensor came back with the wrong number of elements"
    if _close(got, total, n):
        return f"the mean is the sum: divide by the world size ({n})"
    if _close(got, total / n**2, n):
        return "the mean is divided by the world size twice"
    if not sums_ok:
        return _diagnose_sum(got, total / n, n, "mean", "mean")
    ratio = float(np.dot(got, total / n) / max(np.dot(total / n, total / n), 1e-30))
    if _close(got, ratio * total / n, n):
        return (f"the sums are right, but op='mean' leaves {ratio:.4g} x the mean: divide the sum by "
                f"the world size ({n}), once")
    return ("the sums are right, but op='mean' does not leave the sum divided by the world size: "
            "divide the reduced tensor (after the ring), not the inputs or a chunk of it")


_DEADLOCK_HINT = ("; where every rank receives before it sends, nobody sends: a deadlock (the statement's "
                  "hint 'deadlocks': post each send with its receive)")


def _hang_hint(part, size, n, even_ok, uneven_ok, stopped="") -> str:
    """What a group that stopped may mean, from the other sizes' outcomes: at an uneven size,
    chunks that disagree in length; where nothing came out right and a rank hung waiting for a
    message, the classic deadlock of a ring whose ranks all receive before they send."""
    if not even_ok and not uneven_ok and " hung in recv" in stopped:
        return _DEADLOCK_HINT
    if part != "uneven" or not even_ok:
        return ""
    if uneven_ok and size < n:
        return (f"; sizes {', '.join(map(str, uneven_ok))} come out right, so the ring handles sizes that "
                f"do not divide; {size} is fewer elements than ranks: some chunks are empty, check that "
                "every step still sends and receives on every rank")
    if uneven_ok:
        return f"; sizes {', '.join(map(str, uneven_ok))} come out right"
    return ("; at a size that is not a multiple of the world size the chunks differ in size, so a send and "
            "its receive may disagree on the length: pad the buffer to a multiple of n (or make every "
            "rank agree on each chunk's size)")


def _judge_case(part, size, op, data, ranks, n):
    """``(status, text, total)`` of one finished case: ok, wrong (with the evidence) or error."""
    total = np.sum([row.astype(np.float64) for row in data], axis=0)
    expected = total / n if op == "mean" else total
    errors = [(r, m["error"]) for r, m in sorted(ranks.items()) if "error" in m]
    if errors:
        r, e = first_cause(errors)
        return "error", ("not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"), total
    for r, m in sorted(ranks.items()):
        got = decode(m.get("inplace", ""), size)
        if _close(got, expected, n):
            continue
        returned = decode(m.get("returned", ""), size) if "returned" in m else None
        if returned is not None and _close(returned, expected, n):
            return "wrong", f"rank {r} returns the right {op} but leaves the tensor unchanged: reduce in place", total
        return "wrong", (r, got), total
    return "ok", "", total


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`) at each world size; a Report.
    Every case of every seed runs and scores on its own (:func:`~assignments.common.run_cases`)."""
    from sandbox.multirank import Limits

    limits = limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=30.0)
    started = time.monotonic()
    report = Report(NAME)
    program = rank_program("a1_rank:main", student, (FUNCTION,), quiet)
    verdicts = {p: [] for p in POINTS}  # per world size: None (passed) or the first problem
    cheats, missing = [], None
    for n in world_sizes:
        todo = cases(n, seeds)
        data = inputs(n, seeds, salt)

        def payloads_for(indices, todo=todo, data=data, n=n):
            header = {"cases": indices, "ops": [todo[c][2] for c in indices]}
            return [payload(header, [data[c][r] for c in indices]) for r in range(n)]

        runs = run_cases(n, len(todo), payloads_for, program, limits, isolate, signature=lambda c, todo=todo: todo[c])
        report.ran(runs)
        missing = missing or runs.missing
        if runs.sockets and not any(c.startswith("net:") for c in cheats):
            where, address = runs.sockets[0].split(": ", 1)
            cheats.append(f"net: opened a socket to {address} ({where}): only its own ranks may be reached")
        if runs.outside and not any(c.startswith("wire:") for c in cheats):
            cheats.append(f"wire: {runs.outside[0]}: the ring's data must travel by send and recv")
        judged = {}
        for c, (part, size, op) in enumerate(todo):
            if c in runs.stopped:
                judged[c] = ("stopped", runs.stopped[c], None)
                continue
            judged[c] = _judge_case(part, size, op, data[c], runs.messages[c], n)
            seen = runs.traffic(c)
            if seen is not None:  # the collectives seen on the group's loopback (a barrier moves no data)
                calls = {k: v for t in seen for k, v in t["calls"].items() if k != "barrier"}
            else:  # no capture: what the ranks themselves counted
                calls = {k: v for m in runs.messages[c].values() for k, v in (m.get("calls") or {}).items()
                         if isinstance(k, str) and isinstance(v, int)}
            used = built_in_collectives(calls)
            if used and not any(x.startswith("p2p:") for x in cheats):
                cheats.append(f"p2p: calls the built-in {', '.join(used)}: the ring must be built from "
                              "send/recv (isend/irecv, batch_isend_irecv) only")
        sums = [judged[c][0] for c, t in enumerate(todo) if t[0] == "sum"]
        even_ok = bool(sums) and all(x == "ok" for x in sums)
        uneven_ok = sorted({todo[c][1] for c in judged if todo[c][0] == "uneven" and judged[c][0] == "ok"})
        first = {p: None for p in POINTS}
        measured = False
        for c, (part, size, op) in enumerate(todo):
            status, text, total = judged[c]
            where = f"n={n}, {_elements(size)}, op={op!r}"
            if status == "stopped":
                text = f"{where}: not finished ({text}{_hang_hint(part, size, n, even_ok, uneven_ok, text)})"
            elif status == "error":
                text = f"{where}: {text}"
            elif status == "wrong" and isinstance(text, tuple):
                r, got = text
                why = (_diagnose_mean(got, total, n, even_ok) if op == "mean" else
                       _diagnose_sum(got, total, n, part, op, even_ok, [u for u in uneven_ok if u != size]))
                text = f"{where}: rank {r}: {why} (tolerance {_tolerance(total, n):.2g})"
            elif status == "wrong":
                text = f"{where}: {text}"
            if status != "ok":
                first[part] = first[part] or text
            elif part == "sum":
                measured = True
                first["traffic"] = first["traffic"] or _judge_traffic(runs.messages[c], runs.traffic(c), size, n)
        if not measured:
            first["traffic"] = first["traffic"] or (
                f"n={n}: not measured: the bytes are counted once a sum comes out right")
        first["p2p"] = None if any(judged[c][0] == "ok" for c in judged) else f"n={n}: no case came out right"
        for part in POINTS:
            verdicts[part].append(first[part])
    problems = {part: [v for v in verdicts[part] if v] for part in POINTS}
    hint = _power_of_two_hint(world_sizes, verdicts)
    for part in POINTS:  # said once, on the first problem
        if hint and problems[part]:
            problems[part][0] += hint
            break
    seen = False  # the deadlock hint too: on its first line only
    for part in POINTS:
        for i, text in enumerate(problems[part]):
            if _DEADLOCK_HINT in text:
                problems[part][i] = text if not seen else text.replace(_DEADLOCK_HINT, "; a deadlock, as above")
                seen = True
    finish_report(report, TITLES, POINTS, problems, missing, started)
    if cheats:  # every part is the ring: a ring that is not one, or that calls out, earns 0
        report.zero(cheats[0].split(": ", 1)[1])
    return report


def _power_of_two_hint(world_sizes, verdicts) -> str:
    """A note for a submission right at every world size that is a power of two and wrong only
    at the others: its method pairs ranks by halving (recursive halving and doubling), which
    the ring does not need."""
    wrong = {n for i, n in enumerate(world_sizes) if any(v[i] for v in verdicts.values())}
    right = [n for n in world_sizes if n not in wrong]
    if not wrong or not right or any(n & (n - 1) == 0 for n in wrong) or any(n & (n - 1) for n in right):
        return ""
    return (f" (right at n={' and '.join(map(str, right))} only, powers of two: does your method pair "
            "ranks by halving? A ring works for any number of ranks)")


def traffic_slack(n: int) -> int:
    """Bytes a rank's sends may differ from ``2(n-1)/n`` of the buffer: one float32 element for
    each of the ring's ``2(n-1)`` steps. A ring whose chunks are not all the same size (two
    half-buffers going round in opposite directions, each cut by ``tensor_split``) sends a
    chunk of one element more or less at some steps; all ranks together still send exactly
    ``2(n-1)`` buffers. A ring that sends the whole buffer at a step is off by far more."""
    return 4 * 2 * (n - 1)


def _judge_traffic(ranks: dict, seen, size: int, n: int) -> str | None:
    """The bytes each rank sent for a right sum against the ring's ``2(n-1)/n``: the payload
    bytes its sends carried on the group's loopback (``seen``), or where no capture saw
    them, what the rank counted itself."""
    predicted = int(allreduce_bytes_per_rank(size * 4, n))
    if seen is not None:
        sent = [int(t["p2p"]) for t in seen]
    else:
        sent = [int((m.get("bytes") or {}).get("send", 0)) if isinstance(m.get("bytes"), dict) else 0
                for _, m in sorted(ranks.items())]
    bad = [(r, b) for r, b in enumerate(sent) if abs(b - predicted) > traffic_slack(n)]
    if not bad:
        return None
    r, b = bad[0]
    ratio = b / (size * 4)
    why = ""
    if ratio >= (n - 1) - 1e-9:
        why = ": it sends the whole buffer at a step instead of one chunk of 1/n"
    elif ratio > 2 * (n - 1) / n:
        why = ": more than a ring needs"
    return (f"n={n}, {size} elements: rank {r} sent {b:,} bytes = {ratio:.3g} x the buffer; "
            f"a ring sends 2(n-1)/n = {2 * (n - 1) / n:.3g} x = {predicted:,} bytes{why}")


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file. Unless ``salt`` is given, the inputs are
    drawn afresh (a submission that regenerates them from the seeds learns nothing)."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def reference_source() -> str:
    """The reference answer as a student would submit it: the ring the labs run
    (``labs.collectives.ring_all_reduce`` and the ``RingStats`` it counts with), written out
    as a .py file. The master notebook's solution cell calls that same function."""
    import inspect

    from labs import collectives

    return ("import torch\nimport torch.distributed as dist\n\n\n"
            + inspect.getsource(collectives.RingStats) + "\n\n"
            + inspect.getsource(collectives.ring_all_reduce))


def reference_submission(folder) -> Path:
    """:func:`reference_source` saved as ``folder/a1_reference.py`` (for the bundle's and
    the tests' reference runs)."""
    path = Path(folder) / "a1_reference.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(reference_source(), encoding="utf-8")
    return path


def self_check(function, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``function`` (defined in this notebook) and print its report; the
    ranks are forked from this process, so they have the function. Returns the score.

    The master notebook's answer calls ``labs.collectives`` when it runs, inside a rank; a
    forked rank runs as an unprivileged user, who may not read the checkout (a clone in a
    0700 temporary folder), so the module is imported here, before the ranks fork."""
    try:
        from labs import collectives  # noqa: F401
    except ImportError:  # a notebook outside the course: its function needs nothing of it
        pass
    return run_self_check(grade, {FUNCTION: function}, world_sizes, seeds)
