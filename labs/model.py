"""A small GPT-style language model for the labs (nanoGPT's shape, a few lines per part).

Pre-norm transformer blocks: LayerNorm, causal self-attention, LayerNorm, a 4x MLP with
GELU; learned token and position embeddings (``embed``); a final LayerNorm and an untied
output layer (``out``). The head is untied on purpose: with weight tying one tensor belongs
to two modules, and FSDP must then keep both in one sharding unit. Untied, ``embed``, each
block and ``out`` can each be an FSDP unit (see ``labs/fsdp.py``).

The parameter count has a closed form (:func:`param_count`), which the labs use to predict
gradient bytes and traffic *before* looking at the model; the tests check the closed form
against ``sum(p.numel())``.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["GPTConfig", "GPT", "param_count", "param_shapes", "matmul_params", "padded_vocab"]


def padded_vocab(vocab_size: int, multiple: int = 16) -> int:
    """Round the vocabulary up to a multiple of ``multiple`` (nanoGPT pads to 64 for speed).

    Here it also makes every parameter's first dimension divisible by the usual world sizes,
    so FSDP's even split of dimension 0 needs no padding."""
    if vocab_size < 1 or multiple < 1:
        raise ValueError(f"vocab_size and multiple must be >= 1, got {vocab_size}, {multiple}")
    return -(-vocab_size // multiple) * multiple


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 80
    block_size: int = 64
    n_layer: int = 2
    n_head: int = 4
    d_model: int = 64

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "d_model"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"n_head must divide d_model, got n_head={self.n_head}, d_model={self.d_model}")

    def to_dict(self) -> dict:
        return asdict(self)


def param_shapes(cfg: GPTConfig) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape, by name, derived from the architecture (not from a model)."""
    V, T, L, d = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.d_model
    shapes = {"embed.tok.weight": (V, d), "embed.pos.weight": (T, d)}
    for i in range(L):
        p = f"blocks.{i}."
        shapes.update({
            p + "ln1.weight": (d,), p + "ln1.bias": (d,),
            p + "attn.qkv.weight": (3 * d, d), p + "attn.qkv.bias": (3 * d,),
            p + "attn.proj.weight": (d, d), p + "attn.proj.bias": (d,),
            p + "ln2.weight": (d,), p + "ln2.bias": (d,),
            p + "mlp.fc.weight": (4 * d, d), p + "mlp.fc.bias": (4 * d,),
            p + "mlp.proj.weight": (d, 4 * d), p + "mlp.proj.bias": (d,),
        })
    shapes.update({"out.ln.weight": (d,), "out.ln.bias": (d,), "out.logits.weight": (V, d)})
    return shapes


def param_count(cfg: GPTConfig) -> int:
    """``2 V d + T d + L (12 d^2 + 13 d) + 2 d``: embeddings and head, position embeddings,
    per block ``12 d^2`` weights (attention 4, MLP 8) and ``13 d`` biases and norms, final norm."""
    V, T, L, d = cfg.vocab_size, cfg.block_size, cfg.n_layer, cfg.d_model
    return 2 * V * d + T * d + L * (12 * d * d + 13 * d) + 2 * d


def matmul_params(cfg: GPTConfig) -> int:
    """Parameters that take part in a matrix multiply for every token: all but the two
    embedding tables (a lookup costs no FLOPs). This is the ``N`` in ``6N`` FLOPs per token
    (Kaplan et al. 2020 count non-embedding parameters; the head is a matmul, so it counts)."""
    return param_count(cfg) - (cfg.vocab_size + cfg.block_size) * cfg.d_model


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, 4 * cfg.d_model)
        self.proj = nn.Linear(4 * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embedding(nn.Module):
    """Token plus learned position embeddings."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.block_size, cfg.d_model)

    def forward(self, idx):
        return self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))


class Head(nn.Module):
    """Final LayerNorm and the projection to one logit per vocabulary entry."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln = nn.LayerNorm(cfg.d_model)
        self.logits = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, x):
        return self.logits(self.ln(x))


class GPT(nn.Module):
    """``GPT(cfg)(idx, targets)`` returns ``(logits, loss)``; the loss is the mean
    next-character cross-entropy, the objective every lab trains on."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.out = Head(cfg)
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections that write into the residual stream.
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        if idx.shape[1] > self.cfg.block_size:
            raise ValueError(f"sequence length {idx.shape[1]} exceeds block_size {self.cfg.block_size}")
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.out(x)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss
