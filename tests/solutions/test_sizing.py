"""solutions.sizing: a shape of a given size from the nearest published one, against hand counts."""
from __future__ import annotations

import math

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


def _llama_count(h, layers, kv, f, V):
    """A Llama-style decoder by hand: untied input and output embeddings (2 V h), the final
    norm; per layer the query and output projections (2 h^2), keys and values (2 h x 128 kv),
    the SwiGLU MLP (3 h f) and two norms."""
    return 2 * V * h + h + layers * (2 * h * h + 2 * h * 128 * kv + 3 * h * f + 2 * h)


def test_further_away_width_and_depth_keep_the_published_width_per_layer():
    """Llama 3 8B (4,096 wide, 32 layers: 128 per layer) to 125M with a 50,257-token
    vocabulary: at 6 heads of 128 (width 768, one K/V head, MLP 14,336 x 768 / 4,096 = 2,688)
    the embeddings are 2 x 50,257 x 768 = 77.2M and a layer 7.57M, so 6 layers make 125M:
    768 / 6 = 128 per layer, the published ratio exactly."""
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.Shape(**{**vars(steptime.shape_of(base)), "vocab": 50257})
    out, note = sizing.sized(shape, 125e6, steptime.Shape(**{**vars(shape), "params": None}).n_params)
    assert (out.hidden, out.layers, out.heads, out.kv_heads, out.ffn_hidden) == (768, 6, 6, 1, 2688)
    assert _counted(out) == pytest.approx(_llama_count(768, 6, 1, 2688, 50257), rel=1e-6)
    assert abs(_counted(out) - 125e6) <= _llama_count(768, 1, 1, 2688, 0) / 2  # within half a layer
    assert out.n_params == 125e6 and note == "width and depth scaled to 125M parameters"


def test_at_1b_the_nearest_width_per_layer_wins_and_the_query_heads_per_kv_head_hold_or_grow():
    """Llama 3 8B to 1B (its 128,000-token vocabulary): 14 heads (width 1,792, MLP 6,272)
    need 13 layers (embeddings 458.8M, 41.0M a layer): 138 per layer; 13 heads (1,664, MLP
    5,888) need 16 layers: 104 per layer. 138 is nearer 128 (on a log scale), so 14 heads, with
    2 K/V heads (7 queries each: 14 has no divisor giving 4)."""
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    out, _ = sizing.sized(shape, 1e9, base.params)
    assert (out.hidden, out.layers, out.heads, out.kv_heads, out.ffn_hidden) == (1792, 13, 14, 2, 6272)
    assert _counted(out) == pytest.approx(_llama_count(1792, 13, 2, 6272, 128000), rel=1e-6)
    per_layer_13 = 1664 / round((1e9 - _llama_count(1664, 0, 1, 5888, 128000)) / _llama_count(1664, 1, 1, 5888, 0))
    assert abs(math.log(1792 / 13 / 128)) < abs(math.log(per_layer_13 / 128))


def test_small_models_are_no_longer_a_few_very_wide_layers():
    """The cube-root rule alone made 0.5B from Llama 3 8B three layers of 1,536 (512 per layer):
    now every size from 0.3B to 6B keeps its width per layer within a factor of two of 128."""
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    for size in (0.3e9, 0.5e9, 0.76e9, 1e9, 1.5e9, 2.7e9, 3e9, 6e9):
        out, _ = sizing.sized(shape, size, base.params)
        assert 64 <= out.hidden / out.layers <= 256, (size, out.hidden, out.layers)


def test_wide_models_keep_heads_that_tensor_parallelism_divides():
    """Chinchilla (64 heads) to 30B: beyond 16 heads the width moves 8 heads at a time, so TP8
    divides the heads (the cube-root rule had given 49)."""
    base = facts.ARCHITECTURES["Chinchilla"]
    out, _ = sizing.sized(steptime.shape_of(base), 30e9, base.params)
    assert out.heads % 8 == 0 and out.n_params == 30e9


