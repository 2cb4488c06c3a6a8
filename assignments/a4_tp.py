"""Assignment 4's grader: a tensor-parallel MLP and attention block (Megatron).

The student writes (Shoeybi et al. 2019, sec. 3 and Fig. 3):

* ``CopyToTensorParallel`` (``f``) and ``ReduceFromTensorParallel`` (``g``), two
  ``torch.autograd.Function``: ``f`` is the identity forward and all-reduces the gradient
  backward; ``g`` all-reduces forward and is the identity backward;
* ``shard_mlp(params, rank, world_size)`` and ``shard_attention(params, n_head, rank,
  world_size)``: this rank's part of the unsharded ``labs.model`` MLP and attention
  parameters (first matrix column-parallel, second row-parallel; whole heads per rank);
* ``tp_mlp(x, shard)`` and ``tp_attention(x, shard, n_head)``: the block on this rank,
  ``f`` before the column-parallel linear and ``g`` after the row-parallel one.

Each world size runs as one group of gloo ranks (``sandbox.multirank``). The inputs and
the unsharded blocks are built from the seed (and a salt drawn afresh each grading) on both
sides, with a width, a number of heads, a sequence and a batch that differ from seed to seed
(``BLOCK_SHAPES``); the single-process outputs and gradients are computed here, in the
grader's process, and each rank reports what the student's code produced. What is compared:

* ``f`` and ``g`` alone, on different inputs per rank: values and gradients exactly what
  the definitions say, to ``4 n eps32`` of the largest value;
* each shard against ``labs.tensor_parallel.shard_slicers`` (the lab's own split), exactly;
* output, input gradient and every shard's gradient against the single-process block, in
  relative L2 within ``labs.tensor_parallel.TOLERANCE`` (the same sums in another order);
* per block one all-reduce in the forward pass and one in the backward pass (half of
  ``solutions.model_parallel.tensor_parallel_collectives_per_layer``: a layer is one attention
  and one MLP block), seen on the group's loopback between the grader's checkpoints after
  each pass (``sandbox.wire``; the rank's own count where no capture is possible), and no
  other collective;
* the bytes each rank sends for them with a ring, ``allreduce_bytes_per_rank`` of every
  buffer, equal ``solutions.communication.tensor_parallel_bytes_per_layer`` for the two
  blocks together.
"""
from __future__ import annotations

import base64
import time

import numpy as np

from solutions.communication import allreduce_bytes_per_rank, tensor_parallel_bytes_per_layer
from solutions.model_parallel import tensor_parallel_collectives_per_layer

from .a4_rank import BLOCK_SHAPES, UNIT_SHAPE, block_shape, build_case, case_seed  # noqa: F401 (the statement prints them)
from .a4_rank import STEPS as CASE_STEPS
from .common import (Report, built_in_collectives, defined, finish_report, first_cause, grade_submitted, one_thread,
                     payload, rank_program, rank_source, run_cases, seeded)
from .common import self_check as run_self_check

NAME = "Assignment 4: tensor-parallel MLP and attention"
FUNCTIONS = ("CopyToTensorParallel", "ReduceFromTensorParallel", "shard_mlp", "tp_mlp",
             "shard_attention", "tp_attention")
