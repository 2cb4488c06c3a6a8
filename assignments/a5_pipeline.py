"""Assignment 5's grader: a 1F1B pipeline schedule, written and run by hand.

The student writes two functions:

* ``one_f_one_b(p, m, stage)``: the passes stage ``stage`` of a ``p``-stage pipeline runs
  for ``m`` micro-batches, in order, as ``[("F", i) | ("B", i), ...]``: the 1F1B schedule
  (PipeDream-Flush; Narayanan et al. 2021, sec. 2.2.1 and Fig. 4 top);
* ``pipeline_step(stage_module, num_microbatches, activation_shape, inputs=None,
  targets=None, loss_fn=None)``: one training step on this rank's stage in that order,
  activations sent to the next stage and gradients back to the previous one with
  ``torch.distributed`` point-to-point operations; returns the step's loss (the mean of the
  micro-batch losses) on the last stage, ``None`` elsewhere.

What is checked:

* **the order**, for ``p`` of 1 to 6 and several ``m`` (``m < p`` too), every stage: each
  pass once and every backward after its forward; the stages agree (messages between two
  ranks arrive in the order they were sent, so stage ``s + 1`` must take its forward passes
  in stage ``s``'s order, and stage ``s`` its backward passes in stage ``s + 1``'s; and
  simulated, no stage waits forever: ``solutions.pipeline.simulate_orders``); at most
  ``p - stage`` micro-batches in flight (``peak_in_flight``; GPipe stashes all ``m``); the
  bubble of the simulated schedule (equal stages, a backward twice a forward) equal to
  ``bubble_fraction(p, m)`` = ``(p-1)/(m+p-1)``;
* **the run**, at world sizes 2 and 4 and three seeds, on ``labs.pipeline_parallel.Stage``
  of a small ``labs.model.GPT``: the passes each stage really ran (seen by a wrapper of the
  stage module, which recognises each micro-batch by its data) form a valid 1F1B order, and
  each received activation and gradient is the micro-batch's the pass is for; between the
  ranks (``sandbox.wire``, which the submission cannot rewrite as it could the log inside its
  rank), each activation and gradient is sent once and no stage ``s`` runs more than
  ``p - s`` activations ahead of the gradients that came back; the loss and
  every stage's gradients equal the single-process model's on the same micro-batches within
  ``labs.pipeline_parallel.TOLERANCE`` (relative L2). A rank that waits for a message that
  never comes is named with its call (``rank 0 hung in recv after 5 s``).
"""
from __future__ import annotations

import base64
import time

import numpy as np

from solutions.pipeline import bubble_fraction, idle_fraction, peak_in_flight, simulate_orders

from .a5_rank import FINGERPRINT_VALUES, MICRO_BATCH, MODEL, build_case, case_seed, fingerprint, loss_of
from .common import (Report, defined, finish_report, grade_submitted, one_thread, rank_program,
                     rank_source, run_cases, seeded)
from .common import payload as make_payload
from .common import self_check as run_self_check

NAME = "Assignment 5: a 1F1B pipeline schedule"
FUNCTIONS = ("one_f_one_b", "pipeline_step")
WORLD_SIZES = (2, 4)
#: One stage per rank, the same number of blocks each: the world size must divide n_layer.
ALLOWED_WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
#: Pipelines whose order is checked: p stages (one too: the statement asks for any p >= 1),
#: m micro-batches.
ORDER_STAGES = (1, 2, 3, 4, 5, 6)
POINTS = {"passes": 2, "agree": 1, "memory": 2, "bubble": 1, "run_order": 1, "run_result": 3}
TITLES = {
    "passes": "order: every pass once, each backward after its forward",
    "agree": "order: the stages agree (messages in the order sent, no stage waits forever)",
    "memory": "order: at most p - stage micro-batches in flight",
    "bubble": "order: bubble = (p-1)/(m+p-1)",
    "run_order": "run: the passes and messages follow a valid 1F1B",
    "run_result": "run: loss and gradients equal one process",
}
ORDER_PARTS = ("passes", "agree", "memory", "bubble")
#: The known mistakes, by name, and words that only their feedback holds (for a class
#: report's count of who made each).
MISTAKES = {
    "GPipe's order (stashes all m micro-batches)": "as GPipe's order does",
    "more micro-batches in flight than p - stage": "1F1B holds at most",
    "a backward before its forward": "runs a backward before its forward",
    "a wrong send order": "(a wrong send order)",
    "loss not divided by m": "divide each micro-batch's loss by m",
    "a warm-up of the wrong length (a larger bubble)": "forward passes before the first backward",
    "a deadlock (a rank hung in a blocking call)": " hung in ",
}


