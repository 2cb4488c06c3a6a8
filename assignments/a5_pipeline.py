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

* **the order**, for ``p`` of 2 to 6 and several ``m`` (``m < p`` too), every stage: each
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
  each received activation and gradient is the micro-batch's the pass is for; the loss and
  every stage's gradients equal the single-process model's on the same micro-batches within
  ``labs.pipeline_parallel.TOLERANCE`` (relative L2). A rank that waits for a message that
  never comes is named with its call (``rank 0 hung in recv after 5 s``).
"""
from __future__ import annotations

import base64
import time

import numpy as np

from solutions.pipeline import bubble_fraction, idle_fraction, peak_in_flight, simulate_orders

from .common import (Report, defined, finish_report, grade_submitted, load_names, messages_by_case, one_thread,
                     open_rank, payload, warm_up)
from .common import self_check as run_self_check

NAME = "Assignment 5: a 1F1B pipeline schedule"
FUNCTIONS = ("one_f_one_b", "pipeline_step")
WORLD_SIZES = (2, 4)
#: One stage per rank, the same number of blocks each: the world size must divide n_layer.
ALLOWED_WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
#: The model the run trains one step of (small: CPU ranks); b sequences per micro-batch.
MODEL = {"vocab_size": 32, "block_size": 8, "n_layer": 4, "n_head": 2, "d_model": 16}
MICRO_BATCH = 2
#: Pipelines whose order is checked: p stages, m micro-batches.
ORDER_STAGES = (2, 3, 4, 5, 6)
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
    than stages."""
    return [(p, m) for p in ORDER_STAGES for m in sorted({1, 2, p - 1, p, p + 1, 2 * p + 1})]


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

def _config():
    from labs.model import GPTConfig

    return GPTConfig(**MODEL)


def make_case(seed: int, salt: int, m: int):
    """``(model, inputs, targets)``: the unsplit model and ``m`` micro-batches of token ids,
    the same in every process that builds them."""
    import torch

    from labs.model import GPT

    cfg = _config()
    with torch.random.fork_rng():
        torch.manual_seed((seed * 1_000_003 + salt) % 2**31)
        model = GPT(cfg)
        for p in model.parameters():  # biases and norms too, so that a wrong gradient shows
            p.data.add_(0.05 * torch.randn_like(p))
        tokens = torch.randint(0, cfg.vocab_size, (m, MICRO_BATCH, cfg.block_size + 1))
    return model, [t[:, :-1].clone() for t in tokens], [t[:, 1:].clone() for t in tokens]


def loss_of(logits, targets):
    """A micro-batch's loss: mean next-token cross-entropy (``labs.model.GPT``'s)."""
    import torch.nn.functional as F

    return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


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


# ----------------------------------------------------------------------------- inside a rank

def _watched(stage, rank, expected, m, log):
    """The stage module as the student gets it: the real stage, which also logs each pass
    and the micro-batch its data belongs to (``-1``: none of them)."""
    import torch
    import torch.nn as nn

    inputs, grads = expected["inputs"][rank], expected["out_grads"][rank]

    def which(x, candidates):
        for i, want in enumerate(candidates):
            if isinstance(x, torch.Tensor) and x.shape == want.shape and x.dtype == want.dtype and (
                    torch.equal(x, want) if not want.is_floating_point()
                    else torch.allclose(x, want, rtol=1e-4, atol=1e-6)):
                return i
        return -1

    class Watched(nn.Module):
        def __init__(self):
            super().__init__()
            self.stage = stage

        def forward(self, x):
            i = which(x.detach() if isinstance(x, torch.Tensor) else x, inputs)
            log.append(["F", i])
            out = self.stage(x)
            if out.requires_grad:
                def seen(g, i=i):
                    j = which(g, grads)
                    scaled = int(i >= 0 and j < 0 and torch.allclose(g, m * grads[i], rtol=1e-4, atol=1e-6))
                    log.append(["B", i, j, scaled])
                out.register_hook(seen)
            out.microbatch = i
            return out

    return Watched()


