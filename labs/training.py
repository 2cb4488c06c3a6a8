"""What the DDP and FSDP labs share: the training recipe, the measurements, the arguments.

The recipe is the chapter's: AdamW (Loshchilov & Hutter 2019) with decoupled weight decay
on the matrices only, a linear warm-up then a cosine decay of the learning rate, and
gradient clipping at norm 1.

Measurements:

* :func:`state_bytes` counts the bytes a rank really holds for parameters, gradients and
  optimizer state, by walking the distinct tensor storages (so views and padding are counted
  the way the allocator sees them, and a shared buffer only once);
* :class:`CollectiveCounter` records every collective the process issues (all-gather,
  reduce-scatter, all-reduce, ...) with its buffer size, by intercepting the ``c10d`` ops at
  the dispatcher, which is where FSDP's and DDP's communication passes. A Python dispatch
  mode sees every aten op (hundreds per step, each slowed down), so the labs use it only in
  their checked steps, never in a timed one.

Timed steps and checked steps are different steps (:func:`split_steps`): the first steps of
a run are checked (collectives counted, the single-process reference compared), the rest are
timed and do only what the strategy needs, so that step times, tokens/s, MFU and peak memory
describe training and nothing else.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .model import GPTConfig, padded_vocab

__all__ = ["TrainConfig", "lr_at", "make_optimizer", "set_lr", "add_model_args", "configs_from_args",
           "TORCH_DTYPES", "dtype_name", "pick_dtype", "make_scaler", "state_bytes", "CollectiveCounter",
           "all_to_all_record",
           "peak_flops_per_s", "device_peak", "mfu_metrics", "format_rate", "format_mfu", "autocast", "train_step",
           "forward_backward", "optimizer_update", "split_steps",
           "sync", "median"]

#: The compute dtypes of ``--dtype``, by their names in :mod:`solutions.hardware`.
TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def dtype_name(dtype: torch.dtype) -> str:
    """'fp32', 'fp16' or 'bf16' for a torch dtype."""
    for name, t in TORCH_DTYPES.items():
        if t == dtype:
            return name
    raise ValueError(f"dtype must be one of {list(TORCH_DTYPES.values())}, got {dtype!r}")


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 20
    batch_per_rank: int = 8
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup: int = 5
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    grad_clip: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("steps", "batch_per_rank"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {self.warmup}")
        if not (0 < self.lr < math.inf and 0 <= self.min_lr_ratio <= 1 and 0 < self.grad_clip < math.inf):
            raise ValueError(f"lr and grad_clip must be finite and > 0 and min_lr_ratio in [0, 1], got "
                             f"lr={self.lr}, grad_clip={self.grad_clip}, min_lr_ratio={self.min_lr_ratio}")

    def to_dict(self) -> dict:
        return asdict(self)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Warm-up then cosine: ``lr (s+1)/w`` for the first ``w`` steps, then a cosine from
    ``lr`` down to ``min_lr_ratio * lr`` at the last step."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    span = max(1, cfg.steps - 1 - cfg.warmup)
    progress = min(1.0, (step - cfg.warmup) / span)
    floor = cfg.lr * cfg.min_lr_ratio
    return floor + 0.5 * (cfg.lr - floor) * (1 + math.cos(math.pi * progress))


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW; weight decay on matrices (``dim >= 2``), none on biases and norms (nanoGPT)."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr_at(0, cfg), betas=(cfg.beta1, cfg.beta2), eps=1e-8)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def add_model_args(parser: argparse.ArgumentParser, steps: int = 20) -> argparse.ArgumentParser:
    g = parser.add_argument_group("model and training")
    g.add_argument("--n-layer", type=int, default=2)
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--d-model", type=int, default=64)
    g.add_argument("--block-size", type=int, default=64, help="characters per sequence")
    g.add_argument("--batch-per-rank", type=int, default=8, help="sequences per rank per step")
    g.add_argument("--steps", type=int, default=steps)
    g.add_argument("--lr", type=float, default=3e-3, help="peak learning rate")
    g.add_argument("--warmup", type=int, default=None, help="warm-up steps (default: a quarter of --steps)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--dtype", choices=("auto", "fp32", "fp16", "bf16"), default="auto",
                   help="compute precision (weights and optimizer state stay fp32). auto: bf16 on GPUs with bf16 "
                        "tensor cores (compute capability 8.0+), fp16 with a gradient scaler on 7.x (T4, V100), "
                        "fp32 on CPU")
    g.add_argument("--check-steps", type=int, default=None,
                   help="steps (the first ones) that are checked: collectives counted, the single-process "
                        "reference compared. The other steps are timed and do only the training step. "
                        "Default: half of --steps")
    g.add_argument("--reference-delay", type=float, default=0.0,
                   help="debug: rank 0 sleeps this many seconds in each reference step (the timed steps must "
                        "not change)")
    return parser


def split_steps(steps: int, check_steps: int | None) -> int:
    """How many of ``steps`` are checked (the first ones); the rest are timed. At least one of
    each when ``steps >= 2``; a single step is checked and not timed."""
    if check_steps is None:
        check_steps = max(1, steps // 2)
    if not 1 <= check_steps <= steps:
        raise ValueError(f"--check-steps must be in 1..{steps} (--steps), got {check_steps}")
    if steps >= 2 and check_steps == steps:
        raise ValueError(f"--check-steps {check_steps} leaves no step to time; use at most {steps - 1}")
    return check_steps


def steps_words(checked: int, steps: int) -> str:
    """What :func:`split_steps` decided, in words: ``'steps 1-3 checked, 4-6 timed'``,
    ``'step 1 checked, none timed (--steps 2 or more times one)'``."""
    def span(first: int, last: int) -> str:
        return f"step {first}" if first == last else f"steps {first}-{last}"

    timed = span(checked + 1, steps) + " timed" if steps > checked else "none timed (--steps 2 or more times one)"
    return f"{span(1, checked)} checked, {timed}"


def model_bytes_per_rank(cfg: GPTConfig, batch: int) -> float:
    """A generous estimate of one CPU rank's memory for training ``cfg`` on ``batch``
    sequences in fp32, unsharded (the most any lab holds): weights, gradients, AdamW's two
    moments and the single-process reference's copy of all four (``32 P`` bytes), plus the
    activations, Korthikanti et al.'s ``s b h (34 + 5 a s / h)`` bytes per layer at 16 bits
    (:func:`solutions.memory.activation_memory_per_layer`), doubled for fp32, and the logits."""
    from solutions.memory import activation_memory_per_layer

    from .model import param_count

    acts = 2 * cfg.n_layer * activation_memory_per_layer(cfg.block_size, batch, cfg.d_model, cfg.n_head)
    logits = 3 * 4 * batch * cfg.block_size * cfg.vocab_size  # logits, their softmax and gradient
    return 32 * param_count(cfg) + acts + logits


def check_model_fits(cfg: GPTConfig, batch: int, world_size: int, backend: str = "auto") -> None:
    """One line before any rank starts when ``world_size`` CPU ranks of this model cannot fit
    in memory (:func:`labs.launch.check_fits_in_memory`)."""
    from .launch import check_fits_in_memory

    check_fits_in_memory(model_bytes_per_rank(cfg, batch), world_size,
                         f"a model of d_model {cfg.d_model}, {cfg.n_layer} layers, block {cfg.block_size}, "
                         f"batch {batch}", backend)


def validate_model_args(args, world_size: int) -> None:
    """Raise ``ValueError`` (one line) for model and training flags no rank could run with
    (``--n-head`` not dividing ``--d-model``, ``--steps 0``, ``--check-steps`` out of range).
    The vocabulary comes from the corpus, which no flag changes, so any size will do here."""
    model, train = configs_from_args(args, vocab_size=256)
    split_steps(train.steps, args.check_steps)
    check_model_fits(model, train.batch_per_rank, world_size, getattr(args, "backend", "auto"))
    delay = getattr(args, "reference_delay", 0.0)
    if not 0 <= delay < math.inf:
        raise ValueError(f"--reference-delay must be seconds >= 0, got {delay}")


def configs_from_args(args, vocab_size: int) -> tuple[GPTConfig, TrainConfig]:
    model = GPTConfig(vocab_size=padded_vocab(vocab_size), block_size=args.block_size,
                      n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model)
    warmup = args.warmup if args.warmup is not None else max(1, args.steps // 4)
    train = TrainConfig(steps=args.steps, batch_per_rank=args.batch_per_rank, lr=args.lr,
                        warmup=min(warmup, args.steps), seed=args.seed)
    return model, train


def pick_dtype(requested: str, device: torch.device) -> tuple[torch.dtype, str]:
    """``(dtype, reason)``: the compute precision (``solutions.hardware.choose_dtype`` for this
    device). Parameters and optimizer state stay fp32."""
    from solutions.hardware import choose_dtype

    capability = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    name, reason = choose_dtype(requested, device.type, capability)
    return TORCH_DTYPES[name], reason


def make_scaler(device: torch.device, dtype: torch.dtype):
    """A gradient scaler for fp16 (whose range is too narrow for small gradients; Micikevicius
    et al. 2018), else ``None``. bf16 has fp32's range and needs none."""
    if dtype != torch.float16:
        return None
    return torch.amp.GradScaler(device.type)


