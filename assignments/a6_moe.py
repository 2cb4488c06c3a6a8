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
each. Every rank builds the case from the seed (and a salt drawn afresh each grading): a MoE
layer of ``labs.expert_parallel`` (router and SwiGLU experts), the tokens of every rank, and a
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
  them, counted by the course's collective counter, equal
  ``solutions.moe.expert_parallel_bytes_from_counts`` for the routing: every copy once each
  way, nothing padded, no token sent to every rank.
"""
from __future__ import annotations

import base64
import time
from collections import Counter

import numpy as np

from solutions.moe import expert_owner, expert_parallel_bytes_from_counts, routing_counts

from .common import (Report, built_in_collectives, defined, finish_report, first_cause, grade_submitted, load_names,
                     messages_by_case, one_thread, open_rank, payload, traffic_counter, warm_up)
from .common import self_check as run_self_check

NAME = "Assignment 6: expert-parallel dispatch and combine"
FUNCTIONS = ("AllToAll", "dispatch", "combine")
WORLD_SIZES = (2, 4)
#: Every rank holds the same number of experts: the world size must divide NUM_EXPERTS.
ALLOWED_WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
#: The layer graded (small: CPU ranks): width h, expert hidden width f, E experts, top-k.
D_MODEL, FFN_HIDDEN, NUM_EXPERTS, TOP_K = 8, 16, 8, 2
#: Tokens per rank.
TOKENS = 12
#: The routing bias of each case (by seed mod 3), added to the router's scores for the choice
#: only: towards the first experts, onto rank 0's experts alone, towards the last experts.
BIASES = ("first", "rank 0", "last")
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


def _config():
    from labs.expert_parallel import MoEConfig

    return MoEConfig(D_MODEL, FFN_HIDDEN, NUM_EXPERTS, TOP_K)


def routing_bias(seed: int, n: int):
    """The case's bias on the router's scores (a tensor of one entry per expert)."""
    import torch

    kind = BIASES[seed % len(BIASES)]
    if kind == "first":
        return torch.linspace(1.5, 0.0, NUM_EXPERTS)
    if kind == "last":
        return torch.linspace(0.0, 1.5, NUM_EXPERTS)
    bias = torch.zeros(NUM_EXPERTS)
    bias[: NUM_EXPERTS // n] = 10.0
    return bias


def make_case(seed: int, salt: int, n: int) -> dict:
    """The layer and the data of one case, the same in every process that builds it."""
    from labs.expert_parallel import make_layer

    W, experts, x, probe = make_layer(_config(), TOKENS, n, (seed * 1_000_003 + salt) % 2**31, "cpu")
    return {"router": W, "experts": experts, "x": x, "probe": probe, "bias": routing_bias(seed, n)}


def describe(seed: int) -> str:
    return f"seed {seed} (routing biased towards {BIASES[seed % len(BIASES)]} experts)".replace(
        "towards rank 0 experts", "onto rank 0's experts only")


# ----------------------------------------------------------------------------- tensors on the wire

def _enc(t):
    if t is None:
        return None
    a = np.ascontiguousarray(t.detach().float().cpu().numpy())
    return {"shape": list(a.shape), "data": base64.b64encode(a.tobytes()).decode()}


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


# ----------------------------------------------------------------------------- inside a rank

def _arrivals(rows, row_experts, x_all) -> list:
    """``[source rank, token, expert]`` of every row a rank's experts received: each row is
    recognised by its bytes among every rank's tokens (an all-to-all copies them exactly);
    ``[-1, -1, expert]`` for a row that is no token."""
    import torch

    known = {x_all[i].numpy().tobytes(): i for i in range(x_all.shape[0])}
    rows32 = rows.detach().to(torch.float32).cpu()
    experts = row_experts.detach().cpu().reshape(-1).tolist()
    found = []
    for i in range(rows32.shape[0]):
        t = known.get(rows32[i].numpy().tobytes(), -1)
        found.append([t // TOKENS if t >= 0 else -1, t % TOKENS if t >= 0 else -1, int(experts[i])])
    return found


def _check_returned(rows, row_experts):
    """Why what ``dispatch`` returned cannot be run, or None."""
    import torch

    if not isinstance(rows, torch.Tensor) or rows.dim() != 2 or rows.shape[1] != D_MODEL:
        return f"dispatch must return rows as a (copies, {D_MODEL}) tensor, got {type(rows).__name__} " \
               f"{tuple(getattr(rows, 'shape', ()))}"
    if not isinstance(row_experts, torch.Tensor) or row_experts.dtype not in (torch.int64, torch.int32) \
            or row_experts.reshape(-1).shape[0] != rows.shape[0]:
        return "dispatch must return row_experts as an integer tensor with one global expert id per row"
    return None


def _run_case(fns, case: dict, rank: int, n: int) -> dict:
    import torch

    from labs.expert_parallel import LocalExperts, route

    mine = slice(rank * TOKENS, (rank + 1) * TOKENS)
    x = case["x"][mine].clone().requires_grad_(True)
    W = case["router"].clone().requires_grad_(True)
    ids, gates = route(x, W, TOP_K, case["bias"])
    ids = ids.detach()
    local = LocalExperts(case["experts"], _config(), rank, n)
    message = {"ids": ids.tolist()}
    fwd = bwd = None
    try:
        with traffic_counter() as fwd:
            rows, row_experts, plan = fns["dispatch"](x, ids.clone(), NUM_EXPERTS)
            why = _check_returned(rows, row_experts)
            if why:
                raise TypeError(why)
            row_experts = row_experts.reshape(-1).to(torch.int64)
            message["arrivals"] = _arrivals(rows, row_experts, case["x"])
            held = (row_experts >= local.first) & (row_experts < local.first + local.count)
            if not bool(held.all()):
                raise LookupError(f"rank {rank} received rows for expert {int(row_experts[~held][0])}, which it does "
                                  "not hold")
            out = local(rows.to(torch.float32), row_experts)
            y = fns["combine"](out, gates, plan)
        message["y"] = _enc(y) if isinstance(y, torch.Tensor) else None
        if not isinstance(y, torch.Tensor) or not y.requires_grad:
            raise TypeError("combine must return a tensor that autograd can differentiate (use the gates, and an "
                            "all-to-all that autograd sees)")
        with traffic_counter() as bwd:
            (y * case["probe"][mine]).sum().backward()
    except NotImplementedError as exc:
        message.update(error="NotImplementedError", message=str(exc)[:200])
    except Exception as exc:  # noqa: BLE001 - the student's code
        message["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    message["counters"] = [{"calls": dict(c.calls), "all_to_all": list(c.all_to_all)} if c is not None else None
                           for c in (fwd, bwd)]
    if "error" not in message:
        message["x_grad"] = _enc(x.grad)
        message["router_grad"] = _enc(W.grad)
        message["expert_grads"] = {name: _enc(getattr(local, name).grad) for name in ("w1", "w3", "w2")}
    return message


def _rank_main(get_functions, quiet):
    def main(rank, n, data, report):
        opened = open_rank(data, get_functions, report, quiet)
        if opened is None:
            return
        header, _, fns = opened
        for index, spec in enumerate(header["cases"]):
            message = _run_case(fns, make_case(spec["seed"], header["salt"], n), rank, n)
            report(dict(message, case=index))
            if "error" in message:
                return  # the other ranks may wait for this one: stop here
    return main


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
        _, gates = route(x, W, TOP_K, expert_ids=ids)
    return {"y": y.detach().double().numpy(), "ungated": ungated.double().numpy(),
            "x_grad": x.grad.double().numpy(), "router_grad": W.grad.double().numpy(),
            "expert_grads": {name: getattr(experts, name).grad.double().numpy() for name in ("w1", "w3", "w2")},
            "gates": gates.double().numpy()}


def _rel(got, want) -> float:
    if got is None or got.shape != want.shape:
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


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


def _judge_dispatch(n, ms, ids) -> str | None:
    per = NUM_EXPERTS // n
    for r, m in enumerate(ms):
        got = Counter()
        for entry in m.get("arrivals") or []:
            if not (isinstance(entry, list) and len(entry) == 3 and all(isinstance(v, int) for v in entry)):
                return f"rank {r} reported no arrivals"
            got[tuple(entry)] += 1
        want = Counter((s, t, int(e)) for s in range(n) for t in range(TOKENS) for e in ids[s][t]
                       if int(expert_owner(int(e), NUM_EXPERTS, n)) == r)
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


def _judge_combine(ms, ref, tol) -> str | None:
    for r, m in enumerate(ms):
        y = _dec(m.get("y") or {})
        want = ref["y"][r * TOKENS:(r + 1) * TOKENS]
        if y is None or y.shape != want.shape:
            return f"rank {r}'s combine returned shape {None if y is None else y.shape}, not ({TOKENS}, {D_MODEL})"
        if _rel(y, want) > tol:
            if _rel(y, ref["ungated"][r * TOKENS:(r + 1) * TOKENS]) <= tol:
                return ("the output is the plain sum of each token's expert outputs: the combine ran without the "
                        "router's weights (multiply each copy's output by its gate before summing it into its token)")
            return f"rank {r}: the output differs from one process (relative L2 {_rel(y, want):.2g})"
    return None


def _judge_backward(n, ms, ref, tol) -> str | None:
    per = NUM_EXPERTS // n
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
        rel = _rel(_dec(m.get("x_grad") or {}), ref["x_grad"][r * TOKENS:(r + 1) * TOKENS])
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


def grade(get_functions, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True, limits=None,
          isolate=True) -> Report:
    """Grade ``get_functions()`` (called inside each rank, returning ``FUNCTIONS``) at each
    world size; a Report."""
    from sandbox.multirank import Limits, run_ranks

    from labs import expert_parallel  # noqa: F401  (imported here once: the ranks are forked from us)

    limits = limits or Limits(wall_s=40.0, stall_s=5.0)
    warm_up()
    started = time.monotonic()
    report = Report(NAME)
    found = {part: [] for part in POINTS}
    missing = None
    tol = tolerance()
    for n in world_sizes:
        if NUM_EXPERTS % n:
            raise ValueError(f"world size {n} must divide the {NUM_EXPERTS} experts")
        specs = [{"seed": s} for s in seeds]
        group = run_ranks(n, _rank_main(get_functions, quiet), [payload({"cases": specs, "salt": salt}, [])] * n,
                          limits, isolate=isolate, prepare=warm_up)
        report.isolated = group.isolated and report.isolated is not False
        by_case, missing = messages_by_case(group, len(specs), missing)
        first = {part: None for part in POINTS}
        for c, seed in enumerate(seeds):
            label = f"n={n}, {describe(seed)}"
            ranks = by_case[c]
            if len(ranks) < n and not any("error" in m for m in ranks.values()):
                why = group.detail if not group.ok else "some ranks reported nothing"
                for part in POINTS:
                    first[part] = first[part] or f"{label}: not finished ({why})"
                break
            ms = [ranks.get(r, {"error": f"rank {r} stopped ({group.detail or 'no report'})"}) for r in range(n)]
            try:
                ids = [np.asarray(m["ids"], dtype=np.int64).reshape(TOKENS, TOP_K) for m in ms]
            except (KeyError, TypeError, ValueError):
                ids = None
            if ids is None:
                for part in POINTS:
                    first[part] = first[part] or f"{label}: a rank reported no routing"
                break
            C = routing_counts(ids, NUM_EXPERTS, n)
            if any("error" in m for m in ms):
                text = _judge_error(n, ms, C)
                dispatch = _judge_dispatch(n, ms, ids) if all("arrivals" in m for m in ms) else None
                for part in POINTS:
                    first[part] = first[part] or f"{label}: {dispatch if part == 'dispatch' and dispatch else text}"
                break  # the ranks stopped at this case
            with one_thread():
                ref = reference(make_case(seed, salt, n), np.concatenate(ids))
            verdicts = {"dispatch": _judge_dispatch(n, ms, ids), "combine": _judge_combine(ms, ref, tol),
                        "backward": _judge_backward(n, ms, ref, tol), "traffic": _judge_traffic(n, ms, C)}
            if verdicts["dispatch"] and verdicts["combine"]:
                verdicts["combine"] += " (copies went astray in the dispatch: see its part)"
            for part, text in verdicts.items():
                if text:
                    first[part] = first[part] or f"{label}: {text}"
        if not group.ok and group.detail and not any(group.detail in (v or "") for v in first.values()):
            for part in POINTS:
                if first[part]:
                    first[part] += f" [{group.detail}]"
                    break
        for part in POINTS:
            found[part].append(first[part])
    problems = {part: [v for v in found[part] if v] for part in POINTS}
    return finish_report(report, TITLES, POINTS, problems, missing, started)


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file; the data is drawn afresh unless ``salt`` is given."""
    return grade_submitted(path, NAME, TITLES, POINTS, lambda sources: load_names(sources, FUNCTIONS), grade, **kwargs)


def self_check(namespace: dict, world_sizes=WORLD_SIZES, seeds=SEEDS) -> float:
    """Run the grader, with its three seeds at world sizes 2 and 4, on ``AllToAll``,
    ``dispatch`` and ``combine`` as this notebook defines them (pass ``globals()``); the ranks
    are forked from this process. Prints the report, returns the score."""
    functions = defined(namespace, FUNCTIONS)
    return run_self_check(grade, lambda: functions, world_sizes, seeds)
