"""Assignment 6's grader: the dispatch and combine of an expert-parallel MoE layer.

The student writes three names (GShard's dispatch and combine, Lepikhin et al. 2021):

* ``AllToAll``, a ``torch.autograd.Function``: ``AllToAll.apply(x, send_splits,
  recv_splits)`` sends ``send_splits[j]`` consecutive rows of ``x`` to rank ``j`` and returns the
  ``recv_splits[j]`` rows received from each rank ``j``; its backward pass is the same exchange
  with the splits swapped;
* ``dispatch(x, expert_ids, num_experts)``: this rank's token copies to the ranks of their
  experts, with ``all_to_all_single`` and uneven split sizes (the counts exchanged first).
  Returns ``(rows, row_experts, plan)``: the copies this rank's experts must compute, the
  global expert of each row, and whatever ``combine`` needs;
* ``combine(expert_out, gates, plan)``: the experts' outputs back to their tokens' ranks, each
  weighted by its gate and summed into its token.

Each world size (2 and 4) runs as one group of gloo ranks (``sandbox.multirank``), three cases
each. The grader builds the case from the seed (and a salt drawn afresh each grading): a MoE
layer of ``labs.expert_parallel`` (router and SwiGLU experts; the number of experts, top-k and
the tokens per rank differ from case to case, :data:`LAYERS`), the tokens of every rank, and a
routing bias that makes the loads uneven (towards the first experts, all of them onto rank 0's
experts so that the other ranks receive nothing, towards the last experts). In each rank the
grader routes (``labs.expert_parallel.route``), calls the student's ``dispatch``, runs the
rank's own experts on the rows it received (and records which token copies arrived), calls the
student's ``combine``, and takes the gradient of ``sum(y * probe)``. What is compared:

* **dispatch**: every token copy reached the rank that owns its expert
  (``solutions.moe.expert_owner``), exactly once, labelled with its expert: none on another
  rank, none dropped, none twice;
* **combine**: the output equals ``labs.expert_parallel.moe_reference`` on one process within
  ``labs.expert_parallel.TOLERANCE`` (relative L2);
* **backward**: the gradients of the input tokens, of the router (summed over ranks) and of every
  expert equal one process's, within the same tolerance;
* **traffic**: the only collectives are all-to-alls (the counts' may be integer ones); two of
  tokens in the forward pass and two in the backward pass; and the bytes each rank sends in
  them, seen on the group's loopback between the grader's checkpoints after each pass
  (``sandbox.wire``; where no capture is possible, the rank's own count), equal
  ``solutions.moe.expert_parallel_bytes_from_counts`` for the routing: every copy once each
  way, nothing padded, no token sent to every rank.

Every case runs on its own (``assignments.common.run_cases``), and each rank gets its own
tokens and its own experts' weights only (the rows it receives are recognised by the grader,
from their bytes, among every rank's tokens).
"""
from __future__ import annotations

import base64
import time
from collections import Counter
from dataclasses import asdict, dataclass

import numpy as np

from solutions.moe import expert_owner, expert_parallel_bytes_from_counts, routing_counts

from .a6_rank import D_MODEL, FFN_HIDDEN, row_id
from .common import (Report, built_in_collectives, defined, finish_report, first_cause, grade_submitted, one_thread,
                     payload, rank_program, rank_source, run_cases, seeded)
from .common import self_check as run_self_check

NAME = "Assignment 6: expert-parallel dispatch and combine"
FUNCTIONS = ("AllToAll", "dispatch", "combine")
WORLD_SIZES = (2, 4)
#: Every rank holds the same number of experts: the world size must divide each case's E.
ALLOWED_WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
#: The routing bias of each case (by seed mod 3), added to the router's scores for the choice
#: only: towards the first experts, onto rank 0's experts alone, towards the last experts.
BIASES = ("first", "rank 0", "last")


@dataclass(frozen=True)
class Layer:
    """What a case's MoE layer leaves open to the student's code: E experts, top-k, and T
    tokens per rank (the width h is ``D_MODEL`` in every case)."""

    num_experts: int
    top_k: int
    tokens: int


#: The layer of each case (by seed mod 3, beside its bias): the statement asks for any k and
#: any E that the world size divides, so a dispatch written for one layer must not pass them
#: all. k stays at 2 or more (at k = 1 the renormalised gates are all 1), and in the "rank 0"
#: case k is at most E/4, so that rank 0's experts can take every copy at both world sizes.
LAYERS = (Layer(8, 2, 12), Layer(16, 3, 10), Layer(12, 3, 9))