WORLD_SIZES = (2, 4)
#: Whole heads per rank: the world size must divide every block's heads (``BLOCK_SHAPES``).
ALLOWED_WORLD_SIZES = (2, 4)
SEEDS = (0, 1, 2)
POINTS = {"f": 1, "g": 1, "mlp_shards": 1, "mlp": 2, "attn_shards": 1, "attn": 2, "comm": 2}
TITLES = {
    "f": "f: identity forward, all-reduce backward",
    "g": "g: all-reduce forward, identity backward",
    "mlp_shards": "MLP shards: fc column-parallel, proj row-parallel",
    "mlp": "MLP: output and gradients equal one process",
    "attn_shards": "attention shards: whole heads per rank",
    "attn": "attention: output and gradients equal one process",
    "comm": "one all-reduce forward and one backward per block; bytes = formula",
}
BLOCKS = {"mlp": ("mlp.", "mlp_shards"), "attn": ("attn.", "attn_shards")}
#: The known mistakes, by name, and words that only their feedback holds (for a class
#: report's count of who made each).
MISTAKES = {
    "f and g swapped": "f and g are swapped",
    "an all-reduce missing (g's, or f's backward)": "the all-reduce is missing",
    "f missing before the column-parallel linear": "is missing before the column-parallel linear",
    "row/column split swapped": "row/column split swapped",
    "heads split wrong": "heads split wrong",
    "row-parallel bias added before g": "add it once, after g",
    "not one all-reduce forward and one backward per block": "Megatron's block issues exactly",
    "a deadlock (a rank hung in a blocking call)": " hung in ",
}


def tolerance() -> float:
    """Relative L2 bound for a block against one process (the lab's own bound)."""
    from labs.tensor_parallel import TOLERANCE

    return TOLERANCE


# ----------------------------------------------------------------------------- the cases

def make_case(seed: int, salt: int):
    """The unsharded blocks and the inputs of one case, the same in every process that
    builds them (:func:`.a4_rank.build_case`, seeded apart from other grading threads)."""
    with seeded(case_seed(seed, salt)):
        return build_case(block_shape(seed))


def describe(seed: int) -> str:
    """The blocks of ``seed``'s case, as feedback names them."""
    shape = block_shape(seed)
    return (f"seed {seed} (h = {shape['d_model']}, {shape['n_head']} heads, b = {shape['batch']}, "
            f"s = {shape['seq']})")


def unit_inputs(seed: int, salt: int, n: int) -> list:
    """Per rank, ``(u, w)`` for the checks of f and g alone: an input and the weights of
    the loss ``sum(op(u) * w)``, different on every rank."""
    rng = np.random.default_rng([seed, salt, n])
    return [(rng.standard_normal(UNIT_SHAPE).astype(np.float32), rng.standard_normal(UNIT_SHAPE).astype(np.float32))
            for _ in range(n)]


def reference(seed: int, salt: int) -> dict:
    """Outputs and gradients of the unsharded blocks, in float64 from float32 inputs."""
    mlp, attn, x, probe = make_case(seed, salt)
    out = {}
    for key, module in (("mlp", mlp), ("attn", attn)):
        xr = x.clone().requires_grad_(True)
        y = module(xr)
        (y * probe).sum().backward()
        prefix = BLOCKS[key][0]
        out[key] = {"out": y.detach().numpy().astype(np.float64), "x_grad": xr.grad.numpy().astype(np.float64),
                    "params": {prefix + n: p.detach() for n, p in module.named_parameters()},
                    "grads": {prefix + n: p.grad.detach() for n, p in module.named_parameters()}}
    return out


def _dec(m) -> np.ndarray | None:
    """A float32 array a rank reported (``{shape, data}``), or None if it is not one."""
    try:
        shape = [int(s) for s in m["shape"]]
        raw = base64.b64decode(m["data"], validate=True)
        if len(raw) != 4 * int(np.prod(shape, dtype=np.int64)) or len(shape) > 6:
            return None
        return np.frombuffer(raw, dtype=np.float32).reshape(shape).astype(np.float64)
    except (KeyError, TypeError, ValueError):
        return None


# ----------------------------------------------------------------------------- the grader's side

def _close(got, want, n) -> bool:
    tol = 4 * n * np.finfo(np.float32).eps * max(1.0, float(np.abs(want).max(initial=0)))
    return got is not None and got.shape == want.shape and bool(np.all(np.abs(got - want) <= tol))


def _rel(got, want) -> float:
    if got is None or got.shape != want.shape:
        return float("inf")
    return float(np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30))


