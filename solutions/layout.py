"""Process layout for 3D parallelism: which global ranks share each axis.

Like picotron, the world is one ``arange(world_size)`` reshaped to
``(dp, pp, tp)``: tensor-parallel ranks are adjacent (so they land on the
same node, where bandwidth is highest), then pipeline stages, then replicas.
"""

from __future__ import annotations

import numpy as np

from ._validate import nonnegative_integer, positive_integer

__all__ = [
    "process_grid", "tp_groups", "pp_groups", "dp_groups", "coordinates",
    "LLAMA3_ORDER", "mesh", "groups_along", "expert_groups", "nodes_spanned", "layout_rules",
]


def process_grid(world_size, tp, pp, dp):
    """Global ranks arranged as an int array of shape ``(dp, pp, tp)``:
    ``grid[d, p, t]`` is the rank at data-parallel index ``d``, pipeline stage
    ``p`` and tensor-parallel index ``t``. Requires ``tp * pp * dp == world_size``."""
    world_size = positive_integer("world_size", world_size)
    tp = positive_integer("tp", tp)
    pp = positive_integer("pp", pp)
    dp = positive_integer("dp", dp)
    if np.ndim(world_size) or np.ndim(tp) or np.ndim(pp) or np.ndim(dp):
        raise ValueError("world_size, tp, pp and dp must be scalars")
    if tp * pp * dp != world_size:
        raise ValueError(
            f"tp * pp * dp must equal world_size, got {tp} * {pp} * {dp} = {tp * pp * dp} "
            f"!= world_size={world_size}"
        )
    return np.arange(world_size).reshape(dp, pp, tp)


def _groups(grid, axis):
    moved = np.moveaxis(np.asarray(grid), axis, -1)
    return [list(map(int, row)) for row in moved.reshape(-1, moved.shape[-1])]


def tp_groups(grid):
    """Lists of ranks that form one tensor-parallel group (vary ``t``)."""
    return _groups(grid, 2)


def pp_groups(grid):
    """Lists of ranks that form one pipeline (vary the stage ``p``), in stage order."""
    return _groups(grid, 1)


def dp_groups(grid):
    """Lists of ranks that hold the same model shard (vary ``d``): the groups
    that all-reduce gradients (or shard state, under ZeRO/FSDP)."""
    return _groups(grid, 0)


def coordinates(grid, rank):
    """``(d, p, t)`` indices of ``rank`` in ``grid``."""
    grid = np.asarray(grid)
    rank = nonnegative_integer("rank", rank)
    if rank >= grid.size:
        raise ValueError(f"rank must be in [0, {grid.size}), got {rank}")
    d, p, t = np.argwhere(grid == rank)[0]
    return int(d), int(p), int(t)


# --------------------------------------------------------------------------
# Beyond 3D: context and expert parallelism
# --------------------------------------------------------------------------

#: Llama 3's order of the parallel axes, innermost first (Dubey et al. 2024,
#: sec. 3.3.2): TP needs the most bandwidth and the least latency, so its ranks
#: are adjacent; DP, whose traffic hides behind a whole step, is outermost.
LLAMA3_ORDER = ("tp", "cp", "pp", "dp")


def mesh(world_size, order=LLAMA3_ORDER, **sizes):
    """Global ranks as an int array with one axis per parallel dimension.

    ``order`` names the axes innermost first (adjacent ranks differ along the
    first); the returned array has them outermost first, like
    :func:`process_grid`. Every name in ``order`` needs a size in ``sizes``,
    and the sizes must multiply to ``world_size``. Returns ``(grid, names)``
    with ``names`` the axis names of ``grid``, outermost first.

    >>> grid, names = mesh(8, tp=2, cp=2, pp=1, dp=2)
    >>> names, grid.shape
    (('dp', 'pp', 'cp', 'tp'), (2, 1, 2, 2))
    """
    world_size = positive_integer("world_size", world_size)
    order = tuple(order)
    if len(set(order)) != len(order) or not order:
        raise ValueError(f"order must list distinct axis names, got {order!r}")
    if set(sizes) != set(order):
        raise ValueError(f"give a size for exactly the axes in order={order}, got {tuple(sizes)}")
    shape = []
    for name in order:
        size = positive_integer(name, sizes[name])
        if np.ndim(size):
            raise ValueError(f"{name} must be a scalar")
        shape.append(size)
    if int(np.prod(shape)) != world_size:
        raise ValueError(f"the sizes {dict(zip(order, shape))} multiply to {int(np.prod(shape))}, "
                         f"not world_size={world_size}")
    names = tuple(reversed(order))
    return np.arange(world_size).reshape(tuple(reversed(shape))), names