def layer(seed: int) -> Layer:
    """The layer of the case of ``seed``."""
    return LAYERS[seed % len(LAYERS)]
POINTS = {"dispatch": 2, "combine": 2, "backward": 3, "traffic": 3}
TITLES = {
    "dispatch": "dispatch: every token copy reaches the rank that owns its expert, once",
    "combine": "combine: output equals one process",
    "backward": "backward: gradients (tokens, router, experts) equal one process",
    "traffic": "traffic: all-to-alls only, two each way, bytes = formula",
}
#: The known mistakes, by name, and words that only their feedback holds (for a class
#: report's count of who made each).
MISTAKES = {
    "splits transposed": "splits transposed",
    "combine without the router's weights": "without the router's weights",
    "overflow tokens dropped silently": "dropped silently",
    "no all-to-all in the backward pass": "no all-to-all in the backward pass",
    "copies sent to a rank that does not own their expert": "not the rank that owns",
    "every token sent to every rank (an all-gather)": "only all-to-alls may move tokens",
    "a deadlock (a rank hung in a blocking call)": " hung in ",
}


def tolerance() -> float:
    """Relative L2 bound against one process (Lab 8's own)."""
    from labs.expert_parallel import TOLERANCE

    return TOLERANCE


def _config(seed: int):
    from labs.expert_parallel import MoEConfig

    return MoEConfig(D_MODEL, FFN_HIDDEN, layer(seed).num_experts, layer(seed).top_k)