#: What f and g each do wrong, by what their output or gradient is instead (``as_other``:
#: what the other operator does; f's forward and g's backward are the identity, f's
#: backward and g's forward the all-reduce).
UNIT_FEEDBACK = {
    "f": {"swapped": "f and g are swapped: f is the identity forward and all-reduces the gradient backward",
          "forward": "f's forward is not the identity",
          "forward_as_other": " (it all-reduces: that is g's forward)",
          "backward_as_other": ("f's backward returns this rank's own gradient: all-reduce it (every rank used the "
                                "same input, so its gradient is the sum over ranks); the all-reduce is missing"),
          "backward": "f's backward is not the sum over ranks of the gradients"},
    "g": {"swapped": "f and g are swapped: g all-reduces in the forward pass and is the identity backward",
          "forward": "g's forward does not return the sum over ranks",
          "forward_as_other": ": it returns this rank's own input, the all-reduce is missing",
          "backward_as_other": "g's backward all-reduces: it must be the identity (that is f's backward)",
          "backward": "g's backward is not the identity"},
}


def _judge_unit(op, ms, units, n):
    """One line naming what is wrong with f or g on this case, or None."""
    total_u = np.sum([u.astype(np.float64) for u, _ in units], axis=0)
    total_w = np.sum([w.astype(np.float64) for _, w in units], axis=0)
    say = UNIT_FEEDBACK[op]
    for r, m in enumerate(ms):
        out, grad = _dec(m.get("out") or {}), _dec(m.get("grad") or {})
        u, w = units[r][0].astype(np.float64), units[r][1].astype(np.float64)
        # (output, input gradient) of this operator, and of the other one, on this rank
        (want_out, want_grad), (other_out, other_grad) = ((u, total_w), (total_u, w))[::1 if op == "f" else -1]
        fwd_ok, bwd_ok = _close(out, want_out, n), _close(grad, want_grad, n)
        if fwd_ok and bwd_ok:
            continue
        if _close(out, other_out, n) and _close(grad, other_grad, n):
            return say["swapped"]
        if not fwd_ok:
            return f"rank {r}: {say['forward']}" + (say["forward_as_other"] if _close(out, other_out, n) else "")
        if _close(grad, other_grad, n):
            return f"rank {r}: {say['backward_as_other']}"
        return f"rank {r}: {say['backward']}"
    return None


def _judge_shard(name, got, full, want, n, r, n_head):
    """Why rank ``r``'s shard of ``name`` is not ``want``, or None."""
    if got is None:
        return f"{name}: missing from the shard (or not a tensor)"
    if got.shape == want.shape and np.array_equal(got, want):
        return None
    kind = "column-parallel" if name in ("mlp.fc.weight", "mlp.fc.bias", "attn.qkv.weight", "attn.qkv.bias") else (
        "replicated" if name.endswith("proj.bias") else "row-parallel")
    if kind == "replicated":
        return (f"{name}: the row-parallel linear's bias is added once, after g, so every rank holds it whole "
                f"(got shape {tuple(got.shape)}, want {tuple(want.shape)})")
    if name.startswith("attn.qkv") and got.shape == want.shape:
        if np.array_equal(got, np.array_split(full, n, axis=0)[r]):
            return (f"{name}: heads split wrong: a contiguous 1/{n} of the fused q|k|v rows holds queries of some "
                    "heads but not their keys and values; take this rank's heads' rows from each of q, k and v")
        return (f"{name}: heads split wrong: this rank's rows are not the q, k and v rows of heads "
                f"{r * n_head // n} to {(r + 1) * n_head // n - 1} (of {n_head})")
    other = 1 - (0 if kind == "column-parallel" else 1) if full.ndim == 2 else None
    if other is not None and got.shape == np.array_split(full, n, axis=other)[r].shape and np.array_equal(
            got, np.array_split(full, n, axis=other)[r]):
        return (f"{name}: row/column split swapped: {name.rsplit('.', 2)[-2]} is {kind} (PyTorch stores weight as "
                f"out x in: column-parallel keeps rows of weight, row-parallel keeps columns)")
    for k in range(n):
        if k != r and got.shape == want.shape and full.ndim and np.array_equal(
                got, np.array_split(full, n, axis=0 if kind == "column-parallel" else full.ndim - 1)[k]):
            return f"{name}: rank {r} holds rank {k}'s slice"
    return f"{name}: rank {r}'s shard (shape {tuple(got.shape)}) is not its {kind} part (shape {tuple(want.shape)})"


