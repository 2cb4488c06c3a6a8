"""Assignment 3's grader: a sharded AdamW, ZeRO stages 1 and 2 (Rajbhandari et al. 2020).

The student writes ``ShardedAdamW(params, lr, betas, eps, weight_decay, stage)``. The
parameters, flattened in order into one vector of P elements (P a multiple of the world
size n), are cut into n equal shards; rank r owns elements ``[r P/n, (r+1) P/n)``. Each
``step()``, after every rank's own backward pass:

* the flat gradient is reduce-scattered (``dist.reduce_scatter_single``): rank r receives
  only the sum of its shard's gradients. Stage 2 must; stage 1 may instead all-reduce the
  whole gradient and keep its slice (ZeRO-1 as first written, 1.5x the bytes: the course
  teaches that ZeRO-1 and ZeRO-2 cost what data parallelism costs, section 7);
* the sum is divided by n (the mean over ranks), AdamW steps the shard, with state
  (``exp_avg``, ``exp_avg_sq``) for the shard only;
* the updated shards are all-gathered (``dist.all_gather_single``) into every rank's
  parameters.

Graded at world sizes 2 and 4 and three seeds (AdamW's betas one pair per seed,
``a3_rank.BETAS``: not always the defaults), on real gloo ranks (``sandbox.multirank``),
every run on its own (``assignments.common.run_cases``):

* **result**, for each stage: the parameters after each of k steps equal one process's
  AdamW on the whole global batch (L2 difference at most ``PARAM_TOL`` of the L2 of the
  update); a wrong result is looked at after the first step, where a shard stepped by the
  wrong rank or never gathered shows plainly;
* **state**, on its own: the elements of every tensor the optimizer object holds between
  steps (the model's parameters and gradients excepted) are at least the two moments of a
  shard and at most ``STATE_SHARDS`` shard sizes (the two moments and a float32 copy of the
  shard): a full AdamW state is 2P, 2n shards. A tensor of the model's size kept between
  steps is named from its values (AdamW's moments, the averaged or the rank's own gradient,
  the parameters);
  Then, measured from outside the ranks (``sandbox.multirank``'s memory checkpoints: the
  grader reads each rank's resident memory, and its private ``/tmp`` and ``/dev/shm``, from
  ``/proc``), a *memory probe* per stage at the smallest world size graded (the cheapest
  group; an optimizer that shards at 2 ranks has no reason not to at 4): ``PROBE_STEPS``
  steps of a wide layer of ``PROBE_NUMEL`` weights, after which a rank may hold, beyond the layer's parameters and
  what it held before the student's code was loaded, at most ``STATE_SHARDS`` shards and
  ``PROBE_SLACK`` bytes (state kept anywhere the object walk cannot reach shows here), and
  its shard of the layer must have taken AdamW's first step;
* **traffic**, for each stage: bytes each rank sends, from the collective calls counted in
  the rank through ``solutions.communication``: a reduce-scatter and an all-gather of the
  P-element buffer per step, ``2 (n-1)/n`` of it (tensor or list forms alike); stage 1 may
  send an all-reduce and an all-gather, ``3 (n-1)/n``.
"""
from __future__ import annotations

import numpy as np

from solutions.communication import (allgather_bytes_per_rank, allreduce_bytes_per_rank,
                                     reduce_scatter_bytes_per_rank)

from .a2_rank import EPS, LAYERS, LR, STEPS, WEIGHT_DECAY, data, flat
from .a3_rank import BETAS, PROBE_STEPS, PROBE_STRIDE, betas_for, probe_input, probe_model  # noqa: F401
from .a2_ddp import SEEDS, WORLD_SIZES, make_model
from .common import Report, decode, grade_submitted, grade_training, one_thread, payload, rank_program, rank_source
from .common import self_check as run_self_check