def order_grid() -> list:
    """``(p, m)`` pairs whose orders are checked: fewer, as many and more micro-batches
    than stages (at least one)."""
    return [(p, m) for p in ORDER_STAGES for m in sorted({1, 2, p - 1, p, p + 1, 2 * p + 1} - {0})]


def microbatches(p: int, seed: int) -> int:
    """``m`` of the run for ``p`` stages and a seed: more, as many and fewer than ``p``."""
    return (2 * p + 1, p, max(1, p - 1))[seed % 3]


def tolerance() -> float:
    from labs.pipeline_parallel import TOLERANCE

    return TOLERANCE


# ----------------------------------------------------------------------------- checking an order

def _as_order(raw, m) -> tuple[list, str | None]:
    """``[(phase, i)]`` from what a rank reported, or the reason it is not one."""
    if not isinstance(raw, list):
        return [], f"returned {type(raw).__name__}, not a list of ('F' | 'B', micro-batch)"
    out = []
    for item in raw:
        if (not isinstance(item, (list, tuple)) or len(item) != 2 or item[0] not in ("F", "B")
                or not isinstance(item[1], int) or isinstance(item[1], bool) or not 0 <= item[1] < m):
            return [], f"holds {str(item)[:40]}, not ('F' | 'B', micro-batch in 0..{m - 1})"
        out.append((item[0], item[1]))
    return out, None