def _judge_block(key, ms, ref, n, slicers, units=None, n_head=4):
    """``(shard problem, block problem)`` for one block on one case. ``units``: ``{"f": what
    is wrong with f alone, "g": ...}`` (None: right) on the same case, the evidence that
    decides which operator a wrong gradient is blamed on."""
    units = units or {}
    shard_problem = None
    prefix = BLOCKS[key][0]
    full = {k: v.numpy().astype(np.float64) for k, v in ref["params"].items()}
    tol = tolerance()
    for r, m in enumerate(ms):
        shards = m.get("shards") or {}
        for name, param in ref["params"].items():
            want = slicers[r][name](param).numpy().astype(np.float64)
            why = _judge_shard(name, _dec(shards.get(name[len(prefix):]) or {}), full[name], want, n, r, n_head)
            if why and not shard_problem:
                shard_problem = why
    outs = [_dec(m.get("out") or {}) for m in ms]
    xgs = [_dec(m.get("x_grad") or {}) for m in ms]
    errors = [(r, m["error"]) for r, m in enumerate(ms) if "error" in m]
    if errors:
        return shard_problem, f"rank {errors[0][0]} raised {errors[0][1]}"
    for r, (out, xg, m) in enumerate(zip(outs, xgs, ms)):
        if _rel(out, ref["out"]) > tol and m.get("first") == "all_reduce":
            return shard_problem, ("the forward pass all-reduces before its first matmul: f and g are swapped "
                                   "(f, the identity, goes before the column-parallel linear; g, the all-reduce, "
                                   "after the row-parallel one)")
        if _rel(out, ref["out"]) > tol:
            bias = ref["params"][prefix + "proj.bias"].numpy().astype(np.float64)
            whole = all(o is not None and o.shape == ref["out"].shape for o in outs)
            if whole and min(_rel(sum(outs), ref["out"]), _rel(sum(outs) - (n - 1) * bias, ref["out"])) <= tol:
                return shard_problem, ("the output is this rank's partial sum: all-reduce it after the row-parallel "
                                       "linear (g); the all-reduce is missing")
            if _rel(out - (n - 1) * bias, ref["out"]) <= tol:
                return shard_problem, ("the row-parallel bias is added on every rank before the all-reduce, so it "
                                       f"counts {n} times: add it once, after g")
            return shard_problem, f"rank {r}: the output differs from one process (relative L2 {_rel(out, ref['out']):.2g})"
        if _rel(xg, ref["x_grad"]) > tol:
            wrong = [op for op in ("f", "g") if units.get(op) and "backward" in units[op]]
            if wrong:
                op = wrong[0]
                return shard_problem, (f"rank {r}: the input's gradient differs from one process (relative L2 "
                                       f"{_rel(xg, ref['x_grad']):.2g}), and {op}'s backward is wrong on its own "
                                       f"({units[op]}): fix {op} first")
            if all(g is not None and g.shape == ref["x_grad"].shape for g in xgs) and _rel(sum(xgs), ref["x_grad"]) <= tol:
                return shard_problem, ("the input's gradient is this rank's partial sum: f (an all-reduce in the "
                                       "backward pass) is missing before the column-parallel linear")
            if xg is not None and _rel(xg, n * ref["x_grad"]) <= tol:
                return shard_problem, f"the input's gradient is {n} times too large: it is all-reduced twice"
            return shard_problem, f"rank {r}: the input's gradient differs from one process (relative L2 {_rel(xg, ref['x_grad']):.2g})"
        grads = m.get("grads") or {}
        for name, g in ref["grads"].items():
            want = slicers[r][name](g).numpy().astype(np.float64)
            rel = _rel(_dec(grads.get(name[len(prefix):]) or {}), want)
            if rel > tol:
                return shard_problem, f"rank {r}: the gradient of {name}'s shard differs from one process (relative L2 {rel:.2g})"
    return shard_problem, None


