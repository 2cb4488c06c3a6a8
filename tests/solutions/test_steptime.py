"""The step-time model against its equations and against published training runs."""
from __future__ import annotations

import statistics

import pytest

from solutions import communication, efficiency, facts, steptime as S

RUNS = {r.name: r for r in facts.PUBLISHED_RUNS}
#: Rows that set a constant (CALIBRATION, NETWORK_EFFICIENCY); every other row is held out.
SETTERS = S.SETTING_RUNS
#: The bound on the held-out rows: relative error of the predicted MFU.
MEDIAN_BOUND, WORST_BOUND = S.PUBLISHED_BOUNDS["median"], S.PUBLISHED_BOUNDS["worst"]


def test_published_runs_predicted_vs_published():
    """Prints every row; asserts the held-out rows' median and worst relative MFU error."""
    errors = {}
    print(f"\n{'run':40s} {'published':>9s} {'predicted':>9s} {'error':>7s}")
    for run in facts.PUBLISHED_RUNS:
        st, lay = S.predict_run(run)
        pub = S.published_mfu(run)
        err = st.mfu / pub - 1
        tag = "set" if run.name in SETTERS else ""
        print(f"{run.name:40s} {pub:9.3f} {st.mfu:9.3f} {err:+7.1%} {tag}")
        if run.name not in SETTERS:
            errors[run.name] = abs(err)
    median, worst = statistics.median(errors.values()), max(errors.values())
    print(f"held out: {len(errors)} rows, median |error| {median:.1%}, worst {worst:.1%} ({max(errors, key=errors.get)})")
    assert len(errors) >= 15
    assert median <= MEDIAN_BOUND
    assert worst <= WORST_BOUND


def test_setting_rows_are_matched_and_constants_rederived():
    a = S.calibrate([RUNS[n] for n in S.CALIBRATION["A100"].set_by])
    assert (a.e_max, a.w0) == pytest.approx((S.CALIBRATION["A100"].e_max, S.CALIBRATION["A100"].w0), rel=0.01)
    h = S.calibrate([RUNS[n] for n in S.CALIBRATION["H100"].set_by], w0=S.CALIBRATION["H100"].w0)
    assert h.e_max == pytest.approx(S.CALIBRATION["H100"].e_max, rel=0.01)
    for name in SETTERS:
        assert S.predict_run(RUNS[name])[0].mfu == pytest.approx(S.published_mfu(RUNS[name]), rel=0.02)


def test_gpt_params_reproduce_table_1():
    # Narayanan et al. 2021, Table 1 lists the parameter counts that eq. 2 gives.
    for run in facts.PUBLISHED_RUNS[:10]:
        assert S.run_shape(run).n_params == pytest.approx(run.params, rel=0.03), run.name  # 1.65B prints as 1.7


def test_hardware_flops_with_full_recompute_is_megatron_eq3():
    shape = S.Shape(96, 12288, 96, 2048, 51200)
    l, h, s, V = 96, 12288, 2048, 51200
    eq3 = 96 * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h)) / s  # per token (B s tokens per iteration)
    assert S.hardware_flops_per_token(shape, "full") == pytest.approx(eq3, rel=2e-3)
    # none < selective < full; the model FLOPs are PaLM's 6N + 12 L s (heads x head size)
    none, sel, full = (S.hardware_flops_per_token(shape, r) for r in S.RECOMPUTE)
    assert none == S.model_flops_per_token(shape) == pytest.approx(6 * shape.n_params + 12 * l * s * h)
    assert sel - none == pytest.approx(4 * l * s * h)
    assert full / none == pytest.approx(4 / 3, rel=0.02)


def test_recompute_costs_time():
    shape = S.Shape(96, 12288, 96, 2048, 51200)
    cl = S.Cluster(facts.GPUS["A100 80GB"], facts.A100_NVLINK, facts.SELENE_NETWORK)
    t = {r: S.step_time(shape, S.Layout(tp=8, dp=192, recompute=r), cl, 1536).breakdown_s["compute"]
         for r in S.RECOMPUTE}
    assert t["none"] < t["selective"] < t["full"]
    assert t["full"] / t["none"] == pytest.approx(S.hardware_flops_per_token(shape, "full")
                                                  / S.hardware_flops_per_token(shape), rel=1e-9)


def test_megatron_days_to_train_estimates():
    # Narayanan et al. eq. 4: 8 T P / (n X); our hardware FLOPs with full recomputation give the same days.
    for e in facts.MEGATRON_TRAINING_ESTIMATES:
        shape = S.Shape(96, 12288, 96, 2048, 51200, params=e["params"])
        tokens_per_s = e["gpus"] * e["tflops_per_gpu"] * 1e12 / (8 * e["params"])
        assert S.days_to_train(e["tokens"], tokens_per_s) == pytest.approx(e["days"], rel=0.03)
        assert S.hardware_flops_per_token(shape, "full") / e["params"] == pytest.approx(8, rel=0.1)