def routing_bias(seed: int, n: int):
    """The case's bias on the router's scores (a tensor of one entry per expert)."""
    import torch

    kind, E = BIASES[seed % len(BIASES)], layer(seed).num_experts
    if kind == "first":
        return torch.linspace(1.5, 0.0, E)
    if kind == "last":
        return torch.linspace(0.0, 1.5, E)
    bias = torch.zeros(E)
    bias[: E // n] = 10.0
    return bias


def make_case(seed: int, salt: int, n: int) -> dict:
    """The layer and the data of one case (built from torch's generators: seeded apart from
    other grading threads)."""
    from labs.expert_parallel import make_layer

    shape = layer(seed)
    with seeded(seed):
        W, experts, x, probe = make_layer(_config(seed), shape.tokens, n, (seed * 1_000_003 + salt) % 2**31, "cpu")
    return {"router": W, "experts": experts, "x": x, "probe": probe, "bias": routing_bias(seed, n), "layer": shape}


def rank_arrays(case: dict, rank: int, n: int) -> list:
    """What rank ``rank`` gets of a case (float32 arrays): the router, its own tokens and
    probe, the routing bias, and its own experts' weights; no other rank's tokens or experts."""
    T = case["layer"].tokens
    per, mine = case["layer"].num_experts // n, slice(rank * T, (rank + 1) * T)
    experts = case["experts"]
    return [t.detach().float().numpy().reshape(-1) for t in (
        case["router"], case["x"][mine], case["probe"][mine], case["bias"],
        experts.w1[rank * per:(rank + 1) * per], experts.w3[rank * per:(rank + 1) * per],
        experts.w2[rank * per:(rank + 1) * per])]


def arrivals(case: dict, reported) -> list:
    """``[source rank, token, expert]`` of each row a rank reported receiving (``[row id,
    expert]``): each row is recognised by its bytes among every rank's tokens (an all-to-all
    copies them exactly); ``[-1, -1, expert]`` for a row that is no token."""
    known = {row_id(row): i for i, row in enumerate(case["x"].detach().float().numpy())}
    T = case["layer"].tokens
    out = []
    for entry in reported if isinstance(reported, list) else []:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], int)):
            return []
        t = known.get(entry[0], -1)
        out.append([t // T if t >= 0 else -1, t % T if t >= 0 else -1, entry[1]])
    return out


def describe(seed: int) -> str:
    shape = layer(seed)
    return (f"seed {seed} (E = {shape.num_experts}, k = {shape.top_k}, T = {shape.tokens}; routing biased towards "
            f"{BIASES[seed % len(BIASES)]} experts)").replace("towards rank 0 experts", "onto rank 0's experts only")


def _dec(m) -> np.ndarray | None:
    """A float32 array a rank reported, as float64, or None if it is not one."""
    try:
        shape = [int(s) for s in m["shape"]]
        raw = base64.b64decode(m["data"], validate=True)
        if len(raw) != 4 * int(np.prod(shape, dtype=np.int64)) or len(shape) > 4:
            return None
        return np.frombuffer(raw, dtype=np.float32).reshape(shape).astype(np.float64)
    except (KeyError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- the grader's side

def reference(case: dict, all_ids) -> dict:
    """One process's output and gradients for the routing the ranks chose (``all_ids``, all
    ranks' tokens in order), and the output without the gates (to name that mistake)."""
    import torch

    from labs.expert_parallel import moe_reference, route

    x = case["x"].clone().requires_grad_(True)
    W = case["router"].clone().requires_grad_(True)
    experts = case["experts"]
    experts.zero_grad(set_to_none=True)
    ids = torch.as_tensor(all_ids, dtype=torch.int64)
    y = moe_reference(x, W, experts, ids)
    (y * case["probe"]).sum().backward()
    with torch.no_grad():
        ungated = moe_reference(x, W, experts, ids, gates=torch.ones(ids.shape))
        _, gates = route(x, W, ids.shape[1], expert_ids=ids)
    return {"y": y.detach().double().numpy(), "ungated": ungated.double().numpy(),
            "x_grad": x.grad.double().numpy(), "router_grad": W.grad.double().numpy(),
            "expert_grads": {name: getattr(experts, name).grad.double().numpy() for name in ("w1", "w3", "w2")},
            "gates": gates.double().numpy()}


def _rel(got, want) -> float:
    if got is None or got.shape != want.shape:
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


#: How far (in the router's score, about 1 in size) a reported choice may fall below the
#: grader's k-th best score: the same float32 products, computed in the rank, may round apart.
ROUTING_SLACK = 1e-4


def _judge_routing(case: dict, ids: list, n: int) -> str | None:
    """Whether each rank's reported expert choices (``ids``: per rank, ``(T, k)`` of the case's layer)
    are the router's: the grader's own top-k of ``x W^T + bias`` for that rank's tokens, up to
    :data:`ROUTING_SLACK` at a near tie. The routing is the grader's code, run inside the rank
    before the student's; the reference follows what the ranks report, so a routing rewritten
    from inside the rank (every token to its own rank's experts: nothing would travel) would
    otherwise be graded against itself. None, or why not."""
    import torch

    T, E, k = case["layer"].tokens, case["layer"].num_experts, case["layer"].top_k
    with one_thread(), torch.no_grad():
        for r in range(n):
            x = case["x"][r * T:(r + 1) * T].float()
            scores = (torch.nn.functional.linear(x, case["router"].float()) + case["bias"]).double().numpy()
            chosen = ids[r]
            if chosen.min(initial=0) < 0 or chosen.max(initial=0) >= E:
                return f"rank {r} reported expert ids outside 0..{E - 1}: the routing was changed inside the rank"
            kth = np.sort(scores, axis=1)[:, -k]
            got = np.take_along_axis(scores, chosen, axis=1)
            distinct = all(len(set(row)) == k for row in chosen.tolist())
            if not distinct or np.any(got < kth[:, None] - ROUTING_SLACK):
                t = int(np.argmax(np.any(got < kth[:, None] - ROUTING_SLACK, axis=1))) if distinct else 0
                return (f"rank {r} reported expert choices the router did not make (token {t}: experts "
                        f"{chosen[t].tolist()}, the router's top-{k} of x W^T + bias is "
                        f"{np.argsort(-scores[t], kind='stable')[:k].tolist()}): the grader's routing was "
                        "changed inside the rank")
    return None


def _token_a2a(counter) -> list:
    return [a for a in (counter or {}).get("all_to_all", []) if isinstance(a, dict) and a.get("floating")]


def _judge_error(n, ms, C) -> str:
    """What one failed case says: the first cause, named where it is a known mistake."""
    errors = [(r, m["error"]) for r, m in enumerate(ms) if "error" in m]
    r, error = first_cause(errors)
    if error == "NotImplementedError":
        return "not implemented yet"
    for rank, m in enumerate(ms):
        a2a = _token_a2a((m.get("counters") or [None])[0])
        if a2a:
            ins, outs = a2a[0].get("input_splits"), a2a[0].get("output_splits")
            row, col = C[rank].tolist(), C[:, rank].tolist()
            if row != col and (ins == col or outs == row):
                return (f"rank {rank}'s dispatch all-to-all was given input_split_sizes {ins} and output_split_sizes "
                        f"{outs}, but it sends {row} rows to the ranks and receives {col}: the splits transposed "
                        "(input_split_sizes are the rows this rank sends to each rank, output_split_sizes the rows it "
                        "receives from each)")
    if "Split sizes" in error:
        return (f"rank {r} raised {error}: the split sizes must add up to the rows of the tensors they split "
                "(input_split_sizes to the input's rows, output_split_sizes to the output's)")
    if "which it does not hold" in error:
        return (f"{error}: each copy must go to the rank that owns its expert, rank e // (E/n); it went to a rank "
                "that is not the rank that owns it")
    return f"rank {r} raised {error}"


def _judge_dispatch(n, ms, ids, shape: Layer) -> str | None:
    per = shape.num_experts // n
    for r, m in enumerate(ms):
        got = Counter()
        for entry in m.get("arrivals") or []:
            if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, int) for v in entry)):
                return f"rank {r} reported no arrivals"
            got[tuple(entry)] += 1
        want = Counter((s, t, int(e)) for s in range(n) for t in range(shape.tokens) for e in ids[s][t]
                       if int(expert_owner(int(e), shape.num_experts, n)) == r)
        strangers = [key for key in got if key[0] < 0]
        if strangers:
            return (f"rank {r} received {sum(got[k] for k in strangers)} rows that are no token's copies (padding to a "
                    "capacity? the rows must be the tokens themselves, and only they)")
        foreign = [key for key in got if not r * per <= key[2] < (r + 1) * per]
        if foreign:
            s, t, e = foreign[0]
            return (f"rank {s}'s token {t}, for expert {e}, reached rank {r}, not the rank that owns its expert "
                    f"(rank {e // per}: experts are placed in blocks of E/n = {per})")
        mislabelled = [key for key in got if key not in want]
        if mislabelled:
            s, t, e = mislabelled[0]
            return (f"rank {r} was told a copy of rank {s}'s token {t} is for expert {e}, which that token was not "
                    "routed to (row_experts does not follow the rows' order)")
        twice = [key for key in got if got[key] > want[key]]
        if twice:
            return f"rank {r} received {len(twice)} token copies more than once"
        lost = want - got
        if lost:
            short = Counter(e for (_, _, e) in lost.elements())
            e, missing = short.most_common(1)[0]
            routed = sum(v for (s, t, ee), v in want.items() if ee == e)
            return (f"expert {e} on rank {r} received {routed - missing} of the {routed} copies routed to it: the "
                    "overflow was dropped silently. Expert parallelism here is dropless: every copy must reach its "
                    "expert, so size the splits from the counts exchanged, not from a capacity")
    return None