def autocast(device: torch.device, dtype: torch.dtype):
    """Mixed precision for DDP: matmuls in ``dtype``, parameters and gradients in fp32."""
    return torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)


# --------------------------------------------------------------------------- measurement


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _storage_bytes(tensors) -> int:
    seen: dict[tuple, int] = {}
    for t in tensors:
        if t is None:
            continue
        t = _local(t)
        s = t.untyped_storage()
        seen[(t.device.type, t.device.index, s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def state_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes this rank holds, by what they hold: ``weights``, ``grads``, ``optimizer``.

    Distinct storages only: a gradient that is a view into a communication bucket (DDP with
    ``gradient_as_bucket_view``) or a shard that is a view into a padded buffer (FSDP)
    counts as its whole storage, once. Call after the optimizer step and before
    ``zero_grad``, while the gradients exist."""
    params = list(model.parameters())
    state = [v for p in params for v in optimizer.state.get(p, {}).values() if torch.is_tensor(v)]
    return {
        "weights": _storage_bytes(params),
        "grads": _storage_bytes(p.grad for p in params),
        "optimizer": _storage_bytes(state),
    }


_C10D = torch.ops.c10d
# op -> (name, which argument holds the full buffer the collective moves). For all-gather
# the full buffer is the output (n shards), for reduce-scatter the input, as in nccl-tests;
# for an all-to-all the input, everything the rank sends (its own share included).
_COLLECTIVES = {
    _C10D._allgather_base_: ("all_gather", 0),
    _C10D._reduce_scatter_base_: ("reduce_scatter", 1),
    _C10D.allreduce_: ("all_reduce", 0),
    _C10D.broadcast_: ("broadcast", 0),
    _C10D.alltoall_base_: ("all_to_all", 1),
    _C10D.alltoall_: ("all_to_all", 1),
}


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


def _group_rank_and_size(process_group) -> tuple[int, int]:
    """This process's rank in the group a c10d op was given, and the group's size."""
    import torch.distributed as dist

    try:
        group = torch._C._distributed_c10d.ProcessGroup.unbox(process_group)
        return group.rank(), group.size()
    except (AttributeError, RuntimeError, TypeError):  # an older torch: the default group
        return dist.get_rank(), dist.get_world_size()


def all_to_all_record(func, args) -> dict:
    """What one all-to-all moves, from its c10d op's arguments: the split sizes (rows this
    rank sends to, and receives from, each rank of the group; an empty list means equal
    splits), the bytes of a row, and the bytes that leave and arrive at this rank (its
    own share, the diagonal of the traffic matrix, stays local and is not counted)."""
    if func._overloadpacket is _C10D.alltoall_:  # lists of tensors, one per peer
        outputs, inputs, group = args[0], args[1], args[2]
        rank, size = _group_rank_and_size(group)
        send = [_nbytes(t) for t in inputs]
        recv = [_nbytes(t) for t in outputs]
        return {"dtype": str(inputs[0].dtype).replace("torch.", "") if inputs else "", "floating":
                bool(inputs) and inputs[0].is_floating_point(), "rank": rank, "row_bytes": None,
                "input_splits": [t.shape[0] if t.dim() else 1 for t in inputs],
                "output_splits": [t.shape[0] if t.dim() else 1 for t in outputs],
                "sent": sum(b for j, b in enumerate(send) if j != rank),
                "received": sum(b for j, b in enumerate(recv) if j != rank)}
    output, inp, group, out_splits, in_splits = args[:5]
    rank, size = _group_rank_and_size(group)
    rows_in = inp.shape[0] if inp.dim() else 1
    rows_out = output.shape[0] if output.dim() else 1
    row = inp.numel() * inp.element_size() // rows_in if rows_in else 0
    ins = list(in_splits) or [rows_in // size] * size
    outs = list(out_splits) or [rows_out // size] * size
    return {"dtype": str(inp.dtype).replace("torch.", ""), "floating": inp.is_floating_point(), "rank": rank,
            "row_bytes": row, "input_splits": [int(x) for x in ins], "output_splits": [int(x) for x in outs],
            "sent": row * sum(x for j, x in enumerate(ins) if j != rank),
            "received": row * sum(x for j, x in enumerate(outs) if j != rank)}


class CollectiveCounter(TorchDispatchMode):
    """Counts collectives issued while active: ``calls[name]`` and ``bytes[name]``, where
    the bytes are the size of the full buffer (all-gather output, reduce-scatter input,
    all-reduce buffer, all-to-all input). Point-to-point sends are not collectives and are
    not seen here. Each all-to-all is also kept in ``all_to_all`` (a list of
    :func:`all_to_all_record`): its splits, and the bytes that really leave the rank.

    ``with CollectiveCounter() as c: train_step()``
    """

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}
        self.bytes: dict[str, int] = {}
        self.all_to_all: list[dict] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = _COLLECTIVES.get(func._overloadpacket)
        if kind is not None:
            name, which = kind
            self.calls[name] = self.calls.get(name, 0) + 1
            self.bytes[name] = self.bytes.get(name, 0) + _nbytes(args[which])
            if name == "all_to_all":  # recorded before it runs: a call that fails is seen too
                self.all_to_all.append(all_to_all_record(func, args))
        return func(*args, **(kwargs or {}))


def device_peak(device: torch.device, dtype: torch.dtype):
    """``(Peak or None, note)``: the peak FLOP/s of this device computing in ``dtype``, from
    ``solutions.hardware`` (exact name match), and why there is none when there is none."""
    if device.type != "cuda":
        return None, "CPU: no peak FLOP/s, MFU not computed"
    from solutions.hardware import UNKNOWN_GPU, lookup, peak_flops

    name = torch.cuda.get_device_name(device)
    peak = peak_flops(name, dtype_name(dtype))
    if peak is not None:
        return peak, ""
    if lookup(name) is None:
        return None, f"{UNKNOWN_GPU} ({name!r} is not in solutions.hardware.ACCELERATORS)"
    return None, f"{name} has no native {dtype_name(dtype)} arithmetic: MFU not computed"


def peak_flops_per_s(device: torch.device, dtype: torch.dtype = torch.bfloat16):
    """``(peak FLOP/s, GPU name, cite)`` for a known GPU computing in ``dtype``, else ``None``."""
    peak, _ = device_peak(device, dtype)
    return None if peak is None else (peak.flops_per_s, peak.gpu, peak.cite)


def mfu_metrics(tokens_per_s: float, flops_per_token: float, n: int, device, dtype) -> dict:
    """``{"mfu", "peak_flops_per_s", "peak_source"}`` against ``n`` times this device's peak for
    ``dtype`` (Chowdhery et al. 2022, App. B), or ``{"mfu_note"}`` saying why there is none."""
    from solutions.compute import model_flops_utilization

    peak, note = device_peak(device, dtype)
    if peak is None:
        return {"mfu_note": note}
    return {"mfu": model_flops_utilization(tokens_per_s, flops_per_token, n * peak.flops_per_s),
            "peak_flops_per_s": peak.flops_per_s, "peak_source": peak.source}


def format_rate(x: float) -> str:
    """Thousands separators for large rates, three significant digits for small ones."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.3g}"


def format_mfu(metrics: dict) -> str:
    """'MFU 0.0123%' (three significant digits, never a bare 0.0%), or the reason there is none."""
    if metrics.get("mfu") is None:
        return metrics.get("mfu_note", "MFU not computed")
    return f"MFU {100 * metrics['mfu']:.3g}%"


def forward_backward(model, x, y, device, dtype, scaler=None) -> torch.Tensor:
    """Forward and backward; returns the (detached) loss. Gradients are left in ``.grad``
    (multiplied by the scaler's scale when ``scaler`` is given: fp16)."""
    with autocast(device, dtype):
        _, loss = model(x, y)
    (scaler.scale(loss) if scaler is not None else loss).backward()
    return loss.detach()


def optimizer_update(model, optimizer, lr: float, cfg: TrainConfig, scaler=None) -> None:
    """Clip the gradient norm, then an AdamW step at learning rate ``lr``. With an fp16
    ``scaler``: unscale first, and skip the step (lowering the scale) on inf/NaN. With FSDP2
    each rank holds only a shard of each gradient, yet every rank skips together: the gradients
    are DTensors, and ``unscale_``'s inf/NaN check on them already reduces ``found_inf`` over
    the mesh (tests/labs/test_labs_gpu_path.py checks it), so no all-reduce of our own is needed."""
    set_lr(optimizer, lr)
    if scaler is None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        return
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    scaler.step(optimizer)
    scaler.update()


def train_step(model, optimizer, x, y, lr: float, cfg: TrainConfig, device, dtype, scaler=None) -> torch.Tensor:
    """One optimizer step: forward, backward, clip, AdamW. Leaves the gradients in place
    (so their memory can be measured); the caller zeroes them."""
    loss = forward_backward(model, x, y, device, dtype, scaler)
    optimizer_update(model, optimizer, lr, cfg, scaler)
    return loss


def peak_gib(device) -> float | None:
    """The GPU's peak allocated memory since the last reset, in GiB; ``None`` on CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 2**30


def reset_peak(device) -> float | None:
    """Reset the GPU's peak-memory counter and return what is allocated now, in GiB (the
    baseline the peak is measured from); ``None`` on CPU."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device) / 2**30


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values) -> float:
    """Median of the step times, leaving out the first step (allocation, warm-up) when
    there are at least three."""
    values = sorted(values[1:] if len(values) >= 3 else values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])
