"""Lab 4: tensor parallelism (Megatron) by hand, checked against one process and PyTorch.

    python -m labs.tensor_parallel --nproc 2 [--backend auto|gloo|nccl] --report PATH

The ranks form one tensor-parallel group of degree ``t``. Each holds ``1/t`` of every weight
matrix of a stack of the labs' transformer blocks (``labs/model.py``): in attention, the query,
key and value projections split by columns (whole heads per rank) and the output projection by
rows; in the MLP, the first matrix by columns and the second by rows (Shoeybi et al. 2019,
sec. 3). Megatron's conjugate operators are named autograd functions here:
:class:`CopyToTensorParallel` (``f``: identity forward, all-reduce backward) and
:class:`ReduceFromTensorParallel` (``g``: all-reduce forward, identity backward). With
``--sequence-parallel`` they become :class:`AllGatherSequence` and :class:`ReduceScatterSequence`
(Korthikanti et al. 2022, sec. 4.2.2). By default every collective is a hand-written ring of
point-to-point sends (as in Lab 1), so that the bytes are counted send by send.

What it checks (``checks`` in the report):

* **TP = one process**: the output, the input's gradient and every parameter's gradient (the
  matching slice of the unsharded block's) agree to float tolerance; with and without
  sequence parallelism.
* **Collectives per layer**: two all-reduces in the forward pass and two in the backward pass
  (``solutions.model_parallel.tensor_parallel_collectives_per_layer``); with sequence
  parallelism, all-gathers and reduce-scatters instead.
* **Bytes**: what each rank sends per layer, counted in the ring, equals ``8 b s h (t-1)/t``
  elements (``solutions.communication.tensor_parallel_bytes_per_layer``), and the same with
  sequence parallelism (``sequence_parallel_bytes_per_layer``).
* **Activation memory**: the bytes autograd keeps for the backward pass, counted tensor by
  tensor; sequence parallelism saves exactly the layer norms' share
  (``norm_activation_elements_per_layer``).
* **PyTorch's own**: the same blocks through ``torch.distributed.tensor.parallel``
  (``ColwiseParallel``, ``RowwiseParallel``, ``parallelize_module``) give the same output and
  gradients as the hand-written version, with the same collectives (counted by
  ``CommDebugMode``).
"""
from __future__ import annotations

import argparse
import copy
from collections import Counter

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from solutions._format import plural
from solutions.communication import tensor_parallel_bytes_per_layer
from solutions.model_parallel import (norm_activation_elements_per_layer, sequence_parallel_bytes_per_layer,
                                      tensor_parallel_collectives_per_layer)

from . import ddp, launch
from .collectives import RING_STUB_NOTE, RingStats, resolve_ring_mode, all_gather_single, reduce_scatter_single, ring_all_reduce
from .model import Block, GPTConfig
from .training import check_model_fits
from .report import check_at_most, check_exact, check_skipped

LAB = "tensor_parallel"
#: Bound on the relative L2 difference between a tensor-parallel result and the unsharded
#: one, in fp32: the two sum the same products in different orders (a row-parallel matmul
#: adds t partial sums), so they differ by roundings of about 1e-7 relative.
TOLERANCE = 1e-5
COMM_MODES = ("ring", "builtin", "none")

__all__ = ["TensorParallelComm", "CopyToTensorParallel", "ReduceFromTensorParallel", "AllGatherSequence",
           "ReduceScatterSequence", "TensorParallelBlock", "shard_slicers", "SavedTensorBytes",
           "torch_tp_blocks", "relative_l2", "build_parser", "worker", "main"]


# --------------------------------------------------------------------------- communication


