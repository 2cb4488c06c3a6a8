"""A transformer of a given size, drawn from the nearest published shape.

The planner takes a model by its parameter count alone (``--model 100e9``, or the
compute-optimal size of a budget). Its step time, activations and traffic need a shape:
layers, width, heads. :func:`sized` takes the published shape nearest in size and changes it
as little as it can until its parameters are the size asked for:

- within a factor of two in depth, only the depth changes (:func:`depth_for`): the width,
  heads, MLP and vocabulary stay those of a model that was trained;
- where the depth is the user's (``--layers``), only the width changes, in whole heads, and
  the MLP's width makes up the rest (:func:`width_for`);
- further away, width and depth change together and keep the published width-to-depth
  ratio (:func:`aspect_sized`): the width moves a head at a time, eight at a time beyond
  sixteen (the MLP's width follows it; the head size stays, and the grouped-query ratio as far
  as whole heads allow), the depth is set to make the size at each width, and the width
  whose ratio comes nearest the published one wins.
  Matching the whole count, embeddings included, matters at the small end: Llama 3 8B's
  128,000-token vocabulary is half of a 1B model, so a width scaled by the cube root of the size
  ratio alone would leave a few very wide layers.

Kaplan et al. 2020 (sec. 3.1, Fig. 5) found the loss at a fixed parameter count nearly
independent of depth against width over a wide range, so either change keeps the model's
loss; what they change is how the step is spent, which is what the planner needs right.
"""

from __future__ import annotations

import math
from dataclasses import replace

from . import steptime
from ._format import count as count_words
from ._validate import positive

__all__ = ["aspect_sized", "depth_for", "embedding_share", "sized", "width_for", "DEPTH_ONLY_FACTOR"]

#: How far the depth alone may move (either way) before the width moves too.
DEPTH_ONLY_FACTOR = 2.0


def _count(shape: steptime.Shape, layers: int) -> float:
    """Parameters ``shape`` counts for itself with ``layers`` layers."""
    return replace(shape, layers=layers, params=None).n_params


def embedding_share(shape: steptime.Shape) -> float:
    """The share of ``shape``'s own count that does not grow with its depth: its embeddings and
    final norm (and a mixture's dense layers), the count of the shallowest shape less one more
    layer's worth."""
    low, period = _first_layers(shape)
    one, two = _count(shape, low), _count(shape, low + period)
    return (2 * one - two) / _count(shape, shape.layers)


def _first_layers(shape: steptime.Shape) -> tuple:
    """``(layers, period)``: the fewest layers that keep ``shape``'s design (a mixture's dense
    layers and its first MoE layer, which comes last in each group of ``layer_freq``) and the
    layers of each repeat after them (one, or a mixture's ``layer_freq``)."""
    if shape.moe is None:
        return 1, 1
    return shape.moe.dense_layers + shape.moe.layer_freq, shape.moe.layer_freq


def _bracket(start: int, below) -> tuple:
    """``(low, high)``, ``high = low + 1``: where ``below`` (true from ``start`` up to some whole
    number, false from there on) turns false, found by doubling from ``start`` and then
    bisecting; ``low`` is ``start`` where ``below`` never holds."""
    low = high = start
    while below(high):
        low, high = high, 2 * high
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if below(mid) else (low, mid)
    return low, max(high, low + 1)


def depth_for(shape: steptime.Shape, params: float, published: float) -> int:
    """Layers that give ``shape``'s width ``params`` parameters, counted as the shape's own
    published count ``published`` counts them: the target is ``params`` times the shape's
    counted-to-published ratio, and the layers the whole number whose count is nearest it. The
    count grows with the layers (the embeddings, then each layer's weights, a mixture's
    experts included), so a bisection finds them, never fewer than the design's first layers
    (:func:`_first_layers`: a mixture keeps one MoE layer). A size nearer less than that is a
    one-line ``ValueError``."""
    params = float(positive("model_params", params))
    target = params * _count(shape, shape.layers) / float(positive("published", published))
    low, period = _first_layers(shape)
    smallest, step = _count(shape, low), _count(shape, low + period) - _count(shape, low)
    if target < smallest - step / 2:
        first = "one layer" if shape.moe is None else f"{low} layers (the first with experts)"
        raise ValueError(f"model {params:.3g} is below {first} of width {shape.hidden:,} "
                         f"({smallest:.3g} parameters with its embeddings for a vocabulary of "
                         f"{shape.vocab:,})")
    low, high = _bracket(low, lambda n: _count(shape, n) < target)
    return min((low, high), key=lambda n: (abs(_count(shape, n) - target), n))