def test_a_width_kept_moves_only_the_depth_however_far():
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    out, _ = sizing.sized(shape, 30e9, base.params, keep_width=True)
    assert out.hidden == shape.hidden and out.layers > 2 * shape.layers


def test_below_one_layer_is_one_line():
    shape = steptime.shape_of(facts.ARCHITECTURES["Llama 3 8B"])
    # one head of 128 and its 128,000-token embeddings are 33M parameters
    with pytest.raises(ValueError, match=r"^model 2e\+07 is below one layer of width 128 \(3\.3e\+07 .*vocabulary of 128,000\)$"):
        sizing.sized(shape, 2e7, 8e9)


def test_embedding_share_is_the_embeddings_and_final_norm_over_the_count():
    """Llama 3 8B: (2 x 128,000 x 4,096 + 4,096) over its own count, about 13%."""
    shape = steptime.shape_of(facts.ARCHITECTURES["Llama 3 8B"])
    expected = (2 * 128000 * 4096 + 4096) / _counted(shape)
    assert sizing.embedding_share(shape) == pytest.approx(expected, rel=1e-9)
    assert 0.12 < expected < 0.14


def test_width_for_keeps_the_depth_and_lets_the_mlp_make_up_the_size_by_hand():
    """Llama 3 8B's 32 layers at 16B: 40 heads (width 5,120, 10 K/V heads, MLP 17,920) count
    12.3B by hand and 48 heads (6,144, 12 K/V heads, MLP 21,504) 17.3B. Each MLP column adds
    3 x width x 32 parameters, so 16B needs an MLP of 25,600 at 40 heads (5.0 times the width)
    or 19,328 at 48 (3.15 times): the published 3.5 is nearer the second. The count then lands
    within half a step of 128 columns, and the shape takes 16B as its count."""
    base = facts.ARCHITECTURES["Llama 3 8B"]
    shape = steptime.shape_of(base)
    V, target = shape.vocab, 16e9
    assert _llama_count(5120, 32, 10, 17920, V) < target < _llama_count(6144, 32, 12, 21504, V)

    def mlp(h, kv):  # the multiple of 128 nearest the width that makes the size
        rest = _llama_count(h, 32, kv, 0, V)
        return round((target - rest) / (3 * h * 32) / 128) * 128

    assert (mlp(5120, 10), mlp(6144, 12)) == (25600, 19328)
    out = sizing.width_for(shape, target)
    assert (out.layers, out.hidden, out.heads, out.kv_heads, out.ffn_hidden) == (32, 6144, 48, 12, 19328)
    assert abs(_counted(out) - target) <= 3 * 6144 * 32 * 128 / 2
    assert _counted(out) == pytest.approx(_llama_count(6144, 32, 12, 19328, V), rel=1e-6)
    assert out.n_params == target
    with pytest.raises(ValueError, match="below 32 layers of one head"):
        sizing.width_for(shape, 2e7)  # one head of 128: its embeddings alone are 32.8M


def test_a_mixture_that_alternates_keeps_its_first_moe_layer():
    """Llama 4 Maverick puts its experts in every second layer (layer_freq 2, no leading dense
    layers): one layer is a dense model, so the fewest layers of its design are two. Before, 7B
    became one dense layer charged with 7B parameters it did not have."""
    base = facts.MOE_ARCHITECTURES["Llama 4 Maverick"]
    shape = steptime.shape_of(base)
    assert shape.moe.layer_freq == 2 and shape.moe.dense_layers == 0
    two = _counted(steptime.Shape(**{**vars(shape), "layers": 2}))
    with pytest.raises(ValueError, match=r"below 2 layers \(the first with experts\)"):
        sizing.depth_for(shape, 7e9, base.total_params)
    assert sizing.depth_for(shape, two * base.total_params / _counted(shape), base.total_params) == 2
    assert 0 < sizing.embedding_share(shape) < 1
