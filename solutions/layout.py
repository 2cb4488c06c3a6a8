"""Process layout for 3D parallelism: which global ranks share each axis.

Like picotron, the world is one ``arange(world_size)`` reshaped to
``(dp, pp, tp)``: tensor-parallel ranks are adjacent (so they land on the
same node, where bandwidth is highest), then pipeline stages, then replicas.
"""

from __future__ import annotations

import numpy as np

from ._validate import nonnegative_integer, positive_integer

__all__ = ["process_grid", "tp_groups", "pp_groups", "dp_groups", "coordinates"]


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