class TensorParallelComm:
    """The collectives of one tensor-parallel group, counted.

    ``mode='ring'``: hand-written rings of point-to-point sends, every byte sent counted in
    ``ring.bytes_sent``; ``'builtin'``: ``torch.distributed``'s collectives (NCCL's or
    gloo's own algorithms); ``'none'``: no communication at all (each rank keeps its partial
    result), to see the checks fail. ``calls[(phase, kind)]`` counts the collectives issued
    (none with ``'none'``: nothing is communicated, and the counts say so)."""

    def __init__(self, group=None, mode: str = "ring"):
        if mode not in COMM_MODES:
            raise ValueError(f"mode must be one of {COMM_MODES}, got {mode!r}")
        self.group = group
        self.mode = mode
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.calls: Counter = Counter()
        self.ring = RingStats()

    def _peer(self, index: int) -> int:
        index %= self.size
        return dist.get_global_rank(self.group, index) if self.group is not None else index

    def _exchange(self, send: torch.Tensor, recv: torch.Tensor) -> None:
        # Post the send to the right and the receive from the left together, as Lab 1's ring.
        ops = [dist.P2POp(dist.isend, send, self._peer(self.rank + 1), self.group),
               dist.P2POp(dist.irecv, recv, self._peer(self.rank - 1), self.group)]
        for req in dist.batch_isend_irecv(ops):
            req.wait()
        self.ring.bytes_sent += send.numel() * send.element_size()
        self.ring.steps += 1

    def all_reduce(self, x: torch.Tensor, phase: str) -> torch.Tensor:
        """Sum ``x`` (contiguous) over the group, in place."""
        self.calls[(phase, "all_reduce")] += self.mode != "none"
        if self.size == 1 or self.mode == "none":
            return x
        if self.mode == "ring":
            return ring_all_reduce(x, self.ring, self.group)
        dist.all_reduce(x, group=self.group)
        return x

    def all_gather(self, shard: torch.Tensor, phase: str) -> torch.Tensor:
        """Concatenate the ranks' ``shard`` along dimension 0 (rank order)."""
        self.calls[(phase, "all_gather")] += self.mode != "none"
        n, r = self.size, self.rank
        if n == 1:
            return shard
        shard = shard.contiguous()
        out = shard.new_zeros((n * shard.shape[0], *shard.shape[1:]))
        chunks = out.view(n, -1)
        chunks[r].copy_(shard.view(-1))
        if self.mode == "ring":
            # Step s: pass on the chunk received in the step before (our own at s = 0).
            for s in range(n - 1):
                self._exchange(chunks[(r - s) % n], chunks[(r - s - 1) % n])
        elif self.mode == "builtin":
            all_gather_single(out, shard, group=self.group)
        return out

    def reduce_scatter(self, x: torch.Tensor, phase: str) -> torch.Tensor:
        """Sum ``x`` over the group and return this rank's slice of dimension 0."""
        self.calls[(phase, "reduce_scatter")] += self.mode != "none"
        n, r = self.size, self.rank
        if n == 1:
            return x
        x = x.contiguous()
        if self.mode == "builtin":
            out = x.new_empty((x.shape[0] // n, *x.shape[1:]))
            reduce_scatter_single(out, x, group=self.group)
            return out
        chunks = x.clone().view(n, -1)
        if self.mode == "ring":
            # Step s: send the partial sum of chunk r-s-1, add the incoming partial sum of
            # chunk r-s-2 to ours. After n-1 steps chunk r, begun by rank r+1, has visited
            # every rank and ends here complete (Lab 1's reduce-scatter, shifted by one).
            incoming = torch.empty_like(chunks[0])
            for s in range(n - 1):
                self._exchange(chunks[(r - s - 1) % n], incoming)
                chunks[(r - s - 2) % n].add_(incoming)
        return chunks[r].view(x.shape[0] // n, *x.shape[1:])


# Megatron's operators. The sequence-parallel pair works on (batch, sequence, width)
# activations and splits the sequence; it moves the sequence to the front so that each
# rank's part is one contiguous block.


class CopyToTensorParallel(torch.autograd.Function):
    """Megatron's ``f``: identity in the forward pass; in the backward pass, all-reduce the
    input's gradient, because every rank used the same input (Shoeybi et al. 2019, Fig. 3)."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_reduce(grad.contiguous().clone(), "backward"), None


class ReduceFromTensorParallel(torch.autograd.Function):
    """Megatron's ``g``: all-reduce the ranks' partial outputs in the forward pass; identity
    in the backward pass (every rank needs the whole output's gradient, and has it)."""

    @staticmethod
    def forward(ctx, x, comm):
        return comm.all_reduce(x.contiguous().clone(), "forward")

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class AllGatherSequence(torch.autograd.Function):
    """Sequence parallelism's ``g`` (Korthikanti et al. 2022, sec. 4.2.2): all-gather the
    sequence-split activation before a column-parallel matmul; reduce-scatter its gradient."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.all_gather(x.transpose(0, 1), "forward").transpose(0, 1)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.reduce_scatter(grad.transpose(0, 1), "backward").transpose(0, 1), None


class ReduceScatterSequence(torch.autograd.Function):
    """Sequence parallelism's ``g-bar``: reduce-scatter the partial outputs of a row-parallel
    matmul along the sequence; all-gather the gradient in the backward pass."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return comm.reduce_scatter(x.transpose(0, 1), "forward").transpose(0, 1)

    @staticmethod
    def backward(ctx, grad):
        return ctx.comm.all_gather(grad.transpose(0, 1), "backward").transpose(0, 1), None


# --------------------------------------------------------------------------- the block


def shard_slicers(d_model: int, t: int, r: int) -> dict:
    """For each parameter of a ``labs.model.Block``, the function that cuts rank ``r``'s part
    out of the unsharded tensor (applied to weights to build the shard, and to gradients to
    check it). Column-parallel matrices keep rows of ``weight`` (PyTorch stores ``out x in``),
    row-parallel ones keep columns; norms and the row-parallel biases are replicated."""
    d = d_model
    att, mlp = slice(r * d // t, (r + 1) * d // t), slice(r * 4 * d // t, (r + 1) * 4 * d // t)

    def whole(w):
        return w

    def qkv(w):  # query, key and value rows of this rank's heads, in that order
        return torch.cat([w[i * d:(i + 1) * d][att] for i in range(3)])

    return {
        "ln1.weight": whole, "ln1.bias": whole,
        "attn.qkv.weight": qkv, "attn.qkv.bias": qkv,
        "attn.proj.weight": lambda w: w[:, att], "attn.proj.bias": whole,
        "ln2.weight": whole, "ln2.bias": whole,
        "mlp.fc.weight": lambda w: w[mlp], "mlp.fc.bias": lambda w: w[mlp],
        "mlp.proj.weight": lambda w: w[:, mlp], "mlp.proj.bias": whole,
    }


class TensorParallelBlock(nn.Module):
    """Rank ``comm.rank``'s shard of a ``labs.model.Block``, written out with functional ops
    so that every communication is visible. Parameters keep the block's names (dots become
    underscores); :attr:`sources` maps them back."""

    def __init__(self, block: Block, n_head: int, comm: TensorParallelComm, sequence_parallel: bool = False):
        super().__init__()
        d = block.ln1.normalized_shape[0]
        t = comm.size
        if n_head % t:
            raise ValueError(f"the tensor-parallel degree {t} must divide n_head={n_head} (whole heads per rank)")
        self.comm, self.sequence_parallel = comm, sequence_parallel
        self.width, self.local_heads, self.head_dim = d // t, n_head // t, d // n_head
        self.slicers = shard_slicers(d, t, comm.rank)
        self.sources = {}
        for name, param in block.named_parameters():
            local = self.slicers[name](param.detach()).clone().contiguous()
            self.register_parameter(name.replace(".", "_"), nn.Parameter(local))
            self.sources[name.replace(".", "_")] = name

    def p(self, name: str):
        """The local parameter with the block's name ``name``; ``None`` if the block has none
        (a block built without biases or norm weights, as in ``labs.grid3d``)."""
        return getattr(self, name.replace(".", "_"), None)

    def enter(self, x):
        """Into the tensor-parallel region: ``f``, or all-gather the sequence."""
        if self.sequence_parallel:
            return AllGatherSequence.apply(x, self.comm)
        return CopyToTensorParallel.apply(x, self.comm)

    def leave(self, x):
        """Out of it: ``g``, or reduce-scatter along the sequence."""
        if self.sequence_parallel:
            return ReduceScatterSequence.apply(x, self.comm)
        return ReduceFromTensorParallel.apply(x, self.comm)

    def forward(self, x):
        """``x``: ``(batch, sequence, width)``; with sequence parallelism, this rank's
        ``1/t`` of the sequence."""
        p, C = self.p, x.shape[-1]
        h = self.enter(F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias")))
        B, T, _ = h.shape
        q, k, v = (z.reshape(B, T, self.local_heads, self.head_dim).transpose(1, 2)
                   for z in F.linear(h, p("attn.qkv.weight"), p("attn.qkv.bias")).split(self.width, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, self.width)
        x = _plus(x + self.leave(F.linear(y, p("attn.proj.weight"))), p("attn.proj.bias"))  # bias once, after the sum
        h = self.enter(F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias")))
        y = F.linear(F.gelu(F.linear(h, p("mlp.fc.weight"), p("mlp.fc.bias"))), p("mlp.proj.weight"))
        return _plus(x + self.leave(y), p("mlp.proj.bias"))

    def replicated(self):
        """Parameters every rank holds in full (norms, row-parallel biases)."""
        return [getattr(self, n) for n, src in self.sources.items()
                if src.startswith(("ln", "attn.proj.bias", "mlp.proj.bias"))]


def _plus(x, bias):
    return x if bias is None else x + bias


def sync_sequence_parallel_grads(blocks, comm: TensorParallelComm) -> None:
    """With sequence parallelism each rank's norms saw only its part of the sequence, so
    the replicated parameters' gradients are partial sums: all-reduce them (Megatron does
    the same). Not activation traffic; counted under phase ``'params'``."""
    grads = [p.grad for b in blocks for p in b.replicated()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    comm.all_reduce(flat, "params")
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


# --------------------------------------------------------------------------- measurement


class SavedTensorBytes:
    """Bytes autograd keeps for the backward pass, counted tensor by tensor with
    ``saved_tensors_hooks``: distinct storages only (views of one buffer count once), and no
    parameters (weights are model state, not activations)."""

    def __init__(self, params):
        self.exclude = {p.untyped_storage().data_ptr() for p in params}
        self.storages: dict[int, int] = {}

    def _pack(self, t):
        s = t.untyped_storage()
        if s.data_ptr() not in self.exclude:
            self.storages[s.data_ptr()] = s.nbytes()
        return t

    def __enter__(self):
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        self._hooks.__exit__(*exc)

    @property
    def bytes(self) -> int:
        return sum(self.storages.values())


def relative_l2(x: torch.Tensor, y: torch.Tensor) -> float:
    """``|x - y| / |y|`` in L2 norm, for one pair of tensors (Lab 2's ``relative_l2``)."""
    return ddp.relative_l2([x], [y])


def _max_over_ranks(value: float, device) -> float:
    t = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _seq_shard(x: torch.Tensor, t: int, r: int) -> torch.Tensor:
    T = x.shape[1] // t
    return x[:, r * T:(r + 1) * T]


def run_hand_tp(ref_blocks, x, probe, ref_out, ref_x_grad, cfg, comm, sequence_parallel, device):
    """Forward and backward through the hand-written shards; returns the worst relative
    differences from the unsharded run, the saved-activation bytes, and the calls made."""
    t, r = comm.size, comm.rank
    blocks = [TensorParallelBlock(b, cfg.n_head, comm, sequence_parallel).to(device) for b in ref_blocks]
    params = [p for b in blocks for p in b.parameters()]
    xin = (_seq_shard(x, t, r) if sequence_parallel else x).detach().clone().requires_grad_(True)
    comm.calls.clear()
    sent_before = comm.ring.bytes_sent
    with SavedTensorBytes(params) as saved:
        out = xin
        for b in blocks:
            out = b(out)
    target = _seq_shard(probe, t, r) if sequence_parallel else probe
    (out * target).sum().backward()
    calls = dict(comm.calls)
    sent = comm.ring.bytes_sent - sent_before
    if sequence_parallel:
        sync_sequence_parallel_grads(blocks, comm)
    want_out = _seq_shard(ref_out, t, r) if sequence_parallel else ref_out
    want_xg = _seq_shard(ref_x_grad, t, r) if sequence_parallel else ref_x_grad
    worst_grad = relative_l2(xin.grad, want_xg)
    for b, ref in zip(blocks, ref_blocks):
        ref_params = dict(ref.named_parameters())
        for local, src in b.sources.items():
            want = b.slicers[src](ref_params[src].grad)
            worst_grad = max(worst_grad, relative_l2(getattr(b, local).grad, want))
    return {"blocks": blocks, "out": out.detach(), "x_grad": xin.grad, "out_diff": relative_l2(out, want_out),
            "grad_diff": worst_grad, "saved_bytes": saved.bytes, "calls": calls, "bytes_sent": sent}


# --------------------------------------------------------------------------- PyTorch's TP


class _TorchAttention(nn.Module):
    """The block's attention with separate query, key and value projections, so that
    ``ColwiseParallel`` can split each by heads; the head count follows the local width."""

    def __init__(self, d: int, n_head: int):
        super().__init__()
        self.head_dim = d // n_head
        self.q, self.k, self.v, self.proj = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x):
        B, T, _ = x.shape
        q, k, v = (m(x).view(B, T, -1, self.head_dim).transpose(1, 2) for m in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class _TorchBlock(nn.Module):
    def __init__(self, block: Block, n_head: int):
        super().__init__()
        d = block.ln1.normalized_shape[0]
        self.ln1, self.ln2, self.mlp = copy.deepcopy(block.ln1), copy.deepcopy(block.ln2), copy.deepcopy(block.mlp)
        self.attn = _TorchAttention(d, n_head)
        with torch.no_grad():
            for i, name in enumerate("qkv"):
                getattr(self.attn, name).weight.copy_(block.attn.qkv.weight[i * d:(i + 1) * d])
                getattr(self.attn, name).bias.copy_(block.attn.qkv.bias[i * d:(i + 1) * d])
            self.attn.proj.load_state_dict(block.attn.proj.state_dict())

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def torch_tp_blocks(ref_blocks, n_head: int, mesh):
    """The same blocks, parallelized by ``torch.distributed.tensor.parallel``: query, key,
    value and the MLP's first matrix column-wise, the two output projections row-wise. The
    attention's input is declared replicated once (``PrepareModuleInput``), so that its
    three projections share one backward all-reduce, as Megatron's single ``f`` does."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   parallelize_module)

    plan = {"attn": PrepareModuleInput(input_layouts=(Replicate(),), desired_input_layouts=(Replicate(),)),
            "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
            "attn.proj": RowwiseParallel(), "mlp.fc": ColwiseParallel(), "mlp.proj": RowwiseParallel()}
    blocks = [_TorchBlock(b, n_head).to(mesh.device_type) for b in ref_blocks]
    for b in blocks:
        parallelize_module(b, mesh, plan)
    return blocks


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def run_torch_tp(ref_blocks, x, probe, hand, cfg, comm, device):
    """Output and gradients of PyTorch's TP, against the hand-written shards; collective
    counts from ``CommDebugMode``."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    mesh = init_device_mesh(device.type, (comm.size,))
    blocks = torch_tp_blocks(ref_blocks, cfg.n_head, mesh)
    xin = x.detach().clone().requires_grad_(True)
    with CommDebugMode() as fwd:
        out = xin
        for b in blocks:
            out = b(out)
    with CommDebugMode() as bwd:
        (_local(out) * probe).sum().backward()
    worst_grad = relative_l2(xin.grad, hand["x_grad"])
    for tb, hb in zip(blocks, hand["blocks"]):
        g = {n: _local(p.grad) for n, p in tb.named_parameters()}
        mine = {
            "attn.qkv.weight": torch.cat([g["attn.q.weight"], g["attn.k.weight"], g["attn.v.weight"]]),
            "attn.qkv.bias": torch.cat([g["attn.q.bias"], g["attn.k.bias"], g["attn.v.bias"]]),
            **{n: g[n] for n in ("ln1.weight", "ln1.bias", "attn.proj.weight", "attn.proj.bias", "ln2.weight",
                                 "ln2.bias", "mlp.fc.weight", "mlp.fc.bias", "mlp.proj.weight", "mlp.proj.bias")},
        }
        for name, grad in mine.items():
            worst_grad = max(worst_grad, relative_l2(grad, hb.p(name).grad))

    def counts(mode):
        return {str(op).split(".")[-1]: n for op, n in mode.get_comm_counts().items()}

    return {"out_diff": relative_l2(_local(out), hand["out"]), "grad_diff": worst_grad,
            "forward": counts(fwd), "backward": counts(bwd)}


# --------------------------------------------------------------------------- the lab


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m labs.tensor_parallel", description=__doc__.splitlines()[0])
    launch.add_common_args(parser, LAB)
    g = parser.add_argument_group("tensor parallel")
    g.add_argument("--n-layer", type=int, default=2, help="transformer blocks in the stack")
    g.add_argument("--n-head", type=int, default=4, help="attention heads (the degree must divide it)")
    g.add_argument("--d-model", type=int, default=64)
    g.add_argument("--block-size", type=int, default=64, help="sequence length s")
    g.add_argument("--batch", type=int, default=4, help="sequences per micro-batch b")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--comm", choices=COMM_MODES, default=None,
                   help="ring: hand-written rings, bytes counted; builtin: torch.distributed's collectives; "
                        "none: no communication, to see the checks fail")
    g.add_argument("--no-sequence-parallel", action="store_true", help="skip the sequence-parallel run")
    g.add_argument("--no-torch-tp", action="store_true",
                   help="skip the comparison with torch.distributed.tensor.parallel")
    return parser


def validate(args, world_size: int) -> GPTConfig:
    """The model of these arguments, or a one-line ``ValueError`` before any rank starts:
    the degree (``--nproc``) must divide the heads, and the sequence for sequence parallelism."""
    t = world_size
    cfg = GPTConfig(block_size=args.block_size, n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model)
    if cfg.n_head % t:
        raise ValueError(f"--n-head {cfg.n_head} must be divisible by the tensor-parallel degree {t} (--nproc)")
    if not args.no_sequence_parallel and cfg.block_size % t:
        raise ValueError(f"--block-size {cfg.block_size} must be divisible by {t} (--nproc) for sequence parallelism")
    if args.batch < 1:
        raise ValueError(f"--batch must be >= 1, got {args.batch}")
    check_model_fits(cfg, args.batch, world_size, args.backend)
    resolve_ring_mode(args, "comm", "--comm")
    return cfg


def worker(ctx, args) -> dict:
    t, dev = ctx.world_size, ctx.device
    cfg = validate(args, t)
    b, s, h, L = args.batch, cfg.block_size, cfg.d_model, cfg.n_layer
    if getattr(args, "ring_stub", False):
        ctx.log(RING_STUB_NOTE)
    ctx.log(f"tensor parallel degree {t}: {plural(L, 'block')} of width {h}, {cfg.n_head} heads; "
            f"micro-batch {b} x {s} tokens; collectives: {args.comm}")

    # The unsharded reference, identical on every rank (same seed): each rank checks its shard.
    torch.manual_seed(args.seed)
    ref_blocks = [Block(cfg).to(dev) for _ in range(L)]
    x = torch.randn(b, s, h, device=dev)
    probe = torch.randn(b, s, h, device=dev)  # loss = sum(out * probe): every output element matters
    xr = x.clone().requires_grad_(True)
    with SavedTensorBytes([p for blk in ref_blocks for p in blk.parameters()]) as ref_saved:
        ref_out = xr
        for blk in ref_blocks:
            ref_out = blk(ref_out)
    (ref_out * probe).sum().backward()
    ref_out = ref_out.detach()

    comm = TensorParallelComm(None, args.comm)
    ctx.maybe_fail(0)
    tp = run_hand_tp(ref_blocks, x, probe, ref_out, xr.grad, cfg, comm, False, dev)
    runs = {"tp": tp}
    if not args.no_sequence_parallel:
        ctx.maybe_fail(1)
        runs["sp"] = run_hand_tp(ref_blocks, x, probe, ref_out, xr.grad, cfg, comm, True, dev)

    checks = []
    labels = {"tp": "TP", "sp": "TP + sequence parallel"}
    elem = 4  # fp32 activations
    predicted_bytes = {"tp": tensor_parallel_bytes_per_layer(b, s, h, t, elem),
                       "sp": sequence_parallel_bytes_per_layer(b, s, h, t, elem)}
    for key, run in runs.items():
        label = labels[key]
        checks.append(check_at_most(f"{label} vs one process: output, relative L2", TOLERANCE,
                                    _max_over_ranks(run["out_diff"], dev)))
        checks.append(check_at_most(f"{label} vs one process: gradients, worst relative L2", TOLERANCE,
                                    _max_over_ranks(run["grad_diff"], dev)))
        expected = tensor_parallel_collectives_per_layer(key == "sp")
        for phase in ("forward", "backward"):
            for kind, count in expected[phase].items():
                measured = run["calls"].get((phase, kind), 0) / L
                checks.append(check_exact(f"{label}: {kind.replace('_', '-')}s per layer, {phase}", count,
                                          measured, unit=""))
        if args.comm in ("ring", "none"):
            sent = [None] * t
            dist.all_gather_object(sent, run["bytes_sent"])
            c = check_exact(f"{label}: bytes each rank sends per layer (ring, counted)", predicted_bytes[key],
                            max(sent) / L)
            c["ok"] = c["ok"] and len(set(sent)) == 1
            checks.append(c)
        elif getattr(args, "ring_stub", False):
            checks.append(check_skipped(f"{label}: bytes each rank sends per layer (ring, counted)",
                                        "ring_all_reduce is not written yet", predicted_bytes[key]))

    metrics = {"saved_activation_bytes": {"one_process": ref_saved.bytes,
                                          **{k: r["saved_bytes"] for k, r in runs.items()}}}
    if "sp" in runs:
        saved = [None] * t
        dist.all_gather_object(saved, (runs["tp"]["saved_bytes"], runs["sp"]["saved_bytes"]))
        saving = max(a - c for a, c in saved) / L
        predicted = (norm_activation_elements_per_layer(b, s, h, t, False)
                     - norm_activation_elements_per_layer(b, s, h, t, True)) * elem
        checks.append(check_exact("sequence parallel: activation bytes saved per layer (layer norms' 1 - 1/t)",
                                  predicted, saving))
        metrics["saved_activation_bytes_per_rank"] = {"tp": [a for a, _ in saved], "sp": [c for _, c in saved]}

    if not args.no_torch_tp:
        ctx.maybe_fail(2)
        # Against the hand-written shards, output and gradients, shard by shard.
        torch_run = run_torch_tp(ref_blocks, x, probe, tp, cfg, comm, dev)
        checks.append(check_at_most("torch TP (parallelize_module) vs hand-written: output, relative L2", TOLERANCE,
                                    _max_over_ranks(torch_run["out_diff"], dev)))
        checks.append(check_at_most("torch TP (parallelize_module) vs hand-written: gradients, worst relative L2",
                                    TOLERANCE, _max_over_ranks(torch_run["grad_diff"], dev)))
        expected = tensor_parallel_collectives_per_layer(False)
        for phase in ("forward", "backward"):
            measured = torch_run[phase].get("all_reduce", 0) / L
            checks.append(check_exact(f"torch TP: all-reduces per layer, {phase} (CommDebugMode)",
                                      expected[phase]["all_reduce"] if t > 1 else 0, measured, unit=""))
        metrics["torch_tp_collectives"] = {"forward": torch_run["forward"], "backward": torch_run["backward"]}

    return {
        "config": {"model": cfg.to_dict(), "tp": t, "micro_batch": b, "seq_len": s, "d_model": h, "n_layer": L,
                   "comm": args.comm, "dtype": "torch.float32", "tolerance": TOLERANCE,
                   "bytes_per_element": elem},
        "checks": checks,
        "metrics": metrics,
    }


def main(argv=None) -> int:
    return launch.main(LAB, build_parser(), worker, argv, validate)


if __name__ == "__main__":
    launch.exit_now(main())