def _with_heads(shape: steptime.Shape, heads: int) -> steptime.Shape:
    """``shape`` with ``heads`` query heads: the head size and the MLP's width relative to the
    model's kept, and the most key/value heads that divide the query heads and leave each at
    least the published number of query heads (at least one)."""
    group = shape.heads // shape.kv  # query heads per key/value head, as published
    head = shape.head_size
    kv = max(d for d in range(1, max(1, heads // group) + 1) if heads % d == 0)
    factor = heads / shape.heads
    hidden = heads * head if shape.head_dim is None else max(head, round(shape.hidden * factor / head) * head)
    ffn = None
    if shape.ffn_hidden is not None:
        ffn = max(128, round(shape.ffn_hidden * hidden / shape.hidden / 128) * 128)
    return replace(shape, hidden=hidden, heads=heads, kv_heads=None if shape.kv_heads is None else kv,
                   ffn_hidden=ffn, params=None)


def _heads(i: int) -> int:
    """The ``i``-th width, in query heads: 1 to 16 heads, then multiples of 8, so that a wide
    model's heads divide among 2, 4 or 8 tensor-parallel GPUs, as the published designs' do."""
    return i if i <= 16 else 8 * (i - 14)


def width_for(shape: steptime.Shape, params: float) -> steptime.Shape:
    """``shape`` at its own depth with ``params`` parameters (counted by the new shape itself):
    the widths of :func:`_heads` move in whole heads, eight at a time beyond sixteen (a step of
    24 to 32 heads nearly doubles the count), so the MLP makes up the rest. Of the two widths on
    either side of the size, each with the MLP width (a multiple of 128) that brings its count
    nearest ``params``, the one whose MLP-to-model width ratio moves least from ``shape``'s
    wins. A model of one head and the narrowest MLP already larger is a one-line
    ``ValueError``. The count lands within half an MLP step (128 columns in every layer) of
    ``params``, which the shape then takes as its count, as :func:`aspect_sized`'s shapes do."""
    params = float(positive("model_params", params))
    ratio = shape.ffn / shape.hidden

    def at(i):
        wide = _with_heads(shape, _heads(i))
        return replace(wide, ffn_hidden=wide.ffn, params=None)

    def mlp_for(s):  # the count grows linearly with the MLP's width
        per_column = replace(s, ffn_hidden=s.ffn + 128).n_params - s.n_params
        f = s.ffn + (params - s.n_params) / per_column * 128
        return replace(s, ffn_hidden=max(128, round(f / 128) * 128))

    one = replace(at(1), ffn_hidden=128)  # the smallest model at this depth
    if one.n_params - params > (replace(one, ffn_hidden=256).n_params - one.n_params) / 2:
        raise ValueError(f"model {params:.3g} is below {shape.layers} layers of one head ({one.hidden:,} wide: "
                         f"{one.n_params:.3g} parameters with its embeddings for a vocabulary of {shape.vocab:,})")
    low, high = _bracket(1, lambda i: at(i).n_params < params)
    best = min((mlp_for(at(i)) for i in (low, high)),
               key=lambda s: (abs(s.n_params - params) > 0.01 * params, abs(math.log(s.ffn / s.hidden / ratio))))
    return replace(best, params=params)


def aspect_sized(shape: steptime.Shape, params: float) -> steptime.Shape:
    """``shape`` at ``params`` parameters (counted by the new shape itself) with its width and
    depth both changed: at each width (:func:`_heads`), the depth that makes the size
    (:func:`depth_for`); of those, the one whose width per layer is nearest ``shape``'s (the
    width per layer rises with the width, so a bisection finds it). A size below one layer of
    the narrowest width is :func:`depth_for`'s one-line ``ValueError``."""
    params = float(positive("model_params", params))
    aspect = shape.hidden / shape.layers

    def at(i):
        wide = _with_heads(shape, _heads(i))
        layers = depth_for(wide, params, wide.n_params)  # the resized shape counts itself
        return replace(wide, layers=layers, params=params)

    def below(i):  # width per layer under the published one (False where no layer fits)
        try:
            s = at(i)
        except ValueError:
            return False
        return s.hidden / s.layers < aspect

    narrow = at(1)  # raises below one layer
    if narrow.hidden / narrow.layers >= aspect:
        return narrow
    low, high = _bracket(1, below)
    options = [at(low)]
    try:
        options.append(at(high))
    except ValueError:
        pass
    return min(options, key=lambda s: abs(math.log(s.hidden / s.layers / aspect)))


def sized(shape: steptime.Shape, params: float, published: float, keep_width: bool = False) -> tuple:
    """``(shape, note)``: ``shape`` (published with ``published`` parameters) resized to
    ``params`` as the module says; ``note`` names the change (``''`` if none). With
    ``keep_width`` (a width the user chose, or a named mixture of experts, whose experts' width
    belongs to its design) only the depth changes, however far."""
    params = float(positive("model_params", params))
    positive("published", published)
    try:
        layers = depth_for(shape, params, published)
    except ValueError:
        if keep_width:
            raise
        layers = 0
    experts = " with the experts" if shape.moe is not None else ""
    if layers and (keep_width or 1 / DEPTH_ONLY_FACTOR <= layers / shape.layers <= DEPTH_ONLY_FACTOR):
        if layers == shape.layers:
            return replace(shape, params=params), ""
        return replace(shape, layers=layers, params=params), f"depth set to {layers} layers for {_size(params)}{experts}"
    return aspect_sized(shape, params), f"width and depth scaled to {_size(params)}{experts}"


def _size(params: float) -> str:
    return f"{count_words(params)} parameters"
