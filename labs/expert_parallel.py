"""Lab 8: expert parallelism, a mixture-of-experts layer's experts spread over the ranks.

Checked against one process, its all-to-alls counted, the cost of a skewed router measured:

    python -m labs.expert_parallel --nproc 2 [--backend auto|gloo|nccl] --report PATH

The layer (``moe_reference``) is a router and ``E`` SwiGLU experts: each token goes to the
``k`` experts of highest router score, and its output is the sum of their outputs weighted by
the gates, the router's probabilities of the chosen experts renormalised to sum to one (as in
Mixtral, Jiang et al. 2024; DeepSeek-V3 normalises its affinities the same way). With ``n``
ranks, rank ``r`` holds experts ``r E/n`` to ``(r+1) E/n - 1`` (``solutions.moe.expert_owner``)
and its own ``T`` tokens. Three functions make the layer expert-parallel:

* :func:`dispatch`: sort this rank's ``T k`` token copies by expert, tell every rank how many
  copies it will get (an all-to-all of ``E`` counts), then send each copy to the rank of its
  expert with ``all_to_all_single`` and uneven split sizes;
* the rank's experts compute the copies they received (:class:`LocalExperts`);
* :func:`combine`: the reverse all-to-all brings the outputs back in the order they left;
  each is weighted by its gate and summed into its token.

:class:`AllToAll` is an autograd function: its backward pass is the all-to-all with the splits
swapped, so the gradients travel the way the tokens came (GShard, Lepikhin et al. 2021).

Three routers: **balanced** (token ``t`` goes to experts ``t k, ..., t k + k - 1`` mod ``E``:
every rank sends every other rank the same number of copies), **learned** (the top ``k`` of
a random router) and **skewed** (the same router with a bias towards rank 0's experts, added
for the choice only, as DeepSeek-V3 adds its balancing bias: a router that has collapsed onto
a few experts). What it checks, for each router (``checks`` in the report):

* **EP = one process**: the output, the gradient of every input token, of the router (summed
  over ranks, as data parallelism would) and of every expert, within :data:`TOLERANCE`;
* **tokens per expert**: the copies each expert received, counted where they arrive, equal
  the routing's counts: every copy reached the rank that owns its expert, none was dropped;
* **all-to-alls**: two in the forward pass and two in the backward pass (plus one of counts),
  counted by the course's collective counter (``labs.training.CollectiveCounter``);
* **bytes**: what each rank sends in them, counted, equals
  ``solutions.moe.expert_parallel_bytes_from_counts`` for the routing it had (uneven for the
  learned and skewed routers), and for the balanced router
  ``solutions.moe.expert_parallel_bytes_per_layer``, ``4 T k h (n-1)/n`` elements;
* **step time**: the machine's matmul rate per token copy and gloo's all-to-all latency and
  bandwidth are measured, then ``solutions.moe.expert_parallel_layer_time`` predicts the step
  of the balanced and the skewed router; the measured times must lie within
  :data:`TIME_BOUND` (checked only where every rank has a core or a GPU of its own).

``--fault`` plants a known mistake (combine without the gates; all-to-alls that autograd does
not see, so none runs in the backward pass), to watch which checks catch it.
"""
from __future__ import annotations

import argparse
import math
import time
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from solutions._format import plural
from solutions import moe

from . import launch
from .report import check_at_most, check_exact, check_skipped
from .training import CollectiveCounter

LAB = "expert_parallel"
#: Bound on the relative L2 difference between the expert-parallel layer and the one-process
#: layer, fp32: the same products, the expert weights' gradients summed in another order.
TOLERANCE = 1e-5
#: How far a measured step time may lie from the prediction, relative. Lab 7 holds its CPU
#: predictions to a median miss of 40% (a factor either way, less one); here one layer is timed, on a
#: machine others share.
TIME_BOUND = 0.5
#: ``--pace auto`` on CPU: pad each expert's forward pass to 40 us per token copy (its backward
#: to twice that). A rank that sleeps out its padding needs no core, so the step time measures
#: the schedule (the busiest rank sets the pace) rather than the machine's load; the layer's own
#: compute, some fifty times less at the default width, still runs. On GPUs the experts run
#: unpadded.
DEFAULT_PACE = 4e-5
#: The skewed router's bias towards rank 0's experts, in units of the router's logits (whose
#: spread is about one): large enough that every token's top k land there when E/n >= k.
SKEW = 10.0
ROUTERS = ("balanced", "learned", "skewed")
#: Capacity factors at which the lab reports what a dropping layer would have dropped (Switch
#: Transformer's 1.0 and 1.25; Fedus et al. 2022, Table 1). The lab itself drops nothing.
CAPACITY_FACTORS = (1.0, 1.25)
FAULTS = ("none", "no-gates", "no-backward-all-to-all")