def test_palm_attention_width_is_heads_times_head_size():
    palm = S.shape_of(facts.ARCHITECTURES["PaLM"])
    assert palm.attention_width == 48 * 256 == 12288
    assert palm.kv_width == 256
    expected = 6 * 540e9 + 12 * 118 * 2048 * 12288
    assert S.model_flops_per_token(palm) == pytest.approx(expected, rel=1e-12)
    from solutions import compute
    assert compute.flops_per_token(540e9, 118, 2048, 18432, attention_width=12288) == pytest.approx(expected, rel=1e-12)
    assert compute.flops_per_token(540e9, 118, 2048, 18432) > expected  # d_model overstates PaLM's attention


def test_zb_h2_bubble_depends_on_the_times():
    # Qi et al. 2024, Table 2: (p-1)(T_F + T_B - 2 T_W); zero only when T_W >= (T_F + T_B) / 2.
    p, m = 8, 32
    got = efficiency.pipeline_bubble(p, m, "zb-h2", t_f=1.0, t_b=1.5, t_w=0.5)
    assert got == pytest.approx((p - 1) * (1.0 + 1.5 - 1.0) / (m * 3.0))
    assert efficiency.pipeline_bubble(p, m, "zb-h2", 1.0, 1.0, 1.0) == 0.0
    assert efficiency.pipeline_bubble(p, m, "zb-h2", 1.0, 1.0, 1.5) == 0.0
    assert 0 < got < efficiency.pipeline_bubble(p, m, "zb-h1", 1.0, 1.5, 0.5)


def test_bubble_shrinks_with_interleaving():
    one = S.pipeline_bubble_time(16, 32, "1f1b", 1.0, 2.0)
    assert one == pytest.approx(15 * 3.0)
    assert S.pipeline_bubble_time(16, 32, "interleaved", 1.0, 2.0, virtual_stages=4) == pytest.approx(one / 4)
    assert S.pipeline_bubble_time(1, 32) == 0.0


def test_zero3_traffic_counts_every_micro_batch():
    """FSDP gathers the weights for every micro-batch's forward and backward and
    reduce-scatters its gradients: 3 (d-1)/d of the shard per micro-batch."""
    shape = S.shape_of(facts.ARCHITECTURES["Llama 3 70B"])
    cl = S.Cluster(facts.GPUS["H100 SXM"], facts.H100_NVLINK, facts.LLAMA3_NETWORK)
    shard = shape.n_params / 8 * 2
    for micro_batch, m in ((1, 16), (4, 4)):
        st = S.step_time(shape, S.Layout(tp=8, dp=128, zero=3, micro_batch=micro_batch), cl, 2048)
        assert st.microbatches == m
        assert st.bytes["dp"] == pytest.approx(3 * shard * 127 / 128 * m, rel=1e-12)
    z1 = S.step_time(shape, S.Layout(tp=8, dp=128, zero=1), cl, 2048)
    plain = communication.allreduce_bytes_per_rank(shard, 128)
    assert z1.bytes["dp"] == pytest.approx(plain, rel=1e-12)  # reduce-scatter + all-gather, once per step
    deferred = S.step_time(shape, S.Layout(tp=8, dp=128, zero=3), cl, 2048, defer_grad_sync=True)
    assert deferred.bytes["dp"] == pytest.approx((2 * 16 + 1) * shard * 127 / 128, rel=1e-12)


def test_flash_attention_activations_are_smaller():
    shape = S.shape_of(facts.ARCHITECTURES["Llama 3 405B"])
    flash = S.activation_bytes(shape, S.Layout(tp=8, pp=16, dp=64), 32)
    standard = S.activation_bytes(shape, S.Layout(tp=8, pp=16, dp=64, attention="standard"), 32)
    assert flash < standard / 5
    full = S.activation_bytes(shape, S.Layout(tp=8, pp=16, dp=64, recompute="full"), 32)
    assert full < flash


def test_context_parallelism_splits_the_activations():
    shape = S.shape_of(facts.ARCHITECTURES["Llama 3 405B"], seq_len=131072)
    one = S.activation_bytes(shape, S.Layout(tp=8, pp=16, dp=8, cp=1), 16)
    sixteen = S.activation_bytes(shape, S.Layout(tp=8, pp=16, dp=8, cp=16), 16)
    assert sixteen == pytest.approx(one / 16, rel=1e-9)


@pytest.mark.parametrize("kwargs, message", [
    (dict(tp=3), "tp must divide"),
    (dict(cp=3), "cp must divide seq_len"),
    (dict(dp=7), "must divide global_batch"),
])
def test_bad_layouts_are_refused(kwargs, message):
    shape = S.Shape(32, 4096, 32, 4096)
    cl = S.Cluster(facts.GPUS["H100 SXM"], facts.H100_NVLINK, facts.LLAMA3_NETWORK)
    with pytest.raises(ValueError, match=message):
        S.step_time(shape, S.Layout(**kwargs), cl, 512)
    with pytest.raises(ValueError, match="virtual_stages"):
        S.Layout(pp=4, virtual_stages=2)