NAME = "Assignment 3: ZeRO-1 and ZeRO-2, a sharded AdamW"
CLASS = "ShardedAdamW"
STAGES = (2, 1)
PARAM_TOL = 1e-4
#: Shard-sized tensors the optimizer may hold: exp_avg, exp_avg_sq and a copy of the shard.
STATE_SHARDS = 3
#: How close a held tensor must be to a known vector (a moment, a gradient, the parameters)
#: to be named as it (relative L2): the ranks sum in another order, about 1e-7 apart.
MOMENT_TOL = 1e-3
#: The memory probes' layer: 2^21 float32 weights (8 MiB). The full AdamW state (16 MiB) and
#: the sharded one (3 shards: 12 MiB at n=2, 6 MiB at n=4) lie further apart than what a
#: rank holds besides between the two checkpoints (measured: 0.4-0.9 MiB, the student's
#: module and the cases before the probe among it; ``PROBE_SLACK``).
PROBE_NUMEL = 2**21
PROBE_SLACK = 2 * 2**20
POINTS = {"result2": 3, "result1": 2, "state": 2, "traffic2": 2, "traffic1": 1}
TITLES = {
    "result2": "stage 2: parameters after k steps = one process's AdamW",
    "result1": "stage 1: parameters after k steps = one process's AdamW",
    "state": "optimizer state per rank = 1/n of AdamW's (the moments of one shard)",
    "traffic2": "stage 2 bytes sent: reduce-scatter + all-gather = 2(n-1)/n of the parameters",
    "traffic1": "stage 1 bytes sent: reduce-scatter + all-gather, 2(n-1)/n (or all-reduce + all-gather, 3(n-1)/n)",
}
#: The counter's name for each collective, and the formula of the bytes a rank sends.
FORMULAS = {"all_reduce": allreduce_bytes_per_rank, "reduce_scatter": reduce_scatter_bytes_per_rank,
            "all_gather": allgather_bytes_per_rank}
#: What each stage may call per step. Stage 1 as section 7 teaches it reduce-scatters, as
#: stage 2 does (ZeRO-1 and ZeRO-2 cost what data parallelism costs); the all-reduce version
#: (the whole gradient reduced, a shard kept) costs 1.5x as much and is accepted too.
EXPECTED_CALLS = {2: (("reduce_scatter", "all_gather"),),
                  1: (("reduce_scatter", "all_gather"), ("all_reduce", "all_gather"))}
#: The known mistakes, by name, and words that only their feedback holds.
MISTAKES = {
    "a shard stepped by the wrong rank": "holds the elements of shard",
    "the updated shards never gathered": "all-gather the updated shards",
    "AdamW's state kept for every parameter": "AdamW's moments for all P parameters",
    "the whole gradient kept between steps": "keeps the whole",
    "stage 2 that all-reduces": "reduce-scatters the gradients",
}


def baseline(n: int, seed: int, salt: int) -> dict:
    """One process's AdamW on the whole global batch: the flat parameters before and after
    each step (``params``, ``STEPS + 1`` vectors), the gradient of each step (``grads``) and
    AdamW's two moments after the last (``exp_avg``, ``exp_avg_sq``), flat in parameter order."""
    import torch

    model = make_model(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=betas_for(seed), eps=EPS, weight_decay=WEIGHT_DECAY)
    x, y = data(n, seed, salt)
    out = {"params": [flat(model.parameters())], "grads": []}
    for step in range(STEPS):
        xs = torch.from_numpy(x[step].reshape(-1, LAYERS[0]))
        ys = torch.from_numpy(y[step].reshape(-1, LAYERS[-1]))
        torch.nn.functional.mse_loss(model(xs), ys).backward()
        out["grads"].append(flat(p.grad for p in model.parameters()))
        opt.step()
        opt.zero_grad()
        out["params"].append(flat(model.parameters()))
    for key in ("exp_avg", "exp_avg_sq"):
        out[key] = flat(opt.state[p][key] for p in model.parameters())
    return out


# ----------------------------------------------------------------------------- the grader's side