__all__ = ["TOLERANCE", "TIME_BOUND", "CAPACITY_FACTORS", "MoEConfig", "Experts", "LocalExperts", "route", "router_bias",
           "moe_reference", "AllToAll", "all_to_all", "dispatch", "combine", "ep_forward", "build_parser",
           "validate", "worker", "main"]


# --------------------------------------------------------------------------- the layer


@dataclass(frozen=True)
class MoEConfig:
    """One MoE layer: width ``d_model`` (h), each expert's hidden width ``ffn_hidden`` (f),
    ``num_experts`` routed experts (E), ``top_k`` of them per token (k)."""

    d_model: int = 32
    ffn_hidden: int = 64
    num_experts: int = 8
    top_k: int = 2

    def __post_init__(self):
        for name in ("d_model", "ffn_hidden", "num_experts", "top_k"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.top_k > self.num_experts:
            raise ValueError(f"top_k must be at most num_experts, got {self.top_k} > {self.num_experts}")

    def to_dict(self) -> dict:
        return asdict(self)


class Experts(nn.Module):
    """``E`` SwiGLU experts, ``w2 (silu(w1 x) * w3 x)`` (Shazeer 2020), stored as three
    stacked weight tensors: ``w1`` and ``w3`` of shape ``(E, f, h)``, ``w2`` of ``(E, h, f)``.
    ``first`` is the global index of the first expert held (0 for all of them)."""

    def __init__(self, cfg: MoEConfig, count: int | None = None, first: int = 0):
        super().__init__()
        count = cfg.num_experts if count is None else count
        h, f = cfg.d_model, cfg.ffn_hidden
        self.first = first
        self.pace = 0.0  # seconds per token copy the forward pass is padded to (twice that backward)
        self.w1 = nn.Parameter(torch.randn(count, f, h) / math.sqrt(h))
        self.w3 = nn.Parameter(torch.randn(count, f, h) / math.sqrt(h))
        self.w2 = nn.Parameter(torch.randn(count, h, f) / math.sqrt(f))

    @property
    def count(self) -> int:
        return self.w1.shape[0]

    def expert(self, j: int, rows: torch.Tensor) -> torch.Tensor:
        """Expert ``first + j`` on ``rows`` (``(m, h)``)."""
        return F.linear(F.silu(F.linear(rows, self.w1[j])) * F.linear(rows, self.w3[j]), self.w2[j])

    def forward(self, rows: torch.Tensor, row_experts: torch.Tensor) -> torch.Tensor:
        """Each row through its expert (``row_experts``: global ids of experts held here),
        in the rows' own order. Rows are grouped by expert first, so that each expert runs
        one matrix product on all its rows."""
        local = row_experts - self.first
        if rows.shape[0] and (local.min() < 0 or local.max() >= self.count):
            raise ValueError(f"a row is routed to an expert not held here (experts {self.first}.."
                             f"{self.first + self.count - 1})")
        if self.pace:
            clock = {"target": 2 * self.pace * rows.shape[0]}
            started = time.perf_counter()
            rows = _PaceBackwardEnd.apply(rows, clock)
        order = torch.argsort(local, stable=True)
        sizes = torch.bincount(local, minlength=self.count).tolist()
        # Every expert runs, even on no rows: the output then still depends on the rows and
        # the weights, so that autograd runs the backward all-to-alls on a rank that received
        # no token at all, as its peers do (else they would wait for it forever).
        out = torch.cat([self.expert(j, part) for j, part in enumerate(rows[order].split(sizes))])
        out = out[torch.argsort(order)]
        if self.pace:
            _sleep_until(started + self.pace * rows.shape[0])
            out = _PaceBackwardStart.apply(out, clock)
        return out

    def loads(self, row_experts: torch.Tensor) -> list[int]:
        """Rows each expert held here received."""
        return torch.bincount(row_experts - self.first, minlength=self.count).tolist()


def _sleep_until(deadline: float) -> None:
    left = deadline - time.perf_counter()
    if left > 0:
        time.sleep(left)


class _PaceBackwardStart(torch.autograd.Function):
    """Marks where the experts' backward pass starts (their output's gradient arrives)."""

    @staticmethod
    def forward(ctx, out, clock):
        ctx.clock = clock
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        ctx.clock["started"] = time.perf_counter()
        return grad, None


class _PaceBackwardEnd(torch.autograd.Function):
    """Where it ends (the gradient of the experts' input leaves): padded to ``target`` seconds."""

    @staticmethod
    def forward(ctx, rows, clock):
        ctx.clock = clock
        return rows.view_as(rows)

    @staticmethod
    def backward(ctx, grad):
        _sleep_until(ctx.clock.get("started", time.perf_counter()) + ctx.clock["target"])
        return grad, None


class LocalExperts(Experts):
    """Rank ``rank``'s share of ``experts`` under expert parallelism of degree ``ep``: the
    experts :func:`solutions.moe.expert_owner` assigns it, with the same weights."""

    def __init__(self, experts: Experts, cfg: MoEConfig, rank: int, ep: int):
        per = cfg.num_experts // ep
        super().__init__(cfg, per, rank * per)
        with torch.no_grad():
            for name in ("w1", "w3", "w2"):
                getattr(self, name).copy_(getattr(experts, name)[rank * per:(rank + 1) * per])


def router_bias(num_experts: int, ep: int, router: str) -> torch.Tensor | None:
    """The bias the router adds to its scores for the choice of experts: ``SKEW`` on rank
    0's experts for the skewed router, none otherwise."""
    if router != "skewed":
        return None
    bias = torch.zeros(num_experts)
    bias[: num_experts // ep] = SKEW
    return bias


def route(x: torch.Tensor, router_weight: torch.Tensor, top_k: int, selection_bias: torch.Tensor | None = None,
          round_robin: bool = False, expert_ids: torch.Tensor | None = None):
    """``(expert_ids, gates)`` of each token of ``x`` (``(T, h)``): the ``top_k`` experts of
    highest score ``x W^T + bias`` (ties to the lower expert), or with ``round_robin`` experts
    ``t k .. t k + k - 1`` mod ``E`` for token ``t``, or ``expert_ids`` as given; and the router's
    softmax probabilities of the chosen experts, renormalised to sum to one per token (the bias
    chooses but does not weigh: DeepSeek-V3 report, sec. 2.1.2). Gates carry gradients to the
    router and to ``x``; the choice does not (top-k is not differentiable)."""
    logits = F.linear(x, router_weight)
    probs = torch.softmax(logits, dim=-1)
    E = router_weight.shape[0]
    if expert_ids is None:
        if round_robin:
            t = torch.arange(x.shape[0], device=x.device).unsqueeze(1)
            expert_ids = (t * top_k + torch.arange(top_k, device=x.device)) % E
        else:
            scores = logits.detach() + (selection_bias.to(x.device) if selection_bias is not None else 0.0)
            expert_ids = torch.argsort(-scores, dim=1, stable=True)[:, :top_k]
    gates = probs.gather(1, expert_ids)
    return expert_ids, gates / gates.sum(dim=1, keepdim=True)


def moe_reference(x, router_weight, experts: Experts, expert_ids, gates=None, top_k=None):
    """The MoE layer on one process: every token copy through its expert, weighted by its gate,
    summed into its token (expert by expert, in increasing order). ``gates`` default to
    :func:`route`'s for ``expert_ids``."""
    if gates is None:
        _, gates = route(x, router_weight, expert_ids.shape[1], expert_ids=expert_ids)
    k = expert_ids.shape[1]
    flat = expert_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    out = experts(x[order // k], flat[order])
    return x.new_zeros(x.shape).index_add(0, order // k, out * gates.reshape(-1)[order].unsqueeze(1))


# --------------------------------------------------------------------------- expert parallelism


def all_to_all(x: torch.Tensor, send_splits: list, recv_splits: list) -> torch.Tensor:
    """Send ``send_splits[j]`` consecutive rows of ``x`` to rank ``j`` and receive
    ``recv_splits[j]`` rows from rank ``j``, in rank order (not differentiable)."""
    out = x.new_empty((sum(recv_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), recv_splits, send_splits)
    return out


class AllToAll(torch.autograd.Function):
    """The all-to-all as autograd sees it: forward, :func:`all_to_all`; backward, the same with
    the splits swapped, which returns every row's gradient to the rank that sent the row."""

    @staticmethod
    def forward(ctx, x, send_splits, recv_splits):
        ctx.splits = (list(send_splits), list(recv_splits))
        return all_to_all(x, send_splits, recv_splits)

    @staticmethod
    def backward(ctx, grad):
        send_splits, recv_splits = ctx.splits
        return all_to_all(grad, recv_splits, send_splits), None, None


def dispatch(x: torch.Tensor, expert_ids: torch.Tensor, num_experts: int, *, differentiable: bool = True):
    """Send this rank's token copies to the ranks of their experts. ``x``: ``(T, h)``;
    ``expert_ids``: ``(T, k)`` global expert ids. Returns ``(rows, row_experts, plan)``: the
    copies this rank's experts must compute, the global expert of each (grouped by source
    rank, then by expert), and what :func:`combine` needs to bring the outputs back."""
    n, r = dist.get_world_size(), dist.get_rank()
    if num_experts % n:
        raise ValueError(f"the world size {n} must divide num_experts={num_experts}")
    per = num_experts // n
    T, k = expert_ids.shape
    flat = expert_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)  # copies grouped by expert, hence by rank
    rows = x[order // k]
    send_counts = torch.bincount(flat, minlength=num_experts)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)  # E/n counts to each rank: its experts' share
    send_splits = send_counts.view(n, per).sum(1).tolist()
    recv_splits = recv_counts.view(n, per).sum(1).tolist()
    received = (AllToAll.apply if differentiable else all_to_all)(rows, send_splits, recv_splits)
    mine = torch.arange(r * per, (r + 1) * per, device=x.device)
    row_experts = mine.repeat(n).repeat_interleave(recv_counts)
    plan = {"order": order, "send_splits": send_splits, "recv_splits": recv_splits, "tokens": T, "top_k": k,
            "differentiable": differentiable}
    return received, row_experts, plan


def combine(expert_out: torch.Tensor, gates: torch.Tensor, plan: dict, *, use_gates: bool = True) -> torch.Tensor:
    """Bring the experts' outputs back to the ranks their tokens came from (the reverse
    all-to-all), weigh each by its gate and sum it into its token: ``(T, h)``."""
    back = (AllToAll.apply if plan["differentiable"] else all_to_all)(expert_out, plan["recv_splits"],
                                                                      plan["send_splits"])
    order, k = plan["order"], plan["top_k"]
    if use_gates:
        back = back * gates.reshape(-1)[order].unsqueeze(1)
    return back.new_zeros((plan["tokens"], back.shape[1])).index_add(0, order // k, back)


def ep_forward(x, router_weight, local: LocalExperts, cfg: MoEConfig, expert_ids, fault: str = "none"):
    """The expert-parallel layer on this rank: route, dispatch, compute, combine. Returns
    ``(y, rows_per_expert)``."""
    _, gates = route(x, router_weight, cfg.top_k, expert_ids=expert_ids)
    rows, row_experts, plan = dispatch(x, expert_ids, cfg.num_experts,
                                       differentiable=fault != "no-backward-all-to-all")
    out = local(rows, row_experts)
    return combine(out, gates, plan, use_gates=fault != "no-gates"), local.loads(row_experts)


# --------------------------------------------------------------------------- the runs


def _relative_l2(got, want) -> float:
    if got is None:
        got = torch.zeros_like(want)
    return float(torch.linalg.vector_norm(got.double() - want.double())
                 / max(float(torch.linalg.vector_norm(want.double())), 1e-30))


def _max_over_ranks(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _gather(obj) -> list:
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def make_layer(cfg: MoEConfig, tokens: int, n: int, seed: int, device):
    """The same layer and data on every rank: ``(router_weight, experts, x, probe)`` with
    ``n T`` tokens (rank ``r`` takes rows ``r T`` to ``(r+1) T - 1``). The router's weights are
    scaled so that its logits spread by about one."""
    g = torch.Generator().manual_seed(seed)
    router_weight = torch.randn(cfg.num_experts, cfg.d_model, generator=g) / math.sqrt(cfg.d_model)
    state = torch.random.get_rng_state()
    torch.manual_seed(seed + 1)
    experts = Experts(cfg)
    torch.random.set_rng_state(state)
    x = torch.randn(n * tokens, cfg.d_model, generator=g)
    probe = torch.randn(n * tokens, cfg.d_model, generator=g)  # loss = sum(y * probe)
    return router_weight.to(device), experts.to(device), x.to(device), probe.to(device)


def check_router(ctx, cfg: MoEConfig, tokens: int, seed: int, router: str, fault: str) -> tuple[list, dict]:
    """One router: the expert-parallel layer against one process, its copies, calls and bytes."""
    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    W, experts, x_all, probe_all = make_layer(cfg, tokens, n, seed, dev)
    mine = slice(r * tokens, (r + 1) * tokens)
    x = x_all[mine].clone().requires_grad_(True)
    Wr = W.clone().requires_grad_(True)
    ids, _ = route(x, Wr, cfg.top_k, router_bias(cfg.num_experts, n, router), round_robin=router == "balanced")
    ids = ids.detach()
    all_ids = torch.cat(_gather(ids.cpu())).to(dev)  # the routing every rank chose, for the reference
    local = LocalExperts(experts, cfg, r, n).to(dev)
    with CollectiveCounter() as fwd:
        y, loads = ep_forward(x, Wr, local, cfg, ids, fault)
    with CollectiveCounter() as bwd:
        (y * probe_all[mine]).sum().backward()
    if Wr.grad is not None:
        dist.all_reduce(Wr.grad)  # data parallelism's sum over ranks, for the replicated router

    xr, Wref = x_all.clone().requires_grad_(True), W.clone().requires_grad_(True)
    y_ref = moe_reference(xr, Wref, experts, all_ids)
    (y_ref * probe_all).sum().backward()
    out_diff = _relative_l2(y.detach(), y_ref.detach()[mine])
    per = cfg.num_experts // n
    grads = {"input": _relative_l2(x.grad, xr.grad[mine]), "router": _relative_l2(Wr.grad, Wref.grad)}
    for name in ("w1", "w3", "w2"):
        grads[f"experts {name}"] = _relative_l2(getattr(local, name).grad,
                                                getattr(experts, name).grad[r * per:(r + 1) * per])

    C = moe.routing_counts([a.cpu().numpy() for a in all_ids.split(tokens)], cfg.num_experts, n)
    routed = np.bincount(all_ids.cpu().numpy().ravel(), minlength=cfg.num_experts)
    counted = np.array([v for rank_loads in _gather(loads) for v in rank_loads])
    token_a2a = [[a for a in c.all_to_all if a["floating"]] for c in (fwd, bwd)]
    count_a2a = [a for a in fwd.all_to_all if not a["floating"]]
    sent = _gather(int(sum(a["sent"] for phase in token_a2a for a in phase)))
    count_sent = _gather(int(sum(a["sent"] for a in count_a2a)))
    others = _gather(sorted({k for c in (fwd, bwd) for k in c.calls if k != "all_to_all"}))
    fp32 = 4
    predicted = moe.expert_parallel_bytes_from_counts(C, cfg.d_model, fp32)

    label = router
    checks = [
        check_at_most(f"{label}: output vs one process, relative L2", TOLERANCE, _max_over_ranks(out_diff, dev)),
        check_at_most(f"{label}: gradients (input, router, experts) vs one process, worst relative L2", TOLERANCE,
                      _max_over_ranks(max(grads.values()), dev)),
    ]
    c = check_exact(f"{label}: token copies the busiest expert received (counted where they arrive)",
                    int(routed.max()), int(counted.max()), unit="copies")
    c["ok"] = c["ok"] and counted.tolist() == routed.tolist()
    checks.append(c)
    rank_loads = C.sum(axis=0)
    measured_rank_loads = counted.reshape(n, per).sum(axis=1)
    c = check_exact(f"{label}: load imbalance across ranks (busiest / mean)", moe.load_imbalance(rank_loads),
                    moe.load_imbalance(measured_rank_loads), unit="")
    checks.append(c)
    for phase, calls in (("forward", token_a2a[0]), ("backward", token_a2a[1])):
        checks.append(check_exact(f"{label}: all-to-alls of tokens, {phase}", 2, len(calls), unit=""))
    c = check_exact(f"{label}: bytes each rank sends in them per layer (counted, busiest rank)",
                    float(predicted.max()), max(sent))
    c["ok"] = c["ok"] and np.allclose(sent, predicted, rtol=0, atol=0.5) and not any(others)
    checks.append(c)
    if router == "balanced":
        checks.append(check_exact("balanced: bytes per layer = expert_parallel_bytes_per_layer (4 T k h (n-1)/n elements x 4 bytes)",
                                  moe.expert_parallel_bytes_per_layer(tokens, cfg.d_model, cfg.top_k, n, fp32),
                                  max(sent)))
        c = check_exact("count exchange: bytes each rank sends (E/n int64 counts to each other rank)",
                        moe.count_exchange_bytes(cfg.num_experts, n), max(count_sent))
        c["ok"] = c["ok"] and len(set(count_sent)) == 1 and len(count_a2a) == 1
        checks.append(c)
    capacity = {cf: int(moe.expert_capacity(n * tokens, cfg.num_experts, cfg.top_k, cf)) for cf in CAPACITY_FACTORS}
    metrics = {"send_counts": C.tolist(), "tokens_per_expert": counted.tolist(),
               "expert_imbalance": moe.load_imbalance(counted),
               "rank_imbalance": moe.load_imbalance(measured_rank_loads),
               "bytes_sent_per_rank": sent, "predicted_bytes_per_rank": predicted.tolist(),
               "other_collectives": sorted({k for o in others for k in o}),
               "dropped_at_capacity_factor": {str(cf): moe.dropped_fraction(counted, cap)
                                              for cf, cap in capacity.items()},
               "gradient_differences": grads}
    return checks, metrics


# --------------------------------------------------------------------------- timing


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step, device) -> float:
    dist.barrier()
    _sync(device)
    t0 = time.perf_counter()
    step()
    _sync(device)
    return time.perf_counter() - t0


A2A_ROWS = (16, 4096)  # rows per peer of the all-to-all micro-benchmark, small and large


def timing_steps(ctx, cfg: MoEConfig, tokens: int, seed: int, pace: float = 0.0) -> tuple[dict, dict]:
    """``{name: step}`` to time, and each EP run's traffic matrix: the layer alone on one rank
    (every rank at once, no communication) at ``T`` and ``2 T`` tokens; the expert-parallel
    layer with the balanced and the skewed router; the all-to-all at two sizes."""
    n, r, dev = ctx.world_size, ctx.rank, ctx.device
    W, experts, x_all, probe_all = make_layer(cfg, 2 * tokens if n == 1 else tokens, max(n, 2), seed, dev)
    experts.pace = pace
    steps, matrices = {}, {}
    for name, count in (("one process, T tokens", tokens), ("one process, 2T tokens", 2 * tokens)):
        xs, ps = x_all[:count], probe_all[:count]
        ids, _ = route(xs, W, cfg.top_k)

        def one(xs=xs, ps=ps, ids=ids):
            xg = xs.clone().requires_grad_(True)
            (moe_reference(xg, W, experts, ids) * ps).sum().backward()
            experts.zero_grad(set_to_none=True)
        steps[name] = one
    local = LocalExperts(experts, cfg, r, n).to(dev)
    local.pace = pace
    mine = slice(r * tokens, (r + 1) * tokens)
    for router in ("balanced", "skewed"):
        xs, ps = x_all[mine], probe_all[mine]
        ids, _ = route(xs, W, cfg.top_k, router_bias(cfg.num_experts, n, router), round_robin=router == "balanced")
        all_ids = _gather(ids.cpu())
        matrices[router] = moe.routing_counts([a.numpy() for a in all_ids], cfg.num_experts, n)

        def ep(xs=xs, ps=ps, ids=ids):
            xg = xs.clone().requires_grad_(True)
            y, _ = ep_forward(xg, W, local, cfg, ids)
            (y * ps).sum().backward()
            local.zero_grad(set_to_none=True)
        steps[f"expert parallel, {router} router"] = ep
    for size, rows in zip(("small", "large"), A2A_ROWS):
        buf = torch.zeros(n * rows, cfg.d_model, device=dev)
        steps[f"all-to-all, {size}"] = lambda buf=buf: all_to_all(buf, [buf.shape[0] // n] * n, [buf.shape[0] // n] * n)
    return steps, matrices


def calibration(cfg: MoEConfig, tokens: int, n: int, best: dict) -> dict:
    """The machine's constants from the least times: seconds per token copy and the fixed part
    from the two one-process runs (``T k`` and ``2 T k`` copies), and gloo's latency per
    message and bandwidth from the all-to-all at two sizes (``t = (n-1) alpha + sent / beta``)."""
    k = cfg.top_k
    t1, t2 = best["one process, T tokens"], best["one process, 2T tokens"]
    per_copy = max(t2 - t1, 1e-9) / (tokens * k)
    fixed = max(t1 - per_copy * tokens * k, 0.0)
    out = {"seconds_per_copy": per_copy, "fixed_s": fixed,
           "copy_flops_per_s": moe.expert_flops_per_copy(cfg.d_model, cfg.ffn_hidden) / per_copy}
    if n > 1:
        row = cfg.d_model * 4
        small, large = ((n - 1) * rows * row for rows in A2A_ROWS)  # bytes each rank sends
        ts, tl = best["all-to-all, small"], best["all-to-all, large"]
        bandwidth = (large - small) / (tl - ts) if tl > ts else large / tl
        out.update(bandwidth_bytes_per_s=bandwidth, latency_s=max(0.0, (ts - small / bandwidth) / (n - 1)))
    else:  # one rank: nothing travels
        out.update(bandwidth_bytes_per_s=None, latency_s=0.0)
    return out


def predict_step(cfg: MoEConfig, n: int, cal: dict, C) -> moe.MoELayerTime:
    """``solutions.moe.expert_parallel_layer_time`` with this machine's constants."""
    bw = cal["bandwidth_bytes_per_s"]
    return moe.expert_parallel_layer_time(
        C, cal["seconds_per_copy"], cfg.d_model * 4, bw if bw else 1.0, cal["latency_s"],
        fixed_s=cal["fixed_s"], count_exchange_s=(n - 1) * cal["latency_s"])


def resolve_pace(pace, device) -> float:
    """``--pace`` in seconds: ``auto`` is :data:`DEFAULT_PACE` on CPU and 0 on GPUs (``device``
    None: only checked); a bad value is a one-line ``ValueError``."""
    if pace == "auto":
        return 0.0 if device is not None and device.type == "cuda" else DEFAULT_PACE
    try:
        value = float(pace)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and 0 <= value <= 1):
        raise ValueError(f"--pace must be 'auto' or seconds per token copy in [0, 1], got {pace!r}")
    return value


def timing_checks(ctx, args, cfg: MoEConfig) -> tuple[list, dict]:
    """Time every step of :func:`timing_steps` in turn for ``--repeats`` rounds (each one's
    least time over rounds counts, a step lasting as long as its slowest rank), calibrate, and
    compare the predicted step times with the measured ones."""
    n, dev = ctx.world_size, ctx.device
    pace = resolve_pace(args.pace, dev)
    steps, matrices = timing_steps(ctx, cfg, args.time_tokens, args.seed + 7, pace)
    for step in steps.values():  # warm-up
        step()
    times = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():
            times[name].append(_timed(step, dev))
    best = {}
    for name, values in times.items():
        t = torch.tensor(values, dtype=torch.float64, device=dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        best[name] = float(t.min())
    cal = calibration(cfg, args.time_tokens, n, best)
    rows = {}
    for router in ("balanced", "skewed"):
        pred = predict_step(cfg, n, cal, matrices[router])
        measured = best[f"expert parallel, {router} router"]
        rows[router] = {"predicted_s": pred.step_s, "measured_s": measured, "compute_s": pred.compute_s.tolist(),
                        "communication_s": pred.communication_s, "imbalance": pred.imbalance,
                        "send_counts": matrices[router].tolist()}
        ctx.log(f"timing: {router} router: predicted {1e3 * pred.step_s:.1f} ms (busiest rank computes "
                f"{1e3 * max(pred.compute_s):.1f} ms, all-to-alls {1e3 * pred.communication_s:.2f} ms), "
                f"measured {1e3 * measured:.1f} ms")
    ratio_pred = rows["skewed"]["predicted_s"] / rows["balanced"]["predicted_s"]
    ratio_meas = rows["skewed"]["measured_s"] / rows["balanced"]["measured_s"]
    ctx.log(f"timing: skewed / balanced step time: predicted {ratio_pred:.2f}, measured {ratio_meas:.2f}")
    names = [f"{router}: step time, |measured / predicted - 1|" for router in ("balanced", "skewed")]
    names.append("cost of imbalance (skewed / balanced step time), |measured / predicted - 1|")
    cores = launch.cpu_cores()
    if dev.type == "cpu" and n > cores and not pace:
        why = f"{n} ranks share {plural(cores, 'core')}: the timings measure the sharing, not the layer"
        checks = [check_skipped(name, why, TIME_BOUND, unit="") for name in names]
    else:
        errors = [abs(rows[r_]["measured_s"] / rows[r_]["predicted_s"] - 1) for r_ in ("balanced", "skewed")]
        errors.append(abs(ratio_meas / ratio_pred - 1))
        checks = [check_at_most(name, TIME_BOUND, err) for name, err in zip(names, errors)]
    report = {"pace_s": pace, "calibration": cal, "least_seconds": best, "runs": rows,
              "imbalance_cost": {"predicted": ratio_pred, "measured": ratio_meas}}
    return checks, report


# --------------------------------------------------------------------------- the lab


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.expert_parallel", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("expert parallel")
    g.add_argument("--experts", type=int, default=8, help="routed experts E (the world size must divide it)")
    g.add_argument("--top-k", type=int, default=2, help="experts per token k")
    g.add_argument("--d-model", type=int, default=32, help="width h of the checked layer")
    g.add_argument("--ffn-hidden", type=int, default=64, help="each expert's hidden width f (checked layer)")
    g.add_argument("--tokens", type=int, default=64, help="tokens per rank T of the checked layer")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--fault", choices=FAULTS, default="none",
                   help="plant a known mistake: no-gates (combine ignores the router's weights), "
                        "no-backward-all-to-all (all-to-alls autograd does not see)")
    t = parser.add_argument_group("timing")
    t.add_argument("--no-timing", action="store_true", help="skip the timed runs and the step-time checks")
    t.add_argument("--time-d-model", type=int, default=32, help="width h of the timed layer")
    t.add_argument("--time-ffn-hidden", type=int, default=64, help="expert hidden width f of the timed layer")
    t.add_argument("--time-tokens", type=int, default=256, help="tokens per rank of the timed layer")
    t.add_argument("--pace", default="auto",
                   help="seconds per token copy each expert's forward pass is padded to (twice that backward), "
                        f"so that timings measure the schedule, not the machine's load; auto: {DEFAULT_PACE:g} on "
                        "CPU, 0 (unpadded) on GPUs; 0: the layer as it runs (checked only where every rank has a core)")
    t.add_argument("--repeats", type=int, default=5, help="timed rounds (the least time of each run counts)")
    return parser


def _configs(args) -> tuple[MoEConfig, MoEConfig]:
    checked = MoEConfig(args.d_model, args.ffn_hidden, args.experts, args.top_k)
    timed = MoEConfig(args.time_d_model, args.time_ffn_hidden, args.experts, args.top_k)
    return checked, timed


def validate(args, world_size: int) -> tuple[MoEConfig, MoEConfig]:
    """The two layers of these arguments, or a one-line ``ValueError`` before any rank starts."""
    n = world_size
    for flag in ("experts", "top_k", "d_model", "ffn_hidden", "tokens", "time_d_model", "time_ffn_hidden",
                 "time_tokens", "repeats"):
        if getattr(args, flag) < 1:
            raise ValueError(f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}")
    if args.top_k > args.experts:
        raise ValueError(f"--top-k {args.top_k} must be at most --experts {args.experts}")
    resolve_pace(args.pace, None)
    if args.experts % n:
        raise ValueError(f"--experts {args.experts} must be divisible by the expert-parallel degree {n} (--nproc): "
                         "every rank holds the same number of experts")
    for flag, tokens in (("--tokens", args.tokens), ("--time-tokens", args.time_tokens)):
        if tokens * args.top_k % args.experts:
            raise ValueError(f"{flag} {tokens} times --top-k {args.top_k} must be a multiple of --experts "
                             f"{args.experts}, so that the balanced router gives every expert the same load")
    checked, timed = _configs(args)
    # Each rank holds the whole layer (its reference) and the tokens of every rank, with their
    # gradients, the expert activations (f wide) and the timed layer: a generous estimate.
    per_rank = 4 * (6 * checked.num_experts * checked.d_model * checked.ffn_hidden
                    + 6 * n * args.tokens * (checked.d_model + args.top_k * checked.ffn_hidden)
                    + 6 * timed.num_experts * timed.d_model * timed.ffn_hidden
                    + 12 * max(n, 2) * args.time_tokens * (timed.d_model + args.top_k * timed.ffn_hidden))
    launch.check_fits_in_memory(per_rank, n, "--tokens/--time-tokens/--d-model/--ffn-hidden",
                                getattr(args, "backend", "auto"))
    return checked, timed


def worker(ctx, args) -> dict:
    n = ctx.world_size
    checked, timed = validate(args, n)
    ctx.log(f"expert parallel degree {n}: {checked.num_experts} experts ({checked.num_experts // n} per rank), "
            f"top-{checked.top_k}; checked layer h={checked.d_model}, f={checked.ffn_hidden}, {args.tokens} tokens "
            f"per rank" + ("" if args.fault == "none" else f"; planted fault: {args.fault}"))
    checks, metrics = [], {}
    for i, router in enumerate(ROUTERS):
        ctx.maybe_fail(i)
        found, metrics[router] = check_router(ctx, checked, args.tokens, args.seed, router, args.fault)
        checks += found
    timing = None
    if not args.no_timing:
        ctx.maybe_fail(len(ROUTERS))
        found, timing = timing_checks(ctx, args, timed)
        checks += found
    return {
        "config": {"ep": n, "layer": checked.to_dict(), "tokens_per_rank": args.tokens, "timed_layer": timed.to_dict(),
                   "timed_tokens_per_rank": args.time_tokens, "repeats": args.repeats, "skew": SKEW,
                   "fault": args.fault, "dtype": "torch.float32", "tolerance": TOLERANCE, "time_bound": TIME_BOUND,
                   "bytes_per_element": 4},
        "checks": checks,
        "metrics": metrics,
        "timing": timing,
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