def groups_along(grid, names, axis):
    """Lists of ranks that differ only along ``axis`` (one group per position
    of the other axes): the process groups of that parallel dimension."""
    names = tuple(names)
    if axis not in names:
        raise ValueError(f"axis must be one of {names}, got {axis!r}")
    return _groups(grid, names.index(axis))


def expert_groups(grid, names, ep):
    """Expert-parallel groups: each data-parallel group (see
    :func:`groups_along`) split into consecutive blocks of ``ep`` ranks, which
    hold different experts and exchange tokens by all-to-all. ``ep`` must
    divide the data-parallel degree."""
    ep = positive_integer("ep", ep)
    out = []
    for group in groups_along(grid, names, "dp"):
        if len(group) % ep:
            raise ValueError(f"ep must divide the data-parallel degree {len(group)}, got ep={ep}")
        out += [group[i:i + ep] for i in range(0, len(group), ep)]
    return out


def nodes_spanned(ranks, gpus_per_node=8):
    """How many nodes of ``gpus_per_node`` consecutive ranks a group touches."""
    gpn = positive_integer("gpus_per_node", gpus_per_node)
    ranks = [nonnegative_integer("ranks", r) for r in ranks]
    if not ranks:
        raise ValueError("ranks must not be empty")
    return len({r // gpn for r in ranks})


def layout_rules(tp=1, cp=1, pp=1, dp=1, ep=1, *, layers, heads, kv_heads=None, seq_len=None,
                 experts=None, microbatches=None, nvlink_domain=8):
    """Check a TP x CP x PP x DP (+ EP) layout against the rules of thumb of
    the chapter. Returns a list of ``(rule, ok)`` pairs:

    * tensor parallelism stays inside one NVLink domain (8 GPUs in an H100
      server, 72 in a GB200 NVL72 rack) and splits whole heads, K/V heads too;
    * the pipeline splits the layers evenly (Llama 3 counts the embedding and
      the output layer as one layer each), with at least as many micro-batches
      as stages (the bubble is ``(p-1)/m``);
    * context parallelism splits each sequence into ``2 cp`` chunks (each GPU
      takes one early and one late chunk, which balances the causal mask, as
      Llama 3 does);
    * expert parallelism divides both the data-parallel degree (it is carved
      out of it) and the number of experts.
    """
    tp, cp, pp, dp, ep = (positive_integer(n, v) for n, v in
                          (("tp", tp), ("cp", cp), ("pp", pp), ("dp", dp), ("ep", ep)))
    layers = positive_integer("layers", layers)
    heads = positive_integer("heads", heads)
    kv = heads if kv_heads is None else positive_integer("kv_heads", kv_heads)
    domain = positive_integer("nvlink_domain", nvlink_domain)
    rules = [
        (f"TP{tp} fits in one NVLink domain of {domain} GPUs", tp <= domain),
        (f"TP{tp} divides the {heads} attention heads", heads % tp == 0),
        (f"TP{tp} divides the {kv} key/value heads (or they are replicated)", kv % tp == 0 or tp % kv == 0),
        # Llama 3 gives the first and last stage one layer fewer, for the
        # embedding and the output layer: 126 + 2 layers over 16 stages.
        (f"PP{pp} gives every stage as many layers (embedding and output counted as one each)",
         layers % pp == 0 or (layers + 2) % pp == 0),
    ]
    if microbatches is not None:
        m = positive_integer("microbatches", microbatches)
        rules.append((f"{m} micro-batches are at least PP{pp}", m >= pp))
    if cp > 1:
        if seq_len is None:
            raise ValueError("seq_len is needed to check context parallelism")
        s = positive_integer("seq_len", seq_len)
        rules.append((f"2 x CP{cp} chunks divide the {s}-token sequence", s % (2 * cp) == 0))
    if ep > 1:
        rules.append((f"EP{ep} divides DP{dp}", dp % ep == 0))
        if experts is None:
            raise ValueError("experts is needed to check expert parallelism")
        e = positive_integer("experts", experts)
        rules.append((f"EP{ep} divides the {e} experts", e % ep == 0))
    return rules