def _update_error(w, before, after) -> float:
    return float(np.linalg.norm(w - after) / max(np.linalg.norm(after - before), 1e-30))


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def check_result(m: dict, rank: int, n: int, ref: dict) -> str | None:
    history = m.get("params")
    params = ref["params"]
    size = params[0].size
    if not isinstance(history, list) or len(history) != STEPS:
        return "not every step reported the parameters"
    for step, text in enumerate(history):
        w = decode(text, size) if isinstance(text, str) else None
        if w is None:
            return f"step {step}: the parameters came back malformed"
        err = _update_error(w, params[step], params[step + 1])
        if err <= PARAM_TOL:
            continue
        if step == 0:
            why = _diagnose_first_step(w, rank, n, params)
            if why:
                return why
        return (f"after step {step + 1} the parameters differ from one process's by {err:.2g} of the "
                f"update (at most {PARAM_TOL:g} allowed)")
    return None


def _diagnose_first_step(w, rank, n, ref) -> str | None:
    """Name the mistake from the parameters after the first step, shard by shard."""
    before, after = ref[0], ref[1]
    shards = np.split(np.arange(w.size), n)
    own_stale = []
    for j, idx in enumerate(shards):
        if _update_error(w[idx], before[idx], after[idx]) <= PARAM_TOL:
            continue
        if np.allclose(w[idx], before[idx], rtol=0, atol=1e-7):
            own_stale.append(j)
            continue
        # a shard at position j (gathered from rank j) holding the elements of another shard
        dist_to = [np.linalg.norm(w[idx] - after[other]) for other in shards]
        m = int(np.argmin(dist_to))
        if m != j and dist_to[m] < 0.5 * np.linalg.norm(w[idx] - after[idx]):
            return (f"rank {j}'s shard holds the elements of shard {m}: rank r owns elements "
                    f"r·P/n to (r+1)·P/n (here {idx[0]} to {idx[-1] + 1} for rank {j})")
    if own_stale and rank not in own_stale and len(own_stale) == n - 1:
        return (f"on rank {rank} the parameters outside its own shard did not change: all-gather the "
                "updated shards into every rank's parameters")
    if own_stale:
        return (f"shards {own_stale} did not change on rank {rank}: every shard must be stepped by "
                "its rank and gathered")
    return None


def check_traffic(m: dict, n: int, stage: int, numel: int) -> str | None:
    counted = m.get("bytes")
    if not isinstance(counted, dict):
        return "no traffic came back"
    total = 4 * numel
    used = {k: v for k, v in counted.items() if k in FORMULAS and isinstance(v, int) and v > 0}
    others = sorted(k for k, v in counted.items() if k not in FORMULAS and isinstance(v, int) and v > 0)
    sent = sum(float(FORMULAS[k](v, n)) for k, v in used.items())
    for calls in EXPECTED_CALLS[stage]:
        predicted = STEPS * sum(float(FORMULAS[k](total, n)) for k in calls)
        if not others and set(used) == set(calls) and abs(sent - predicted) < 0.5:
            return None
    calls = EXPECTED_CALLS[stage][0]
    predicted = STEPS * sum(float(FORMULAS[k](total, n)) for k in calls)
    per_step = {k: v / (STEPS * total) for k, v in counted.items() if isinstance(v, int) and v > 0}
    seen = ", ".join(f"{k} {r:.3g} x" for k, r in sorted(per_step.items())) or "no collective"
    want = " + ".join(calls)
    why = ""
    if others:
        why = (f": {' and '.join(others)} {'is' if len(others) == 1 else 'are'} no part of it (the gradients are "
               "reduce-scattered, dist.reduce_scatter_single, and the updated shards all-gathered, "
               "dist.all_gather_single)")
    elif not counted.get("all_gather"):
        why = ": no all-gather (dist.all_gather_single), so the updated shards never reach the other ranks"
    elif stage == 2 and counted.get("all_reduce"):
        why = ": stage 2 reduce-scatters the gradients (dist.reduce_scatter_single) instead of all-reducing them"
    besides = f" besides its {' and '.join(others)}" if others else ""
    return (f"stage {stage}: sent {sent:,.0f} bytes in {STEPS} steps{besides} (per step: {seen} the parameters); "
            f"{want} of the parameters per step = {predicted:,.0f}{why}")


