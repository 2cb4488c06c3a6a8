"""A transformer of a given size, drawn from the nearest published shape.

The planner takes a model by its parameter count alone (``--model 100e9``, or the
compute-optimal size of a budget). Its step time, activations and traffic need a shape:
layers, width, heads. :func:`sized` takes the published shape nearest in size and changes it
as little as it can until its parameters are the size asked for:

- within a factor of two in depth, only the depth changes (:func:`depth_for`): the width,
  heads, MLP and vocabulary stay those of a model that was trained;
- further away, width and depth both scale by the cube root of the size ratio, so the
  published depth-to-width ratio is kept (the MLP's width and the heads follow the width; the
  grouped-query ratio and the head size stay), and the depth is then set to make the size.

Kaplan et al. 2020 (sec. 3.1, Fig. 5) found the loss at a fixed parameter count nearly
independent of depth against width over a wide range, so either change keeps the model's
loss; what they change is how the step is spent, which is what the planner needs right.
"""

from __future__ import annotations

from dataclasses import replace

from . import steptime
from ._validate import positive

__all__ = ["depth_for", "sized", "DEPTH_ONLY_FACTOR"]

#: How far the depth alone may move (either way) before the width moves too.
DEPTH_ONLY_FACTOR = 2.0


def _count(shape: steptime.Shape, layers: int) -> float:
    """Parameters ``shape`` counts for itself with ``layers`` layers."""
    return replace(shape, layers=layers, params=None).n_params


def depth_for(shape: steptime.Shape, params: float, published: float) -> int:
    """Layers that give ``shape``'s width ``params`` parameters, counted as the shape's own
    published count ``published`` counts them: the target is ``params`` times the shape's
    counted-to-published ratio, and the layers the whole number whose count is nearest it. The
    count grows with the layers (the embeddings, then each layer's weights, a mixture's
    experts included), so a bisection finds them. Less than one layer beyond a mixture's dense
    ones is a one-line ``ValueError``."""
    params = float(positive("model_params", params))
    target = params * _count(shape, shape.layers) / float(positive("published", published))
    low = 1 + (shape.moe.dense_layers if shape.moe is not None else 0)
    smallest, step = _count(shape, low), _count(shape, low + 1) - _count(shape, low)
    if target < smallest - step / 2:
        raise ValueError(f"model {params:.3g} is below one layer of width {shape.hidden:,} "
                         f"({smallest:.3g} parameters with its embeddings for a vocabulary of "
                         f"{shape.vocab:,})")
    high = low
    while _count(shape, high) < target:
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if _count(shape, mid) < target else (low, mid)
    return min((low, high), key=lambda n: (abs(_count(shape, n) - target), n))


def _widened(shape: steptime.Shape, factor: float) -> steptime.Shape:
    """``shape`` with its width times ``factor``, rounded to whole grouped-query groups of
    heads (at least one); the head size, the ratio of query to key/value heads and the MLP's
    width relative to the model's kept."""
    group = shape.heads // shape.kv  # query heads per key/value head
    head = shape.head_size
    groups = max(1, round(shape.kv * factor))
    heads = groups * group
    hidden = heads * head if shape.head_dim is None else max(head, round(shape.hidden * factor / head) * head)
    ffn = None
    if shape.ffn_hidden is not None:
        ffn = max(128, round(shape.ffn_hidden * hidden / shape.hidden / 128) * 128)
    return replace(shape, hidden=hidden, heads=heads, kv_heads=None if shape.kv_heads is None else groups,
                   ffn_hidden=ffn, params=None)


def sized(shape: steptime.Shape, params: float, published: float, keep_width: bool = False) -> tuple:
    """``(shape, note)``: ``shape`` (published with ``published`` parameters) resized to
    ``params`` as the module says; ``note`` names the change (``''`` if none). With
    ``keep_width`` (a width the user chose, or a mixture of experts, whose experts' width is
    its own) only the depth changes, however far."""
    params = float(positive("model_params", params))
    ratio = params / float(positive("published", published))
    try:
        layers = depth_for(shape, params, published)
    except ValueError:
        if keep_width:
            raise
        layers = 0
    if layers and (keep_width or 1 / DEPTH_ONLY_FACTOR <= layers / shape.layers <= DEPTH_ONLY_FACTOR):
        if layers == shape.layers:
            return replace(shape, params=params), ""
        experts = " with the experts" if shape.moe is not None else ""
        return replace(shape, layers=layers, params=params), f"depth set to {layers} layers for {_size(params)}{experts}"
    cube = ratio ** (1 / 3)
    wide = _widened(shape, cube)
    layers = depth_for(wide, params, wide.n_params)  # the resized shape counts itself
    out = replace(wide, layers=layers, params=params)
    return out, f"width and depth scaled to {_size(params)}"


def _size(params: float) -> str:
    if params >= 1e12:
        return f"{params / 1e12:,.3g}T parameters"
    return f"{params / 1e9:,.3g}B parameters"