def check_orders(p: int, m: int, orders: list) -> dict:
    """``{part: problem or None}`` for the per-stage ``orders`` of a ``p``-stage pipeline on
    ``m`` micro-batches (parts of ``ORDER_PARTS``; a part that cannot be judged because an
    earlier one failed says so)."""
    where = f"p={p}, m={m}"
    verdict = {part: None for part in ORDER_PARTS}
    skipped = f"{where}: not checked (the order is not valid)"
    for s, order in enumerate(orders):
        seen = set()
        for phase, i in order:
            if (phase, i) in seen:
                verdict["passes"] = f"{where}: stage {s} runs {phase}({i}) twice"
                break
            if phase == "B" and ("F", i) not in seen:
                verdict["passes"] = (f"{where}: stage {s} runs a backward before its forward: B({i}) comes "
                                     f"before F({i})")
                break
            seen.add((phase, i))
        else:
            absent = [f"{ph}({i})" for i in range(m) for ph in "FB" if (ph, i) not in seen]
            if absent:
                verdict["passes"] = f"{where}: stage {s} never runs {', '.join(absent[:3])}"
        if verdict["passes"]:
            break
    if verdict["passes"]:
        return dict(verdict, agree=skipped, memory=skipped, bubble=skipped)
    for s in range(p - 1):
        sends = [i for ph, i in orders[s] if ph == "F"]
        takes = [i for ph, i in orders[s + 1] if ph == "F"]
        if sends != takes:
            verdict["agree"] = (f"{where}: stage {s} sends its activations in the order {sends[:6]} but stage "
                                f"{s + 1} receives them in the order {takes[:6]}: messages between two ranks "
                                "arrive in the order they are sent (a wrong send order)")
            break
        sends = [i for ph, i in orders[s + 1] if ph == "B"]
        takes = [i for ph, i in orders[s] if ph == "B"]
        if sends != takes:
            verdict["agree"] = (f"{where}: stage {s + 1} sends its gradients in the order {sends[:6]} but stage "
                                f"{s} receives them in the order {takes[:6]}: messages between two ranks arrive "
                                "in the order they are sent (a wrong send order)")
            break
    try:
        events = simulate_orders(orders)
    except ValueError as exc:
        verdict["agree"] = verdict["agree"] or f"{where}: {exc}"
        events = None
    if events is None:
        return dict(verdict, memory=skipped, bubble=skipped)
    for s in range(p):
        peak = peak_in_flight(events, s)
        if peak > p - s:
            gpipe = [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
            why = (": all m, as GPipe's order does (every forward, then every backward)"
                   if orders[s] == gpipe else "")
            verdict["memory"] = (f"{where}: stage {s} holds {peak} micro-batches at once{why}; 1F1B holds at most "
                                 f"p - stage = {p - s}, starting its backward passes after p - stage - 1 = "
                                 f"{p - s - 1} forward passes")
            break
    bubble, want = idle_fraction(events), float(bubble_fraction(p, m))
    if abs(bubble - want) > 1e-9:
        warmups = [next((k for k, (ph, _) in enumerate(o) if ph == "B"), len(o)) for o in orders]
        verdict["bubble"] = (f"{where}: the stages are idle {bubble:.3f} of the time, (p-1)/(m+p-1) = {want:.3f} "
                             f"(a backward pass twice a forward); forward passes before the first backward, by "
                             f"stage: {warmups}, 1F1B's: {[min(p - s, m) for s in range(p)]}")
    return verdict


# ----------------------------------------------------------------------------- the model and the baseline

def make_case(seed: int, salt: int, m: int):
    """``(model, inputs, targets)``: the unsplit model and ``m`` micro-batches of token ids,
    the same as every rank builds (:func:`.a5_rank.build_case`, seeded apart from other
    grading threads)."""
    with seeded(case_seed(seed, salt)):
        return build_case(m)


def baseline(seed: int, salt: int, p: int, m: int) -> dict:
    """The single-process step: every micro-batch through the whole model, loss ``sum of
    loss_i / m``. Returns the loss, each stage's parameter gradients (flattened, in the
    order of ``Stage(...).parameters()``), and per stage and micro-batch the stage's input
    and the gradient of its output (how the grader recognises micro-batches in a run)."""
    import torch

    from labs.pipeline_parallel import Stage

    model, xs, ys = make_case(seed, salt, m)
    stages = [Stage(model, s, p) for s in range(p)]
    inputs = [[None] * m for _ in range(p)]
    out_grads = [[None] * m for _ in range(p)]
    total = 0.0
    for i in range(m):
        h, outs = xs[i], []
        for s, stage in enumerate(stages):
            h = h.detach().requires_grad_(True) if s else h
            inputs[s][i] = h
            outs.append(stage(h))
            outs[-1].retain_grad()
            h = outs[-1]
        loss = loss_of(outs[-1], ys[i]) / m
        total += loss.item()
        loss.backward()
        for s in reversed(range(p)):
            out_grads[s][i] = outs[s].grad.detach().clone()
            if s:
                outs[s - 1].backward(inputs[s][i].grad)
    grads = [torch.cat([q.grad.reshape(-1) for q in stage.parameters()]).numpy().astype(np.float64)
             for stage in stages]
    return {"loss": total, "grads": grads, "inputs": [[t.detach() for t in row] for row in inputs],
            "out_grads": out_grads}


# ----------------------------------------------------------------------------- the grader's side

def _which(got, candidates) -> int:
    """The index of the tensor among ``candidates`` whose fingerprint (:func:`.a5_rank.fingerprint`)
    ``got`` is, or -1 (what a rank reports is checked against the grader's own tensors): the
    closest within 1e-4 relative (1e-6 absolute), not the first. The last stage's output
    gradients of an untrained model are nearly alike from one micro-batch to the next (their
    sum is 0, their absolute sum about 2/m): taking the first within tolerance sometimes
    named another micro-batch's, and told a correct 1F1B its send order was wrong."""
    if not isinstance(got, list) or len(got) > FINGERPRINT_VALUES + 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in got):
        return -1
    best, best_error = -1, 1.0
    for i, want in enumerate(candidates):
        expected = np.asarray(fingerprint(want))
        if len(expected) == len(got):
            error = float(np.max(np.abs(np.asarray(got) - expected) / (1e-6 + 1e-4 * np.abs(expected))))
            if error <= best_error:
                best, best_error = i, error
    return best


