"""The labs' training data: six Shakespeare plays, read one character at a time.

The corpus ships with the course (``labs/data/shakespeare.txt``, source and licence in
``labs/data/README.md``), so nothing is downloaded at run time. A character-level
vocabulary keeps the tokenizer to a few lines and the model small.

Batches are drawn so that a distributed run and a single process see the same tokens:
:func:`batch_offsets` draws the *global* batch for a step from a generator seeded by
``(seed, step)``; rank ``r`` of ``n`` takes rows ``r*b .. (r+1)*b - 1`` of it, and a
single-process reference takes all of them. That is what lets the DDP and FSDP labs compare
a parallel run with one process, parameter by parameter (the CS336 style of test).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "shakespeare.txt"
CORPUS_BYTES = 824_023
CORPUS_SHA256 = "397e2f299e8bdbfba998fac2dc445fab43ec9f726e84be63e46561b31b5d69e0"

__all__ = ["CORPUS_PATH", "CharCorpus", "load_corpus", "batch_offsets", "get_batch", "rank_slice"]


@dataclass(frozen=True)
class CharCorpus:
    """The corpus as one long tensor of character ids, split into train and validation.

    ``chars`` is the sorted list of distinct characters; a character's id is its index.
    The last ``val_fraction`` of the text is held out for validation.
    """

    chars: tuple[str, ...]
    train: torch.Tensor
    val: torch.Tensor

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        unknown = sorted(set(text) - set(index))
        if unknown:
            raise ValueError(f"text has characters outside the vocabulary: {unknown!r}")
        return torch.tensor([index[c] for c in text], dtype=torch.long)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


@lru_cache(maxsize=2)
def load_corpus(path: str | None = None, val_fraction: float = 0.1) -> CharCorpus:
    """Read and encode the corpus. With the default path, the file's size and SHA-256 are
    checked against the values recorded in ``labs/data/README.md``."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction!r}")
    file = Path(path) if path is not None else CORPUS_PATH
    raw = file.read_bytes()
    if path is None:
        digest = hashlib.sha256(raw).hexdigest()
        if len(raw) != CORPUS_BYTES or digest != CORPUS_SHA256:
            raise ValueError(
                f"{file.name} is not the shipped corpus ({len(raw)} bytes, sha256 {digest[:12]}...;"
                f" expected {CORPUS_BYTES} bytes, sha256 {CORPUS_SHA256[:12]}...)"
            )
    text = raw.decode("utf-8")
    chars = tuple(sorted(set(text)))
    lookup = torch.full((max(map(ord, chars)) + 1,), -1, dtype=torch.long)
    lookup[torch.tensor([ord(c) for c in chars])] = torch.arange(len(chars))
    ids = lookup[torch.tensor([ord(c) for c in text])]
    split = int(len(ids) * (1 - val_fraction))
    return CharCorpus(chars, ids[:split].clone(), ids[split:].clone())


def batch_offsets(n_tokens: int, block_size: int, global_batch: int, step: int, seed: int = 0) -> torch.Tensor:
    """Start positions of the ``global_batch`` sequences used at ``step``.

    Drawn from a generator seeded by ``(seed, step)`` only, so every process (any rank, or
    the single-process reference) computes the same offsets without communicating.
    """
    if block_size < 1 or global_batch < 1 or step < 0:
        raise ValueError(
            f"block_size and global_batch must be >= 1 and step >= 0, got {block_size}, {global_batch}, {step}"
        )
    if n_tokens <= block_size + 1:
        raise ValueError(f"the split has {n_tokens} tokens, too few for block_size={block_size}")
    gen = torch.Generator().manual_seed(seed * 1_000_003 + step)
    return torch.randint(0, n_tokens - block_size - 1, (global_batch,), generator=gen)


def get_batch(tokens: torch.Tensor, offsets: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``x`` and next-character targets ``y``, both of shape ``(len(offsets), block_size)``."""
    idx = offsets[:, None] + torch.arange(block_size)[None, :]
    return tokens[idx], tokens[idx + 1]


def rank_slice(offsets: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s equal share of a global batch's offsets (contiguous rows)."""
    if len(offsets) % world_size:
        raise ValueError(f"global batch {len(offsets)} is not divisible by world size {world_size}")
    per_rank = len(offsets) // world_size
    return offsets[rank * per_rank:(rank + 1) * per_rank]