#: The bytes gloo sends, per rank, for each collective the counter names, as a share of
#: its full buffer: a ring all-reduce 2(n-1)/n; gloo runs a reduce-scatter as an all-reduce
#: of its input; an all-gather (n-1)/n of its output (measured: ``tests/test_rank_wire.py``).
GLOO_SHARE = {"all_reduce": lambda n: 2 * (n - 1) / n, "reduce_scatter": lambda n: 2 * (n - 1) / n,
              "all_gather": lambda n: (n - 1) / n}
#: What the wire calls each of them (gloo's slot prefix, ``sandbox.wire.PREFIXES``).
ON_THE_WIRE = {"all_reduce": "all_reduce", "reduce_scatter": "all_reduce", "all_gather": "all_gather"}


def check_wire(n: int, case, segments, messages: dict, numel: int) -> dict:
    """The collectives seen between the ranks, over the k steps, against what each rank
    counted itself (its claim, which names them): bytes the claim does not explain were sent
    by calls the rank did not count (the backend called below torch.distributed's functions,
    the counter switched off), and the traffic part is not earned."""
    stage = case[0]
    if segments is None:
        return {}
    seen = [{} for _ in range(n)]
    for segment in segments:
        if segment["checkpoint"] in ("step", "case"):
            for r, t in enumerate(segment["traffic"]):
                for name, nbytes in t["collectives"].items():
                    if name != "barrier":
                        seen[r][name] = seen[r].get(name, 0) + nbytes
    for r in range(n):
        claimed = (messages.get(r) or {}).get("bytes")
        if not isinstance(claimed, dict):
            continue
        explained = {}
        for name, nbytes in claimed.items():
            if name in GLOO_SHARE and isinstance(nbytes, int):
                wire = ON_THE_WIRE[name]
                explained[wire] = explained.get(wire, 0) + GLOO_SHARE[name](n) * nbytes
        # Collectives the rank counted that ZeRO has no use for: the traffic part is lost on its
        # own count (check_traffic names them); their bytes between the ranks are theirs.
        own = bool([k for k, v in claimed.items() if k not in GLOO_SHARE and isinstance(v, int) and v > 0])
        for name in set(seen[r]) | set(explained):
            if own and name not in ON_THE_WIRE.values():
                continue
            got, want = seen[r].get(name, 0), explained.get(name, 0)
            if abs(got - want) > 4 * n * STEPS * 4:
                return {f"traffic{stage}": (f"rank {r} sent {got:,} bytes in {name} calls between the ranks, where the "
                                            f"collectives it counted itself account for {want:,.0f}: collectives "
                                            "called past torch.distributed's functions are not counted")}
    return {}


def _local_gradient(n: int, seed: int, salt: int, rank: int, params) -> np.ndarray:
    """Rank ``rank``'s own gradient at the last step (its data, the parameters before it)."""
    import torch

    model = make_model(seed)
    with torch.no_grad():
        offset = 0
        for p in model.parameters():
            p.copy_(torch.from_numpy(params[offset:offset + p.numel()].reshape(p.shape)))
            offset += p.numel()
    x, y = data(n, seed, salt)
    xs = torch.from_numpy(x[STEPS - 1, rank].reshape(-1, LAYERS[0]))
    ys = torch.from_numpy(y[STEPS - 1, rank].reshape(-1, LAYERS[-1]))
    torch.nn.functional.mse_loss(model(xs), ys).backward()
    return flat(p.grad for p in model.parameters())


def check_state(m: dict, rank: int, n: int, ref: dict, case) -> str | None:
    """The optimizer's state on one rank, between steps: at least AdamW's two moments of a
    shard of P/n elements, at most ``STATE_SHARDS`` shards in all. What each extra tensor of
    the model's size holds is named from its values (the evidence: moments, a gradient, the
    parameters, or none of these)."""
    numel = ref["params"][0].size
    shard = numel // n
    held = m.get("held")
    if not isinstance(held, list) or not all(isinstance(h, int) for h in held):
        return "no state size came back"
    values = [v for v in (decode(t, size) for t in m.get("values") or [] if isinstance(t, str)
                          for size in (numel, 2 * numel)) if v is not None]
    total = sum(held)
    if total > STATE_SHARDS * shard + 64:
        names = []
        known = {"AdamW's moments for all P parameters (exp_avg)": ref["exp_avg"],
                 "AdamW's moments for all P parameters (exp_avg_sq)": ref["exp_avg_sq"],
                 "the averaged gradient of the last step": ref["grads"][-1],
                 "the parameters": ref["params"][-1]}
        if any(v.size == numel for v in values):
            known[f"rank {rank}'s own gradient of the last step"] = _local_gradient(
                n, case[1], ref["salt"], rank, ref["params"][-2])
        for v in values:
            for part in (v.reshape(-1, numel) if v.size % numel == 0 else ()):
                fits = [what for what, want in known.items() if _rel(part, want) <= MOMENT_TOL]
                names += fits or ["a tensor of P elements"]
        kept = ""
        if names:
            names = list(dict.fromkeys(names))
            kept = (f"; it keeps the whole of {' and of '.join(names)} between steps (the model's size, n shards"
                    + (": keep only your shard's" if any("moments" in x for x in names) else
                       ": let it go after the step, a rank needs only its shard") + ")")
        return (f"the optimizer holds {total:,} elements = {total / shard:.3g} shards of P/n = {shard:,} (at most "
                f"{STATE_SHARDS}: the two moments and a copy of the shard; a full AdamW state is 2P = "
                f"{2 * n} shards){kept}")
    if total < 2 * shard:
        return (f"the optimizer holds {total:,} elements between steps, fewer than AdamW's two moments "
                f"(exp_avg and exp_avg_sq) of this rank's shard of P/n = {shard:,} elements: keep AdamW's "
                "state for your shard (a torch.optim.AdamW over a copy of the shard does)")
    return None


def probe_baseline(n: int, stage: int) -> dict:
    """The probe's weights as one process's AdamW leaves them after one step on the mean of
    the ``n`` ranks' losses: every ``PROBE_STRIDE``-th, before and after (after one step the
    rank's own shard is right even where the shards are never gathered, which the results
    part judges apart)."""
    import torch

    model = probe_model(PROBE_NUMEL, stage)
    before = model.weight.detach().reshape(-1)[::PROBE_STRIDE].numpy().copy()
    opt = torch.optim.AdamW(model.parameters(), lr=LR, eps=EPS, weight_decay=WEIGHT_DECAY)
    loss = sum(model(probe_input(stage, r)).square().mean() for r in range(n)) / n
    loss.backward()
    opt.step()
    return {"before": before, "after": model.weight.detach().reshape(-1)[::PROBE_STRIDE].numpy().copy()}


def check_probe(m: dict, rank: int, n: int, ref: dict) -> str | None:
    """The probe's weights on one rank: some shard of them (the rank's own, in a correct
    answer: it is there whether or not the shards are then gathered) must be one process's
    AdamW after the steps (as the results part judges the small model's: L2 difference at
    most ``PARAM_TOL`` of the update's), or the optimizer holds little because it skips
    AdamW's work. The state part does not wait for the results: a rank that steps its shard
    right and never gathers keeps these points."""
    got = decode(m.get("sample", ""), ref["after"].size)
    if got is None:
        return "the memory probe's layer came back in no readable form"
    where = np.arange(ref["after"].size) * PROBE_STRIDE * n // PROBE_NUMEL  # the shard of each sampled weight
    errors = []
    for k in range(n):
        part = where == k
        update = float(np.linalg.norm(ref["after"][part] - ref["before"][part]))
        errors.append(float(np.linalg.norm(got[part].astype(np.float64) - ref["after"][part])) / max(update, 1e-12))
    if min(errors) <= PARAM_TOL:
        return None
    return (f"after the first step of the memory probe's layer, no shard of rank {rank}'s weights is one "
            f"process's AdamW (L2 difference at least {min(errors):.2g} of the update): what an optimizer holds "
            "counts only while it does AdamW's work on its shard")