def _wire_view(segments, n) -> list | None:
    """Each rank's ``{"calls": [forward, backward], "bytes": [forward, backward]}`` of one
    block as seen between the ranks (the buffer a ring's bytes come from: gloo sends
    2(n-1)/n of each all-reduce's buffer), or None where no capture saw it."""
    phases = {s.get("point"): s["traffic"] for s in segments or [] if s["checkpoint"] == "phase"}
    if set(phases) != {"forward", "backward"}:
        return None
    view = []
    for r in range(n):
        calls, nbytes = [], []
        for phase in ("forward", "backward"):
            t = phases[phase][r]
            counted = {k: v for k, v in t["calls"].items() if k != "barrier"}
            if t["p2p"]:
                counted["send"] = 1
            calls.append(counted)
            nbytes.append({"all_reduce": round(t["collectives"].get("all_reduce", 0) * n / (2 * (n - 1)))})
        view.append({"calls": calls, "bytes": nbytes})
    return view


def _judge_comm(by_block, n, shape):
    """Collectives of the two blocks on one case (blocks of ``shape``, :func:`.a4_rank.block_shape`):
    one all-reduce forward and one backward per block, nothing else, and the ring bytes of the
    formula."""
    per_block = {phase: counts["all_reduce"] // 2 for phase, counts in tensor_parallel_collectives_per_layer().items()}
    sent = {}
    for key, ms in by_block.items():
        label = "MLP" if key == "mlp" else "attention"
        for r, m in enumerate(ms):
            calls, nbytes = m.get("calls"), m.get("bytes")
            if not (isinstance(calls, list) and len(calls) == 2 and isinstance(nbytes, list) and len(nbytes) == 2):
                return f"{label}: rank {r} did not finish its forward and backward pass"
            for i, phase in enumerate(("forward", "backward")):
                if not isinstance(calls[i], dict) or not isinstance(nbytes[i], dict):
                    return f"{label}: rank {r} reported no counts"
                got = calls[i].get("all_reduce", 0)
                if got != per_block[phase]:
                    return (f"{label}: rank {r} issued {got} all-reduce(s) in the {phase} pass; Megatron's block "
                            f"issues exactly {per_block[phase]} ({'g' if phase == 'forward' else 'f'})")
                others = [c for c in built_in_collectives(calls[i]) if c != "all_reduce"]
                if others or calls[i].get("send") or calls[i].get("recv"):
                    return f"{label}: rank {r} also calls {', '.join(others) or 'send/recv'} in the {phase} pass"
                if got:
                    sent[r] = sent.get(r, 0.0) + float(allreduce_bytes_per_rank(float(nbytes[i].get("all_reduce", 0)), n))
    predicted = float(tensor_parallel_bytes_per_layer(shape["batch"], shape["seq"], shape["d_model"], n, 4))
    bad = [(r, b) for r, b in sorted(sent.items()) if abs(b - predicted) > 0.5]
    if bad:
        return (f"rank {bad[0][0]} sends {bad[0][1]:,.0f} bytes for the two blocks' all-reduces (a ring sends 2(n-1)/n of each "
                f"buffer); 8 b s h (n-1)/n fp32 elements = {predicted:,.0f}: all-reduce the b x s x h block output, "
                "in float32, nothing larger")
    return None


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`, the six names of
    ``FUNCTIONS``) at each world size; a Report. Each step of each seed (f, g, the MLP, the
    attention) runs and scores on its own (:func:`~assignments.common.run_cases`)."""
    from labs.tensor_parallel import shard_slicers
    from sandbox.multirank import Limits

    limits = limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=40.0)
    started = time.monotonic()
    report = Report(NAME)
    verdicts = {p: [] for p in POINTS}  # per world size: None (passed) or the first problem
    missing = None
    program = rank_program("a4_rank:main", student, FUNCTIONS, quiet, extra=(("model", rank_source("model")),))
    runs_of = [(seed, step) for seed in seeds for step in CASE_STEPS]
    for n in world_sizes:
        heads = sorted({block_shape(seed)["n_head"] for seed in seeds})
        if any(h % n for h in heads):
            raise ValueError(f"world size {n} must divide the heads of every block ({', '.join(map(str, heads))})")
        units = {seed: unit_inputs(seed, salt, n) for seed in seeds}

        def payloads_for(indices, n=n, units=units):
            unit_cases = [c for c in indices if runs_of[c][1] in ("f", "g")]
            header = {"cases": indices, "runs": runs_of, "salt": salt, "units": unit_cases}
            return [payload(header, [a for c in unit_cases for a in units[runs_of[c][0]][r]]) for r in range(n)]

        runs = run_cases(n, len(runs_of), payloads_for, program, limits, isolate)
        report.ran(runs)
        missing = missing or runs.missing
        if runs.outside:
            verdicts["comm"].append(f"n={n}: {runs.outside[0]}: the blocks' data must travel by their all-reduces")
        first = {p: None for p in POINTS}

        def note(part, text):
            first[part] = first[part] or f"n={n}: {text}"

        for seed in seeds:
            ref, complete, unwritten, unit_verdict = None, {}, False, {}
            shape = block_shape(seed)
            slicers = [shard_slicers(shape["d_model"], n, r) for r in range(n)]
            blocks = describe(seed)
            for step in CASE_STEPS:
                c = runs_of.index((seed, step))
                where = f"seed {seed}" if step in ("f", "g") else blocks
                parts = [step] if step in ("f", "g") else [BLOCKS[step][1], step]
                if c in runs.stopped:
                    for part in parts:
                        note(part, f"{where}: not finished ({runs.stopped[c]})")
                    unwritten = unwritten or runs.stopped[c].startswith("not implemented")
                    continue
                ms = [runs.messages[c].get(r) for r in range(n)]
                errors = [(r, m["error"]) for r, m in enumerate(ms) if "error" in m and "shards" not in m]
                if errors:
                    r, e = first_cause(errors)
                    text = "not implemented yet" if e == "NotImplementedError" else f"rank {r} raised {e}"
                    unwritten = unwritten or e == "NotImplementedError"
                    for part in parts:
                        note(part, f"{where}: {text}")
                    continue
                if step in ("f", "g"):
                    why = _judge_unit(step, ms, units[seed], n)
                    unit_verdict[step] = why
                    if why:
                        note(step, f"seed {seed}: {why}")
                    continue
                if ref is None:
                    with one_thread():
                        ref = reference(seed, salt)
                shard_problem, block_problem = _judge_block(step, ms, ref[step], n, slicers, unit_verdict,
                                                            shape["n_head"])
                if shard_problem:
                    note(BLOCKS[step][1], f"{blocks}: {shard_problem}")
                if block_problem:
                    note(step, f"{blocks}: {block_problem}")
                if not any("error" in m for m in ms):
                    seen = _wire_view(runs.segments.get(c), n) if runs.wired else None
                    complete[step] = ([dict(m, **v) for m, v in zip(ms, seen)] if seen is not None else ms)
            if len(complete) == 2:
                why = _judge_comm(complete, n, shape)
                if why:
                    note("comm", f"{blocks}: {why}")
            else:
                note("comm", f"{blocks}: " + ("not implemented yet" if unwritten else "not counted (a block did not run)"))
        for part in POINTS:
            verdicts[part].append(first[part])
    problems = {part: [v for v in verdicts[part] if v] for part in POINTS}
    return finish_report(report, TITLES, POINTS, problems, missing, started)


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file; the inputs are drawn afresh unless ``salt``
    is given."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def self_check(namespace: dict, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on the six names as this notebook defines them (pass ``globals()``);
    the ranks are forked from this process. Prints the report, returns the score."""
    return run_self_check(grade, defined(namespace, FUNCTIONS), world_sizes, seeds)