def _judge_combine(ms, ref, tol, shape: Layer) -> str | None:
    T = shape.tokens
    for r, m in enumerate(ms):
        y = _dec(m.get("y") or {})
        want = ref["y"][r * T:(r + 1) * T]
        if y is None or y.shape != want.shape:
            return f"rank {r}'s combine returned shape {None if y is None else y.shape}, not ({T}, {D_MODEL})"
        if _rel(y, want) > tol:
            if _rel(y, ref["ungated"][r * T:(r + 1) * T]) <= tol:
                return ("the output is the plain sum of each token's expert outputs: the combine ran without the "
                        "router's weights (multiply each copy's output by its gate before summing it into its token)")
            return f"rank {r}: the output differs from one process (relative L2 {_rel(y, want):.2g})"
    return None


def _judge_backward(n, ms, ref, tol, shape: Layer) -> str | None:
    per, T = shape.num_experts // n, shape.tokens
    no_expert_grad = any(m.get("expert_grads") is None or any(v is None for v in m["expert_grads"].values())
                         for m in ms)
    no_a2a = all(not _token_a2a((m.get("counters") or [None, None])[1]) for m in ms)
    if no_expert_grad and no_a2a:
        return ("the experts' weights got no gradient and there was no all-to-all in the backward pass: autograd "
                "cannot see a plain all_to_all_single. Use AllToAll.apply in dispatch and combine; its backward sends "
                "the gradients back with the splits swapped")
    if any(m.get("router_grad") is None for m in ms):
        return "the router got no gradient: the output must depend on the gates (multiply by them in the combine)"
    router = sum(_dec(m["router_grad"]) for m in ms)
    for r, m in enumerate(ms):
        rel = _rel(_dec(m.get("x_grad") or {}), ref["x_grad"][r * T:(r + 1) * T])
        if rel > tol:
            return f"rank {r}: the gradient of its tokens differs from one process (relative L2 {rel:.2g})"
        for name, want in ref["expert_grads"].items():
            got = _dec((m.get("expert_grads") or {}).get(name) or {})
            rel = _rel(got, want[r * per:(r + 1) * per])
            if rel > tol:
                return (f"rank {r}: the gradient of its experts' {name} differs from one process (relative L2 "
                        f"{rel:.2g})")
    rel = _rel(router, ref["router_grad"])
    if rel > tol:
        return f"the router's gradient, summed over the ranks, differs from one process (relative L2 {rel:.2g})"
    return None


