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
  the dispatcher, which is where FSDP's and DDP's communication passes.
"""
from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .model import GPTConfig, padded_vocab

__all__ = ["TrainConfig", "lr_at", "make_optimizer", "set_lr", "add_model_args", "configs_from_args",
           "pick_dtype", "state_bytes", "CollectiveCounter", "peak_flops_per_s", "autocast", "train_step",
           "forward_backward", "optimizer_update",
           "sync", "median"]


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
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and self.grad_clip > 0):
            raise ValueError("lr and grad_clip must be > 0 and min_lr_ratio in [0, 1]")

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
    g.add_argument("--dtype", choices=("auto", "fp32", "bf16"), default="auto",
                   help="auto: bf16 mixed precision on a GPU that supports it natively (compute capability 8.0+), else fp32")
    return parser


def configs_from_args(args, vocab_size: int) -> tuple[GPTConfig, TrainConfig]:
    model = GPTConfig(vocab_size=padded_vocab(vocab_size), block_size=args.block_size,
                      n_layer=args.n_layer, n_head=args.n_head, d_model=args.d_model)
    warmup = args.warmup if args.warmup is not None else max(1, args.steps // 4)
    train = TrainConfig(steps=args.steps, batch_per_rank=args.batch_per_rank, lr=args.lr,
                        warmup=min(warmup, args.steps), seed=args.seed)
    return model, train


def pick_dtype(requested: str, device: torch.device) -> tuple[torch.dtype, str]:
    """``(dtype, reason)``: the compute precision. Parameters and optimizer state stay fp32."""
    if requested == "fp32":
        return torch.float32, "requested"
    if requested == "bf16":
        if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
            return torch.bfloat16, "requested; this GPU has no bf16 tensor cores, so bf16 is emulated and slow"
        return torch.bfloat16, "requested"
    if device.type == "cuda" and torch.cuda.get_device_capability(device) >= (8, 0):
        return torch.bfloat16, "GPU with compute capability 8.0+ (native bf16)"
    if device.type == "cuda":
        return torch.float32, "this GPU (compute capability below 8.0, e.g. a T4) has no native bf16"
    return torch.float32, "CPU"


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
# the full buffer is the output (n shards), for reduce-scatter the input, as in nccl-tests.
_COLLECTIVES = {
    _C10D._allgather_base_: ("all_gather", 0),
    _C10D._reduce_scatter_base_: ("reduce_scatter", 1),
    _C10D.allreduce_: ("all_reduce", 0),
    _C10D.broadcast_: ("broadcast", 0),
}


def _nbytes(x) -> int:
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(y) for y in x)
    return 0


class CollectiveCounter(TorchDispatchMode):
    """Counts collectives issued while active: ``calls[name]`` and ``bytes[name]``, where
    the bytes are the size of the full buffer (all-gather output, reduce-scatter input,
    all-reduce buffer). Point-to-point sends are not collectives and are not seen here.

    ``with CollectiveCounter() as c: train_step()``
    """

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}
        self.bytes: dict[str, int] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kind = _COLLECTIVES.get(func._overloadpacket)
        if kind is not None:
            name, which = kind
            self.calls[name] = self.calls.get(name, 0) + 1
            self.bytes[name] = self.bytes.get(name, 0) + _nbytes(args[which])
        return func(*args, **(kwargs or {}))


def peak_flops_per_s(device: torch.device):
    """``(peak FLOP/s, GPU name in solutions.facts, cite)`` for a known GPU, else ``None``.
    Peaks are dense 16-bit tensor throughput (solutions.facts.GPUS)."""
    if device.type != "cuda":
        return None
    from solutions.facts import GPUS

    name = torch.cuda.get_device_name(device)
    key = None
    if "H200" in name:
        key = "H200"
    elif "H100" in name:
        key = "H100 PCIe" if "PCIe" in name else "H100 SXM"
    elif "A100" in name:
        total = torch.cuda.get_device_properties(device).total_memory
        key = "A100 80GB" if total > 50e9 else "A100 40GB"
    elif "T4" in name:
        key = "T4"
    if key is None or key not in GPUS:
        return None
    return GPUS[key].peak_flops_per_s, key, GPUS[key].cite


def forward_backward(model, x, y, device, dtype) -> torch.Tensor:
    """Forward and backward; returns the (detached) loss. Gradients are left in ``.grad``."""
    with autocast(device, dtype):
        _, loss = model(x, y)
    loss.backward()
    return loss.detach()


def optimizer_update(model, optimizer, lr: float, cfg: TrainConfig) -> None:
    """Clip the gradient norm, then an AdamW step at learning rate ``lr``."""
    set_lr(optimizer, lr)
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    optimizer.step()


def train_step(model, optimizer, x, y, lr: float, cfg: TrainConfig, device, dtype) -> torch.Tensor:
    """One optimizer step: forward, backward, clip, AdamW. Leaves the gradients in place
    (so their memory can be measured); the caller zeroes them."""
    loss = forward_backward(model, x, y, device, dtype)
    optimizer_update(model, optimizer, lr, cfg)
    return loss


def sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median(values) -> float:
    """Median of the step times, leaving out the first step (allocation, warm-up) when
    there are at least three."""
    values = sorted(values[1:] if len(values) >= 3 else values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else 0.5 * (values[mid - 1] + values[mid])