def check_memory(n: int, case, grew: dict | None) -> dict:
    """A memory probe's evidence: what each rank held at the probe's end beyond what it held
    at its group's start, less the probe layer's parameters, against ``STATE_SHARDS`` shards
    (``grew``: bytes per rank process, measured by the grader; None: not measured)."""
    if case[0] != "memory" or not grew:
        return {}
    params = 4 * PROBE_NUMEL
    shard = params // n
    allowed = STATE_SHARDS * shard + PROBE_SLACK
    held = max(grew.values()) - params
    if held <= allowed:
        return {}
    what = ""
    if held >= 2 * params - PROBE_SLACK:
        what = " (as much as AdamW's moments for all P parameters: keep only your shard's)"
    mib = 2**20
    return {"state": f"measured from outside the ranks, a rank held {held / mib:.1f} MiB after {PROBE_STEPS} steps of a "
                     f"{params // mib} MiB layer, beyond the layer itself; its sharded state is at most "
                     f"{STATE_SHARDS} shards of {shard / mib:g} MiB{what}"}


def grade(student, world_sizes=WORLD_SIZES, seeds=SEEDS, salt: int = 0, quiet=True,
          limits=None, isolate=True) -> Report:
    """Grade ``student`` (:class:`~assignments.common.Student`) at each world size, both stages."""
    from sandbox.multirank import Limits

    numel = sum(p.numel() for p in make_model(0).parameters())
    refs = {}

    probe_n = min(world_sizes)

    def reference(n, case):
        if case[0] == "memory":
            if n != probe_n:
                return None
            if (n, case) not in refs:
                with one_thread():
                    refs[(n, case)] = probe_baseline(n, case[1])
            return refs[(n, case)]
        if (n, case[1]) not in refs:
            refs[(n, case[1])] = dict(baseline(n, case[1], salt), salt=salt)
        return refs[(n, case[1])]

    def check(n, case, rank, m, ref) -> dict:
        stage = case[0]
        if stage == "memory":
            problem = check_probe(m, rank, n, ref) if n == probe_n else None
            return {"state": problem} if problem else {}
        fails = {f"result{stage}": check_result(m, rank, n, ref),
                 f"traffic{stage}": check_traffic(m, n, stage, numel),
                 "state": check_state(m, rank, n, ref, case)}
        return {part: text for part, text in fails.items() if text}

    runs = [(stage, seed) for stage in STAGES for seed in seeds] + [("memory", stage) for stage in STAGES]

    def payloads(n, indices):
        header = {"cases": indices, "runs": runs, "salt": salt, "probe": PROBE_NUMEL if n == probe_n else 0}
        per_case = [data(n, runs[c][1], salt) for c in indices if runs[c][0] != "memory"]
        return [payload(header, [a for x, y in per_case for a in (x[:, r], y[:, r])]) for r in range(n)]

    program = rank_program("a3_rank:main", student, (CLASS,), quiet, extra=(("a2_rank", rank_source("a2_rank")),))
    return grade_training(
        NAME, TITLES, POINTS, program, runs, header={}, payloads=payloads,
        describe=lambda case: (f"memory probe, stage {case[1]}" if case[0] == "memory"
                               else f"stage {case[0]}, seed {case[1]}"),
        reference=reference, check=check, check_memory=check_memory,
        judges=lambda case: ("state",) if case[0] == "memory" else POINTS,
        check_wire=lambda n, case, segments, held, messages: (
            {} if case[0] == "memory" else check_wire(n, case, segments, messages, numel)),
        wire_parts=("traffic2", "traffic1"), world_sizes=world_sizes,
        limits=limits or Limits(wall_s=300.0, stall_s=5.0, cpu_s=60.0), isolate=isolate)


def grade_file(path, **kwargs) -> Report:
    """Grade a submitted notebook or .py file (fresh inputs unless ``salt`` is given)."""
    return grade_submitted(path, NAME, TITLES, POINTS, grade, **kwargs)


def self_check(cls, world_sizes=WORLD_SIZES, seeds=SEEDS[:1]) -> float:
    """Run the grader on ``cls`` (defined in this notebook) and print its report; the ranks
    are forked from this process, so they have the class. Returns the score."""
    return run_self_check(grade, {CLASS: cls}, world_sizes, seeds)