def _judge_traffic(n, ms, C) -> str | None:
    for phase, i, direction in (("forward", 0, "dispatch"), ("backward", 1, "combine")):
        predicted = expert_parallel_bytes_from_counts(C, D_MODEL, 4, backward=False)
        for r, m in enumerate(ms):
            counter = (m.get("counters") or [None, None])[i]
            if not isinstance(counter, dict):
                return f"rank {r} did not finish its {phase} pass"
            calls = counter.get("calls") or {}
            others = [c for c in built_in_collectives(calls) if c != "all_to_all"]
            if others or calls.get("send") or calls.get("recv"):
                what = ", ".join(others) or "send/recv"
                return (f"rank {r} uses {what} in the {phase} pass: only all-to-alls may move tokens (an all-gather "
                        f"would send every token to every rank, {n - 1} times the copies that need to travel)")
            tokens = _token_a2a(counter)
            if len(tokens) != 2:
                extra = ": no all-to-all in the backward pass" if phase == "backward" and not tokens else ""
                return (f"rank {r} issued {len(tokens)} all-to-all(s) of tokens in the {phase} pass, not two (one "
                        f"towards the experts, one back){extra}")
            sent = sum(int(a.get("sent", 0)) for a in tokens)
            if abs(sent - predicted[r]) > 0.5:
                return (f"rank {r} sent {sent:,} bytes in its {phase} all-to-alls; its routing needs "
                        f"{predicted[r]:,.0f} (each copy that leaves the rank once each way, {D_MODEL} float32 "
                        "elements, nothing padded)")
    return None