def _rank_main(get_functions, quiet, order_grid_here):
    def main(rank, n, data, report):
        import torch

        from labs.pipeline_parallel import Stage

        opened = open_rank(data, get_functions, report, quiet)
        if opened is None:
            return
        header, _, fns = opened
        if rank == 0 and order_grid_here:
            orders = {}
            for p, m in order_grid():
                row = []
                for s in range(p):
                    try:
                        got = fns["one_f_one_b"](p, m, s)
                        row.append([list(x) if isinstance(x, tuple) else x for x in got][:4 * m + 8]
                                   if isinstance(got, (list, tuple)) else repr(got)[:40])
                    except NotImplementedError:
                        row = "NotImplementedError"
                        break
                    except Exception as exc:  # noqa: BLE001
                        row = f"stage {s}: {type(exc).__name__}: {str(exc)[:150]}"
                        break
                orders[f"{p},{m}"] = row
            try:
                report({"orders": orders})
            except (TypeError, ValueError):
                report({"orders": "not JSON: the passes must be ('F' | 'B', int) pairs"})
        for case, spec in enumerate(header["cases"]):
            m = spec["m"]
            expected = baseline(spec["seed"], header["salt"], n, m)
            model, xs, ys = make_case(spec["seed"], header["salt"], m)
            stage = Stage(model, rank, n)
            log, pairs = [], []

            def loss_fn(logits, targets):
                mine = next((k for k, y in enumerate(ys) if targets is y or (
                    isinstance(targets, torch.Tensor) and targets.shape == y.shape and torch.equal(targets, y))), -1)
                pairs.append([getattr(logits, "microbatch", -1), mine])
                return loss_of(logits, targets)

            last = rank == n - 1
            message = {"case": case}
            try:
                loss = fns["pipeline_step"](_watched(stage, rank, expected, m, log), m,
                                            (MICRO_BATCH, MODEL["block_size"], MODEL["d_model"]),
                                            inputs=xs if rank == 0 else None, targets=ys if last else None,
                                            loss_fn=loss_fn if last else None)
                if last:
                    message["loss"] = float(loss) if loss is not None else None
            except NotImplementedError:
                message["error"] = "NotImplementedError"
            except Exception as exc:  # noqa: BLE001
                message["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            grads = [q.grad for q in stage.parameters()]
            if "error" not in message and all(g is not None for g in grads):
                flat = torch.cat([g.reshape(-1) for g in grads]).float().numpy()
                message["grads"] = base64.b64encode(np.ascontiguousarray(flat).tobytes()).decode()
            message.update(log=log, pairs=pairs, no_grad=sum(g is None for g in grads))
            report(message)
    return main


# ----------------------------------------------------------------------------- the grader's side

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
    executed = []
    for s, msg in enumerate(ms):
        order = []
        for entry in msg.get("log") or []:
            if not isinstance(entry, list) or not entry or entry[0] not in ("F", "B"):
                continue
            i = entry[1] if isinstance(entry[1], int) else -1
            if entry[0] == "F" and i < 0:
                order_problem = order_problem or (
                    f"{where}: stage {s} ran a forward pass on data that is no micro-batch's input (a wrong "
                    "send order upstream, or a buffer received into the wrong place)")
            if entry[0] == "B" and len(entry) >= 4 and entry[2] != i and i >= 0:
                if entry[3]:
                    result_problem = result_problem or (
                        f"{where}: stage {s}'s gradients are m = {m} times too large: divide each micro-batch's "
                        "loss by m (the step's loss is their mean)")
                elif entry[2] >= 0:
                    order_problem = order_problem or (
                        f"{where}: stage {s} ran micro-batch {i}'s backward pass with micro-batch {entry[2]}'s "
                        f"gradient: stage {s + 1} sends its gradients in another order than stage {s} receives them "
                        "(a wrong send order)")
            order.append((entry[0], i))
        executed.append(order)
    for s, msg in enumerate(ms):
        for pair in msg.get("pairs") or []:
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


def grade(get_functions, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``get_functions()`` (called inside each rank, returning ``FUNCTIONS``) at each
    world size; a Report."""
    from sandbox.multirank import Limits, run_ranks
    from labs import pipeline_parallel  # noqa: F401  (imported once here: the ranks are forked from us)

    limits = limits or Limits(wall_s=40.0, stall_s=5.0)
    warm_up()
    started = time.monotonic()
    report = Report(NAME)
    found = {part: [] for part in POINTS}
    missing = None
    tol = tolerance()
    for k, n in enumerate(world_sizes):
        specs = [{"seed": s, "m": microbatches(n, s)} for s in seeds]
        payloads = [payload({"cases": specs, "salt": salt}, []) for _ in range(n)]
        group = run_ranks(n, _rank_main(get_functions, quiet, k == 0), payloads, limits, isolate=isolate,
                          prepare=warm_up)
        report.isolated = group.isolated and report.isolated is not False
        by_case, missing = messages_by_case(group, len(specs), missing)
        if k == 0:  # rank 0 ran the grid of one_f_one_b orders
            orders_seen = next((msg["orders"] for msg in reversed(group.messages[0]) if "orders" in msg), None)
            found_orders = _judge_order_grid(orders_seen, group)
            for part in ORDER_PARTS:
                found[part].append(found_orders[part])
        first = {"run_order": None, "run_result": None}
        for c, spec in enumerate(specs):
            ranks = by_case[c]
            where = f"p={n}, m={spec['m']}"
            if len(ranks) < n:
                why = group.detail if not group.ok else "some ranks reported nothing"
                for part in first:
                    first[part] = first[part] or f"{where}: not finished ({why})"
                continue
            with one_thread():
                ref = baseline(spec["seed"], salt, n, spec["m"])
            order_problem, result_problem = _judge_run(n, spec["m"], [ranks[r] for r in range(n)], ref, tol)
            first["run_order"] = first["run_order"] or order_problem
            first["run_result"] = first["run_result"] or result_problem
        for part, text in first.items():
            found[part].append(text)
    problems = {part: [v for v in found[part] if v] for part in POINTS}
    return finish_report(report, TITLES, POINTS, problems, missing, started)


def _judge_order_grid(orders, group) -> dict:
    """The first problem of each order part over the whole grid (None: all passed)."""
    first = {part: None for part in ORDER_PARTS}
    if not isinstance(orders, dict):
        why = orders if isinstance(orders, str) else (group.detail or "one_f_one_b was not run")
        return {part: f"one_f_one_b: {why}" for part in ORDER_PARTS}
    for p, m in order_grid():
        row = orders.get(f"{p},{m}")
        if row == "NotImplementedError":
            return {part: "one_f_one_b: not implemented yet" for part in ORDER_PARTS}
        if isinstance(row, str) or not isinstance(row, list) or len(row) != p:
            text = f"p={p}, m={m}: one_f_one_b raised {row}" if isinstance(row, str) else f"p={p}, m={m}: no order"
            for part in ORDER_PARTS:
                first[part] = first[part] or text
            continue
        parsed, bad = [], None
        for s, raw in enumerate(row):
            order, why = _as_order(raw, m)
            bad = bad or (f"p={p}, m={m}: stage {s}'s order {why}" if why else None)
            parsed.append(order)
        if bad:
            for part in ORDER_PARTS:
                first[part] = first[part] or bad
            continue
        for part, text in check_orders(p, m, parsed).items():
            first[part] = first[part] or text
    return first


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file; the data is drawn afresh unless ``salt`` is
    given."""
    return grade_submitted(path, NAME, TITLES, POINTS, lambda sources: load_names(sources, FUNCTIONS), grade, **kwargs)


def self_check(namespace: dict, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``one_f_one_b`` and ``pipeline_step`` as this notebook defines them
    (pass ``globals()``); prints the report, returns the score."""
    functions = defined(namespace, FUNCTIONS)
    return run_self_check(grade, lambda: functions, world_sizes, seeds)