def _judge_run(n, m, ms, ref, tol):
    """``(order problem, result problem)`` of one run case (all ranks reported)."""
    where = f"p={n}, m={m}"
    order_problem = result_problem = None
    # A rank whose peer crashed fails too ("Connection reset by peer"): name the first cause.
    errors = sorted(((r, msg["error"]) for r, msg in enumerate(ms) if "error" in msg),
                    key=lambda e: ("Connection" in e[1] or "gloo" in e[1], e[0]))
    if errors:
        r, e = errors[0]
        text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
        return f"{where}: {text}", f"{where}: {text}"
    executed, forward_of = [], []
    for s, msg in enumerate(ms):
        order, which = [], {}
        log = msg.get("log") if isinstance(msg.get("log"), list) else []
        for k, entry in enumerate(log):
            if not isinstance(entry, list) or not entry or entry[0] not in ("F", "B"):
                continue
            if entry[0] == "F":
                i = which[k] = _which(entry[1] if len(entry) > 1 else None, ref["inputs"][s])
                if i < 0:
                    order_problem = order_problem or (
                        f"{where}: stage {s} ran a forward pass on data that is no micro-batch's input (a wrong "
                        "send order upstream, or a buffer received into the wrong place)")
                order.append(("F", i))
                continue
            i = which.get(entry[1], -1) if len(entry) > 2 and isinstance(entry[1], int) else -1
            got = entry[2] if len(entry) > 2 else None
            j = _which(got, ref["out_grads"][s])
            if j != i and i >= 0:
                if _which(got, [m * ref["out_grads"][s][i]]) == 0:
                    result_problem = result_problem or (
                        f"{where}: stage {s}'s gradients are m = {m} times too large: divide each micro-batch's "
                        "loss by m (the step's loss is their mean)")
                elif j >= 0:
                    order_problem = order_problem or (
                        f"{where}: stage {s} ran micro-batch {i}'s backward pass with micro-batch {j}'s "
                        f"gradient: stage {s + 1} sends its gradients in another order than stage {s} receives them "
                        "(a wrong send order)")
            order.append(("B", i))
        executed.append(order)
        forward_of.append(which)
    for s, msg in enumerate(ms):
        for pair in msg.get("pairs") or []:
            if isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], int):
                pair = [forward_of[s].get(pair[0], -1), pair[1]]
            if isinstance(pair, list) and len(pair) == 2 and pair[0] != pair[1]:
                order_problem = order_problem or (
                    f"{where}: the last stage computed micro-batch {pair[0]}'s loss against micro-batch {pair[1]}'s "
                    "targets: the activations arrived in another order than it receives them (a wrong send order)")
                break
    if order_problem is None:
        if any(i < 0 for order in executed for _, i in order):
            order_problem = f"{where}: a pass ran on data that is no micro-batch's"
        else:
            verdict = check_orders(n, m, executed)
            bad = [v for v in verdict.values() if v]
            if bad:
                order_problem = f"the passes as run: {bad[0]}"
    last = ms[-1]
    loss = last.get("loss")
    if not isinstance(loss, (int, float)) or isinstance(loss, bool):
        result_problem = result_problem or (f"{where}: the last stage returned {str(loss)[:30]}, not the step's "
                                            "loss (the sum of the micro-batch losses divided by m)")
    elif abs(loss - ref["loss"]) > tol * max(1.0, abs(ref["loss"])):
        why = ": divide each micro-batch's loss by m" if abs(loss - m * ref["loss"]) <= tol * m * abs(ref["loss"]) else ""
        result_problem = result_problem or f"{where}: the loss is {loss:.6g}, one process's {ref['loss']:.6g}{why}"
    for s, msg in enumerate(ms):
        want = ref["grads"][s]
        if msg.get("no_grad"):
            result_problem = result_problem or f"{where}: {msg['no_grad']} parameters of stage {s} got no gradient"
            break
        try:
            got = np.frombuffer(base64.b64decode(msg.get("grads", ""), validate=True), dtype=np.float32)
        except (ValueError, TypeError):
            got = np.zeros(0, dtype=np.float32)
        if got.size != want.size:
            result_problem = result_problem or f"{where}: stage {s} reported no gradients"
            break
        rel = float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))
        if rel > tol:
            scaled = float(np.linalg.norm(got - m * want) / max(np.linalg.norm(m * want), 1e-30)) <= tol
            result_problem = result_problem or (
                f"{where}: stage {s}'s gradients differ from one process (relative L2 {rel:.2g})"
                + (f": they are m = {m} times too large, divide each micro-batch's loss by m" if scaled and m > 1 else ""))
            break
    return order_problem, result_problem


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`: ``one_f_one_b`` and
    ``pipeline_step``) at each world size; a Report. The grid of orders (at the first world
    size) and each run case score on their own (:func:`~assignments.common.run_cases`)."""
    from sandbox.multirank import Limits

    limits = limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=40.0)
    started = time.monotonic()
    report = Report(NAME)
    found = {part: [] for part in POINTS}
    missing = None
    tol = tolerance()
    extra = (("model", rank_source("model")), ("stage", rank_source("stage")))
    program = rank_program("a5_rank:main", student, FUNCTIONS, quiet, extra=extra)
    for k, n in enumerate(world_sizes):
        runs_of = (["grid"] if k == 0 else []) + [{"seed": s, "m": microbatches(n, s)} for s in seeds]
        header = {"runs": runs_of, "grid": order_grid()}

        def payloads_for(indices, n=n, header=header, runs_of=runs_of):
            per_rank = [[] for _ in range(n)]
            for c in indices:
                if runs_of[c] != "grid":
                    for r, arrays in enumerate(stage_data(runs_of[c]["seed"], salt, n, runs_of[c]["m"])):
                        per_rank[r] += arrays
            return [make_payload(dict(header, cases=indices), per_rank[r]) for r in range(n)]

        runs = run_cases(n, len(runs_of), payloads_for, program, limits, isolate)
        report.ran(runs)
        missing = missing or runs.missing
        if k == 0:
            if 0 in runs.stopped:
                found_orders = {part: f"one_f_one_b: not finished ({runs.stopped[0]})" for part in ORDER_PARTS}
            else:
                found_orders = _judge_order_grid(runs.messages[0].get(0, {}).get("orders"))
            for part in ORDER_PARTS:
                found[part].append(found_orders[part])
        first = {"run_order": None, "run_result": None}
        for c, spec in enumerate(runs_of):
            if spec == "grid":
                continue
            where = f"p={n}, m={spec['m']}"
            if c in runs.stopped:
                for part in first:
                    first[part] = first[part] or f"{where}: not finished ({runs.stopped[c]})"
                continue
            with one_thread():
                ref = baseline(spec["seed"], salt, n, spec["m"])
            order_problem, result_problem = _judge_run(n, spec["m"], [runs.messages[c][r] for r in range(n)], ref, tol)
            seen = runs.traffic(c) if runs.wired else None
            if not any("error" in runs.messages[c][r] for r in range(n)):  # (a rank that raised sent less)
                order_problem = (_judge_wire(n, spec["m"], seen) or _judge_wire_order(n, spec["m"], seen)
                                 or order_problem)
            first["run_order"] = first["run_order"] or order_problem
            first["run_result"] = first["run_result"] or result_problem
        for part, text in first.items():
            found[part].append(text)
    problems = {part: [v for v in found[part] if v] for part in POINTS}
    return finish_report(report, TITLES, POINTS, problems, missing, started)


def stage_data(seed: int, salt: int, p: int, m: int) -> list:
    """Per rank, what it gets of one run case (float32 arrays): its stage's parameters, in the
    order of ``Stage(...).parameters()``; the micro-batches' token ids on the first stage and
    their targets on the last. No rank gets another stage's weights or data."""
    from labs.pipeline_parallel import Stage

    model, xs, ys = make_case(seed, salt, m)
    out = []
    for r in range(p):
        arrays = [np.concatenate([q.detach().reshape(-1).numpy() for q in Stage(model, r, p).parameters()])]
        if r == 0:
            arrays.append(np.stack([x.numpy() for x in xs]).astype(np.float32).reshape(-1))
        if r == p - 1:
            arrays.append(np.stack([y.numpy() for y in ys]).astype(np.float32).reshape(-1))
        out.append(arrays)
    return out


def _judge_wire(p: int, m: int, seen) -> str | None:
    """The bytes each stage sent its neighbours, seen between the ranks: a pipeline step sends
    each micro-batch's activation forward once and its gradient back once, and nothing else
    (None where no capture saw the traffic)."""
    if seen is None:
        return None
    size = MICRO_BATCH * MODEL["block_size"] * MODEL["d_model"] * 4
    for s, t in enumerate(seen):
        others = sorted(k for k in t["calls"] if k != "barrier")
        if others:
            return (f"p={p}, m={m}: stage {s} called {', '.join(others)} (seen between the ranks): a pipeline's "
                    "stages exchange activations and gradients with dist.send/recv (isend/irecv) only")
        want = ((s < p - 1) + (s > 0)) * m * size
        if t["p2p"] != want:
            return (f"p={p}, m={m}: stage {s} sent {t['p2p']:,} bytes to its neighbours (seen between the ranks); "
                    f"a step sends each micro-batch's activation forward and its gradient back once: {want:,} "
                    f"({m} x {size:,} bytes per direction)")
    return None


def _judge_wire_order(p: int, m: int, seen) -> str | None:
    """1F1B's bound on the micro-batches in flight, seen between the ranks: before stage ``s``
    (not the last) sends the activation of its forward pass ``w + j + 1`` (after its
    ``w = p - s - 1`` warm-up passes), it has run backward pass ``j``, for which stage ``s + 1``'s
    gradient must have arrived. So at any moment of the group's traffic, the activations
    stage ``s`` has sent exceed the gradients it has received by at most ``min(p - s, m)``
    micro-batches (GPipe's order sends all ``m`` first). Counted in bytes, so that a tensor sent
    in pieces counts the same. Unlike the passes the stage module logs inside a rank, the
    wire cannot be rewritten by the submission. None where no capture listed the sends."""
    if seen is None or any(not isinstance(t.get("sends"), list) for t in seen):
        return None
    flooded = next((s for s, t in enumerate(seen) if t.get("unlisted")), None)
    if flooded is not None:  # (a step sends 2 m messages; the capture lists thousands)
        return (f"p={p}, m={m}: stage {flooded} sent more point-to-point messages than the grader lists "
                f"({len(seen[flooded]['sends']):,}; seen between the ranks): a step sends each micro-batch's "
                "activation forward and its gradient back once")
    size = MICRO_BATCH * MODEL["block_size"] * MODEL["d_model"] * 4
    for s in range(p - 1):
        events = sorted([(packet, nbytes) for packet, to, nbytes in seen[s]["sends"] if to == s + 1]
                        + [(packet, -nbytes) for packet, to, nbytes in seen[s + 1]["sends"] if to == s])
        ahead = peak = 0
        for _, nbytes in events:  # (a gradient that arrives with an activation's packet number counts first)
            ahead += nbytes
            peak = max(peak, ahead)
        bound = min(p - s, m)
        if peak > bound * size:
            return (f"p={p}, m={m}: stage {s} had sent {peak / size:g} micro-batches' activations whose gradients "
                    f"had not come back (seen between the ranks); 1F1B has at most p - stage = {bound} in flight"
                    + (" (as GPipe's order does: every forward, then every backward)" if peak >= m * size else ""))
    return None


def _judge_order_grid(orders) -> dict:
    """The first problem of each order part over the whole grid (None: all passed). Each
    pipeline ``(p, m)`` is judged on its own: where an order is not valid (a pass missing,
    twice, or a backward before its forward) only ``passes`` is lost there; the other parts
    are judged on the valid ones (so a 1F1B wrong only for m < p - 1 loses the 2 points of
    ``passes``, less than GPipe's order loses for its memory)."""
    first = {part: None for part in ORDER_PARTS}
    if not isinstance(orders, dict):
        why = orders if isinstance(orders, str) else "one_f_one_b was not run"
        return {part: f"one_f_one_b: {why}" for part in ORDER_PARTS}
    judged = 0
    for p, m in order_grid():
        row = orders.get(f"{p},{m}")
        if row == "NotImplementedError":
            return {part: "one_f_one_b: not implemented yet" for part in ORDER_PARTS}
        if isinstance(row, str) or not isinstance(row, list) or len(row) != p:
            stage, _, error = row.partition(": ") if isinstance(row, str) else ("", "", "")
            if isinstance(row, str) and stage.startswith("stage ") and stage[6:].isdigit():
                why = f"one_f_one_b({p}, {m}, {stage[6:]}) raised {error}"
            else:
                why = f"one_f_one_b raised {row}" if isinstance(row, str) else "no order"
            first["passes"] = first["passes"] or f"p={p}, m={m}: {why}"
            continue
        parsed, bad = [], None
        for s, raw in enumerate(row):
            order, why = _as_order(raw, m)
            bad = bad or (f"p={p}, m={m}: stage {s}'s order {why}" if why else None)
            parsed.append(order)
        if bad:
            first["passes"] = first["passes"] or bad
            continue
        verdict = check_orders(p, m, parsed)
        if verdict["passes"]:
            first["passes"] = first["passes"] or verdict["passes"]
            continue
        judged += 1
        for part, text in verdict.items():
            first[part] = first[part] or text
    if not judged:
        for part in ORDER_PARTS[1:]:
            first[part] = first[part] or "not checked: no pipeline's order was valid"
    return first


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file; the data is drawn afresh unless ``salt`` is
    given."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def self_check(namespace: dict, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``one_f_one_b`` and ``pipeline_step`` as this notebook defines them
    (pass ``globals()``); prints the report, returns the score."""
    return run_self_check(grade, defined(namespace, FUNCTIONS), world_sizes, seeds)