def _judge_wire(n, segments, C, num_experts: int) -> str | None:
    """The all-to-alls seen between the ranks in each pass against the routing's formula: only
    all-to-alls; per rank, every copy that leaves it once each way (plus, at most, the counts
    exchanged beside the tokens: an integer per expert, twice). None where no capture saw the
    traffic; where it passes, the ranks' own record of each all-to-all's splits decides the
    exact bytes."""
    phases = {s.get("point"): s["traffic"] for s in segments or [] if s["checkpoint"] == "phase"}
    if set(phases) != {"forward", "backward"}:
        return None
    predicted = expert_parallel_bytes_from_counts(C, D_MODEL, 4, backward=False)
    counts_bytes = 2 * 8 * num_experts  # at most two exchanges of int64 counts (one per expert) a pass
    for phase in ("forward", "backward"):
        for r, t in enumerate(phases[phase]):
            others = sorted(k for k in t["calls"] if k not in ("all_to_all", "barrier"))
            if others or t["p2p"]:
                what = ", ".join(others) or "send/recv"
                return (f"rank {r} uses {what} in the {phase} pass (seen between the ranks): only all-to-alls may "
                        f"move tokens (an all-gather would send every token to every rank, {n - 1} times the copies "
                        "that need to travel)")
            sent = t["collectives"].get("all_to_all", 0)
            if not predicted[r] <= sent <= predicted[r] + counts_bytes:
                extra = ": no all-to-all in the backward pass" if phase == "backward" and not sent else ""
                return (f"rank {r} sent {sent:,} bytes in its {phase} all-to-alls (seen between the ranks); its "
                        f"routing needs {predicted[r]:,.0f} (each copy that leaves the rank once each way, {D_MODEL} "
                        f"float32 elements, nothing padded){extra}")
    return None


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True, limits=None,
          isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`: ``AllToAll``, ``dispatch`` and
    ``combine``) at each world size; a Report. Each case runs and scores on its own
    (:func:`~assignments.common.run_cases`)."""
    from sandbox.multirank import Limits

    limits = limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=40.0)
    started = time.monotonic()
    report = Report(NAME)
    found = {part: [] for part in POINTS}
    missing = None
    tol = tolerance()
    program = rank_program("a6_rank:main", student, FUNCTIONS, quiet, extra=(("moe", rank_source("moe")),))
    for n in world_sizes:
        if any(layer(seed).num_experts % n for seed in seeds):
            raise ValueError(f"world size {n} must divide the number of experts of every case "
                             f"({', '.join(str(layer(seed).num_experts) for seed in seeds)})")
        cases = {seed: make_case(seed, salt, n) for seed in seeds}

        def payloads_for(indices, n=n, cases=cases):
            header = {"cases": indices, "layers": [asdict(cases[seeds[c]]["layer"]) for c in indices]}
            return [payload(header, [a for c in indices for a in rank_arrays(cases[seeds[c]], r, n)])
                    for r in range(n)]

        runs = run_cases(n, len(seeds), payloads_for, program, limits, isolate)
        report.ran(runs)
        missing = missing or runs.missing
        first = {part: None for part in POINTS}
        if runs.outside:
            first["traffic"] = f"n={n}: {runs.outside[0]}: tokens must travel by all-to-alls"
        for c, seed in enumerate(seeds):
            label = f"n={n}, {describe(seed)}"
            ranks = runs.messages[c]
            stopped = runs.stopped.get(c)
            if stopped and not any("error" in m for m in ranks.values()):
                for part in POINTS:
                    first[part] = first[part] or f"{label}: not finished ({stopped})"
                continue
            ms = [ranks.get(r, {"error": f"rank {r} stopped ({stopped or 'no report'})"}) for r in range(n)]
            shape = cases[seed]["layer"]
            try:
                ids = [np.asarray(m["ids"], dtype=np.int64).reshape(shape.tokens, shape.top_k) for m in ms]
            except (KeyError, TypeError, ValueError):
                ids = None
            if ids is None:
                for part in POINTS:
                    first[part] = first[part] or f"{label}: a rank reported no routing"
                continue
            forged = _judge_routing(cases[seed], ids, n)
            if forged:
                for part in POINTS:
                    first[part] = first[part] or f"{label}: {forged}"
                continue
            for m in ms:
                if "arrivals" in m:
                    m["arrivals"] = arrivals(cases[seed], m["arrivals"])
            C = routing_counts(ids, shape.num_experts, n)
            if any("error" in m for m in ms):
                text = _judge_error(n, ms, C)
                dispatch = _judge_dispatch(n, ms, ids, shape) if all("arrivals" in m for m in ms) else None
                for part in POINTS:
                    first[part] = first[part] or f"{label}: {dispatch if part == 'dispatch' and dispatch else text}"
                continue
            with one_thread():
                ref = reference(make_case(seed, salt, n), np.concatenate(ids))
            seen = runs.segments.get(c) if runs.wired else None
            wire = _judge_wire(n, seen, C, shape.num_experts)
            verdicts = {"dispatch": _judge_dispatch(n, ms, ids, shape), "combine": _judge_combine(ms, ref, tol, shape),
                        "backward": _judge_backward(n, ms, ref, tol, shape),
                        "traffic": wire or _judge_traffic(n, ms, C)}
            if verdicts["dispatch"] and verdicts["combine"]:
                verdicts["combine"] += " (copies went astray in the dispatch: see its part)"
            for part, text in verdicts.items():
                if text:
                    first[part] = first[part] or f"{label}: {text}"
        for part in POINTS:
            found[part].append(first[part])
    problems = {part: [v for v in found[part] if v] for part in POINTS}
    return finish_report(report, TITLES, POINTS, problems, missing, started)


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file; the data is drawn afresh unless ``salt`` is given."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def self_check(namespace: dict, world_sizes=WORLD_SIZES, seeds=SEEDS) -> float:
    """Run the grader, with its three seeds at world sizes 2 and 4, on ``AllToAll``,
    ``dispatch`` and ``combine`` as this notebook defines them (pass ``globals()``); the ranks
    are forked from this process. Prints the report, returns the score."""
    return run_self_check(grade, defined(namespace, FUNCTIONS), world_sizes, seeds)
