"""solutions.sizing: a shape of a given size from the nearest published one, against hand counts."""
from __future__ import annotations

import pytest

from solutions import facts, sizing, steptime


def _counted(shape):
    """The shape's own count of its parameters (params left to the shape)."""
    return steptime.Shape(**{**vars(shape), "params": None}).n_params


def test_depth_for_a_gelu_shape_against_narayanan_eq_2():
    """12 l h^2 + 13 l h + h (V + s) parameters: l = (target - h (V + s)) / (12 h^2 + 13 h), the
    target counted as the published shape counts itself (Chinchilla: 80 layers for 70B)."""
    chin = facts.ARCHITECTURES["Chinchilla"]
    shape = steptime.shape_of(chin)
    h, V, s = shape.hidden, shape.vocab, shape.seq_len
    per_layer, fixed = 12 * h * h + 13 * h, h * (V + s)
    for size in (50e9, 70e9, 100e9):
        target = size * (fixed + per_layer * chin.layers) / chin.params
        assert sizing.depth_for(shape, size, chin.params) == round((target - fixed) / per_layer)
    assert sizing.depth_for(shape, chin.params, chin.params) == chin.layers


def test_within_a_factor_of_two_in_depth_only_the_depth_changes():
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    out, note = sizing.sized(shape, 13e9, base.params)
    assert (out.hidden, out.heads, out.kv_heads, out.ffn_hidden) == (shape.hidden, shape.heads, shape.kv_heads,
                                                                     shape.ffn_hidden)
    assert out.n_params == 13e9 and note == f"depth set to {out.layers} layers for 13B parameters"
    same, note = sizing.sized(shape, base.params, base.params)
    assert same.layers == base.layers and note == ""


def test_further_away_width_and_depth_scale_and_the_grouped_query_ratio_holds():
    """Llama 3 8B to 1B: the width by (1/8)^(1/3) = 0.5 to 2,048 (16 heads of 128, 4 K/V heads:
    four queries per key/value head, as published), the MLP by the same factor, then the depth
    that makes 1B counted by the new shape itself (within half a layer)."""
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    out, note = sizing.sized(shape, 1e9, base.params)
    assert (out.hidden, out.heads, out.kv_heads, out.head_size) == (2048, 16, 4, 128)
    assert out.ffn_hidden == round(shape.ffn_hidden * 2048 / 4096 / 128) * 128
    one_layer = _counted(steptime.Shape(**{**vars(out), "layers": 2})) - _counted(
        steptime.Shape(**{**vars(out), "layers": 1}))
    assert abs(_counted(out) - 1e9) <= one_layer / 2
    assert out.n_params == 1e9 and note == "width and depth scaled to 1B parameters"


def test_a_width_kept_moves_only_the_depth_however_far():
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    out, _ = sizing.sized(shape, 30e9, base.params, keep_width=True)
    assert out.hidden == shape.hidden and out.layers > 2 * shape.layers


def test_below_one_layer_is_one_line():
    shape = steptime.shape_of(facts.ARCHITECTURES["Llama 3 8B"])
    with pytest.raises(ValueError, match=r"^model 1e\+08 is below one layer of width [\d,]+ \(.*vocabulary of"):
        sizing.sized(shape, 1e8, 8e9)
