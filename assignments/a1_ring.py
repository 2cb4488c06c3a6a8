"""Assignment 1's grader: a ring all-reduce written from point-to-point sends and receives.

The student writes ``ring_all_reduce(tensor, op="sum")``: reduce a contiguous float32
``tensor`` over all ranks of the default group, in place, and return it; ``op="mean"``
divides the sum by the world size. Any size (also not a multiple of the world size, also
smaller than it), any world size from 2 to 8.

Each world size runs as one group of real gloo ranks (``sandbox.multirank``: a private
loopback, every rank dies with the group). The grader sends each rank its own random
inputs, gets back what the ring left in the tensor and what the rank sent (the labs'
collective counter, extended to sends), and compares:

* the result with the float64 sum (or mean) of every rank's input, to
  ``TOLERANCE_ULPS * n * eps32 * max|sum|``: the same n numbers summed in another order
  differ by at most a few roundings of the largest partial sum;
* the bytes each rank sends with ``2 (n-1)/n`` of the buffer
  (``solutions.communication.allreduce_bytes_per_rank``; Patarasuk & Yuan 2009), exactly,
  on sizes divisible by ``n``;
* that no built-in collective is called (the counter sees any c10d collective, whatever
  name it is called by): a submission that uses one scores 0 on every part, as does one
  whose code opens a socket to anything but its own ranks.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from solutions.communication import allreduce_bytes_per_rank

from .common import (Report, Test, built_in_collectives, decode, encode, grade_submitted, load_function,
                     messages_by_case, open_rank, payload, traffic_counter, warm_up)
from .common import self_check as run_self_check

NAME = "Assignment 1: ring all-reduce"
FUNCTION = "ring_all_reduce"
WORLD_SIZES = (2, 4)
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


# ----------------------------------------------------------------------------- inside a rank

def _rank_main(get_function, quiet):
    def main(rank, world_size, data, report):
        import torch

        opened = open_rank(data, get_function, report, quiet)
        if opened is None:
            return
        header, arrays, fn = opened
        for case, (op, x) in enumerate(zip(header["ops"], arrays)):
            tensor = torch.from_numpy(x.copy())
            counter = traffic_counter()
            try:
                with counter:
                    out = fn(tensor, op=op)
            except NotImplementedError as exc:
                report({"case": case, "error": "NotImplementedError", "message": str(exc)[:200]})
                continue
            except Exception as exc:  # noqa: BLE001
                report({"case": case, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                continue
            message = {"case": case, "calls": dict(counter.calls), "bytes": dict(counter.bytes),
                       "inplace": encode(tensor.detach().numpy())}
            if isinstance(out, torch.Tensor) and out.numel() == tensor.numel():
                message["returned"] = encode(out.detach().reshape(-1).to(torch.float32).numpy())
            report(message)
    return main


# ----------------------------------------------------------------------------- the grader's side

def _diagnose_sum(got, expected, n, part, op="sum", even_ok=True):
    """One line naming the likely mistake when a sum (or mean) is wrong. ``even_ok``: the
    sizes that divide by ``n`` came out right at this world size; only then is a wrong
    uneven size blamed on the padding (else the ring itself is wrong, and padding is a
    false lead)."""
    if got is None:
        return "the tensor came back with the wrong number of elements"
    if np.isnan(got).any():
        return "the result holds NaN (uninitialised memory? torch.empty where zeros were meant?)"
    chunks = np.array_split(np.arange(expected.size), n)
    bad = [k for k, idx in enumerate(chunks) if idx.size and not np.allclose(got[idx], expected[idx], rtol=1e-4, atol=1e-4)]
    if part == "uneven" and not even_ok:
        return (f"the result is not the {op} of every rank's input here either: fix the sizes "
                "that divide by the world size first")
    if part == "uneven" and len(bad) < n:
        return (f"chunks {bad} of {n} are wrong at this size, which is not a multiple of the world "
                "size: pad the buffer (or split it into uneven chunks) and copy back only the real elements")
    if 0 < len(bad) < n:
        return (f"chunks {bad} of {n} are wrong: check which chunk each step sends and receives "
                "(reduce-scatter step s: send (r - s) mod n, receive (r - s - 1) mod n; all-gather: "
                "send (r + 1 - s) mod n)")
    if part != "uneven" and bad:
        return (f"the result is not the {op} of every rank's input, in any of the {n} chunks: check "
                "which chunk each step sends, receives and adds or copies (the hint 'which chunk "
                "at which step')")
    return f"the result is not the {op} of every rank's input"


def _elements(size: int) -> str:
    return f"{size} element" + ("" if size == 1 else "s")


def _tolerance(expected, n):
    return TOLERANCE_ULPS * n * np.finfo(np.float32).eps * max(1.0, float(np.abs(expected).max(initial=0)))


def grade(get_function, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``get_function()`` (called inside each rank) at each world size; a Report."""
    from sandbox.multirank import Limits, run_ranks

    limits = limits or Limits(wall_s=30.0, stall_s=5.0)
    warm_up()  # here, once: the ranks are forked from this process and inherit the imports
    started = time.monotonic()
    report = Report(NAME)
    parts = {p: {"ok": [], "feedback": []} for p in POINTS}
    cheats = []
    missing = None
    for n in world_sizes:
        todo = cases(n, seeds)
        data = inputs(n, seeds, salt)
        payloads = [payload({"ops": [op for _, _, op in todo]}, [row[r] for row in data]) for r in range(n)]
        group = run_ranks(n, _rank_main(get_function, quiet), payloads, limits, isolate=isolate,
                          prepare=warm_up)
        report.isolated = group.isolated and report.isolated is not False
        if group.sockets:
            cheats.append(f"net: opened a socket to {group.sockets[0].split(': ', 1)[1]} (rank "
                          f"{group.sockets[0].split(':')[0].split()[-1]}): only its own ranks may be reached")
        by_case, missing = messages_by_case(group, len(todo), missing)
        verdict = {p: None for p in POINTS}  # None: not seen yet; else first failure text
        seen = {p: False for p in POINTS}
        for c, (part, size, op) in enumerate(todo):
            ranks = by_case[c]
            if len(ranks) < n:
                why = group.detail if not group.ok else "some ranks reported nothing"
                if part == "uneven" and not group.ok:
                    why += ("; at a size that is not a multiple of the world size the chunks "
                            "differ in size: pad the buffer to a multiple of n")
                verdict[part] = verdict[part] or f"n={n}, {_elements(size)}: not finished ({why})"
                continue
            errors = [(r, m["error"]) for r, m in sorted(ranks.items()) if "error" in m]
            if errors:
                r, e = errors[0]
                text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
                verdict[part] = verdict[part] or f"n={n}, {_elements(size)}, op={op!r}: {text}"
                continue
            total = np.sum([row.astype(np.float64) for row in data[c]], axis=0)
            expected = total / n if op == "mean" else total
            tol = _tolerance(expected, n)
            problems = []
            for r, m in sorted(ranks.items()):
                got = decode(m.get("inplace", ""), size)
                returned = decode(m.get("returned", ""), size) if "returned" in m else None
                if got is not None and np.all(np.abs(got - expected) <= tol):
                    continue
                if returned is not None and np.all(np.abs(returned - expected) <= tol):
                    problems.append(f"rank {r} returns the right {op} but leaves the tensor unchanged: reduce in place")
                elif op == "mean" and got is not None and np.all(np.abs(got - total) <= _tolerance(total, n)):
                    problems.append(f"rank {r}: the mean is the sum: divide by the world size ({n})")
                elif op == "mean" and got is not None and np.all(np.abs(got - total / n**2) <= tol / n):
                    problems.append(f"rank {r}: the mean is divided by the world size twice")
                else:
                    even_ok = seen["sum"] and verdict["sum"] is None
                    problems.append(f"rank {r}: {_diagnose_sum(got, expected, n, part, op, even_ok)}")
            if problems:
                verdict[part] = verdict[part] or f"n={n}, {_elements(size)}, op={op!r}: {problems[0]} (tolerance {tol:.2g})"
            seen[part] = True
            calls = {k: v for m in ranks.values() for k, v in (m.get("calls") or {}).items()
                     if isinstance(k, str) and isinstance(v, int)}
            used = built_in_collectives(calls)
            if used and "p2p" not in [x.split(":")[0] for x in cheats]:
                cheats.append(f"p2p: calls the built-in {', '.join(used)}: the ring must be built from "
                              "send/recv (isend/irecv, batch_isend_irecv) only")
            if part == "sum" and not problems:
                predicted = int(allreduce_bytes_per_rank(size * 4, n))
                sent = [int((m.get("bytes") or {}).get("send", 0)) for _, m in sorted(ranks.items())]
                bad = [(r, s) for r, s in enumerate(sent) if s != predicted]
                seen["traffic"] = True
                if bad:
                    r, s = bad[0]
                    ratio = s / (size * 4)
                    why = ""
                    if ratio >= (n - 1) - 1e-9:
                        why = ": it sends the whole buffer at a step instead of one chunk of 1/n"
                    elif ratio > 2 * (n - 1) / n:
                        why = ": more than a ring needs"
                    verdict["traffic"] = verdict["traffic"] or (
                        f"n={n}, {size} elements: rank {r} sent {s:,} bytes = {ratio:.3g} x the buffer; "
                        f"a ring sends 2(n-1)/n = {2 * (n - 1) / n:.3g} x = {predicted:,} bytes{why}")
        for part in POINTS:
            if part == "p2p":
                continue
            if not seen[part] and verdict[part] is None:
                verdict[part] = (f"n={n}: not measured yet: the bytes are counted once a sum comes out right"
                                 if part == "traffic" and group.ok and seen["sum"] else
                                 f"n={n}: not run ({group.detail or 'no result'})")
            parts[part]["ok"].append(verdict[part] is None)
            if verdict[part]:
                parts[part]["feedback"].append(verdict[part])
        if not group.ok and group.detail not in " ".join(parts["sum"]["feedback"] + parts["uneven"]["feedback"] + parts["mean"]["feedback"]):
            parts["sum"]["feedback"].append(f"n={n}: {group.detail}")
    for part, points in POINTS.items():
        if part == "p2p":
            ok = any(parts["sum"]["ok"]) and not any(c.startswith("p2p:") for c in cheats)
            report.tests.append(Test(TITLES[part], points, ok, "" if ok else
                                     next((c[5:] for c in cheats if c.startswith("p2p:")), "no sum came out right")))
            continue
        oks = parts[part]["ok"]
        test = Test(TITLES[part], points, bool(oks) and all(oks), "\n".join(parts[part]["feedback"]))
        report.tests.append(test)
    if missing:
        for t in report.tests:
            t.passed, t.feedback = False, missing
    if cheats:  # every part is the ring: a ring that is not one, or that calls out, earns 0
        report.zero(cheats[0][5:])
    report.wall_s = time.monotonic() - started
    return report


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file. Unless ``salt`` is given, the inputs are
    drawn afresh (a submission that regenerates them from the seeds learns nothing)."""
    return grade_submitted(path, NAME, TITLES, POINTS, lambda sources: load_function(sources, FUNCTION), grade, **kwargs)


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
    ranks are forked from this process, so they have the function. Returns the score."""
    return run_self_check(grade, lambda: function, world_sizes, seeds)
