"""FLOP counts against Narayanan et al. SC'21 Eq. 3 and Korthikanti et al. 2022 App. A."""

import pytest

from armillary import Strategy, Training, estimate
from armillary.estimate.flops import model_flop_per_iteration
from armillary.plan.arrays import ModelArrays, TrainingArrays


def test_model_flops_korthikanti(gpt175b):
    B, s, L, h, V = 64, 2048, 96, 12288, 51200
    expected = 72 * B * L * s * h**2 * (1 + s / (6 * h) + V / (12 * h * L))
    got = model_flop_per_iteration(ModelArrays.of(gpt175b), TrainingArrays(seq_len=s, global_batch=B))
    assert float(got.total) == pytest.approx(expected, rel=1e-12)


def test_full_recompute_hardware_flops_are_sc21_eq3(gpt175b):
    """With full recomputation the hardware FLOPs are SC'21 Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh)."""
    B, s, L, h, V = 1536, 2048, 96, 12288, 51200
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=8, pp=8, recompute="full"),
                 Training(seq_len=s, global_batch=B), gpus=1024)
    eq3 = 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))
    assert float(r.hardware_flop) == pytest.approx(eq3, rel=1e-12)


def test_selective_recompute_adds_attention_core(gpt175b):
    """Selective recomputation re-runs QK^T and attention over V: +4 B s^2 h per layer (docs/formulas.md §3.2)."""
    B, s, L, h = 64, 2048, 96, 12288
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=8, pp=8, recompute="selective"),
                 Training(seq_len=s, global_batch=B), gpus=64)
    assert float(r.hardware_flop - r.model_flop) == pytest.approx(4 * B * s * s * h * L, rel=1e-12)


def test_backward_is_twice_forward_per_layer(gpt22b):
    """SC'21 Appendix: backward = 2 x forward FLOPs; weight gradients are one GEMM per weight GEMM."""
    r = estimate(gpt22b, "dgx-a100", Strategy(tp=8), Training(seq_len=2048, global_batch=4), gpus=8)
    lc = r.layer
    b, s, h, t = 1, 2048, 6144, 8  # micro_batch 1
    assert float(lc.forward.flop) == pytest.approx((24 * b * s * h**2 + 4 * b * s * s * h) / t)
    assert float(lc.backward_input.flop + lc.backward_weight.flop) == pytest.approx(2 * float(lc.forward.flop))
    assert float(lc.backward_weight.flop) == pytest.approx(24 * b * s * h**2 / t)
    assert float(lc.recompute.flop) == 0.0


def test_keys_attended_under_causal_and_sliding_window_masks():
    from armillary.workload.attention import keys_attended

    assert float(keys_attended(8192, 0)) == 4096  # causal: half the keys on average
    assert float(keys_attended(8192, 16384)) == 4096  # a window longer than the sequence changes nothing
    assert float(keys_attended(32768, 4096)) == pytest.approx(4096 * (1 - 4096 / 65536))


def test_sliding_window_shortens_flash_attention_only(gpt22b):
    """FlashAttention skips blocks outside the window; the standard path computes and masks all of them.
    Model FLOPs (the MFU numerator) count min(window, s) keys per query either way (Megatron-Bridge's
    flop_utils: swa_context = min(window, seq)): the attention core's share falls by window / s."""
    windowed = gpt22b.model_copy(update={"sliding_window": 512})
    w = Training(seq_len=8192, global_batch=8)
    L, B, s, h = gpt22b.layers, 8, 8192, gpt22b.hidden
    core = 3 * L * 4 * B * s * s * h  # QK^T and attention over V, forward and backward, over the full s x s matrix
    windowed_flop = float(estimate(gpt22b, "dgx-a100", Strategy(tp=8), w, gpus=8).model_flop) - core * (1 - 512 / s)
    for attention, shorter in (("flash", True), ("standard", False)):
        st = Strategy(tp=8, attention=attention)
        full = estimate(gpt22b, "dgx-a100", st, w, gpus=8)
        local = estimate(windowed, "dgx-a100", st, w, gpus=8)
        assert (float(local.step_time_s) < float(full.step_time_s)) == shorter
        assert float(local.model_flop) == pytest.approx(float(windowed_flop))


def test_mistral_config_reads_its_window():
    from armillary import load_model

    cfg = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000, "hidden_act": "silu",
           "max_position_embeddings": 32768, "sliding_window": 4096, "tie_word_embeddings": False}
    assert load_model(cfg).sliding_window == 4096


@pytest.mark.parametrize("preset", ["llama3-8b", "gpt3-175b"])
def test_alternate_matmul_recompute_by_hand(preset):
    """torchtitan's op-level selective checkpointing re-runs every second matmul of a block in forward
    order: q, k, v, o, gate, up, down -> k, o, up (Llama: SwiGLU), or q, k, v, o, fc1, fc2 -> k, o, fc2 (GPT:
    GeLU). Either way the re-run FLOPs are 2 T h (kv_heads d_h + heads d_v + ffn) per layer, per TP rank."""
    from armillary.specs.loading import load_model

    m = load_model(preset)
    b, s, t = 2, 4096, 2
    r = estimate(m, "dgx-h100", Strategy(tp=t, micro_batch=b, attention="flash", recompute="selective",
                                         recompute_modules=("alternate_matmuls",)),
                 Training(seq_len=s, global_batch=b), gpus=t)
    T, h, dh = b * s, m.hidden, m.hidden // m.heads
    expected = 2 * T * h * ((m.kv_heads or m.heads) * dh + m.heads * dh + m.ffn) / t
    assert float(r.layer.recompute.flop) == pytest.approx(expected, rel=1e-12)
    L = m.layers
    assert float(r.hardware_flop - r.model_flop) == pytest.approx(expected * t * L, rel=1e-9)


def test_elementwise_recompute_reruns_every_elementwise_kernel_and_no_flops():
    """Recomputing every element-wise kernel (norms, residual adds, rotary, activation) costs their forward
    traffic and time, no GEMM FLOPs, and stores neither the norm outputs nor the activation's output; every
    second matmul re-run stores neither K nor the up projection's output."""
    from armillary.estimate.activations import layer_activations
    from armillary.plan.arrays import StrategyArrays
    from armillary.specs.loading import load_model
    from armillary.workload.transformer import layer_forward

    llama = load_model("llama3-8b")
    w = Training(seq_len=4096, global_batch=1)
    plain = estimate(llama, "dgx-h100", Strategy(attention="flash"), w, gpus=1)
    r = estimate(llama, "dgx-h100", Strategy(attention="flash", recompute="selective",
                                             recompute_modules=("elementwise",)), w, gpus=1)
    ma = ModelArrays.of(llama)
    fw = layer_forward(ma, 1, 4096, 1.0, 0.0, 2.0)
    streams = fw.norms.bytes + fw.residuals.bytes + fw.rotary.bytes + fw.activation.bytes
    assert float(r.layer.recompute.bytes) == pytest.approx(float(streams), rel=1e-12)
    assert float(r.hardware_flop) == float(plain.hardware_flop)
    acts = layer_activations(ma, 1, 4096, 1.0, 0.0, 2.0, 2.0)

    def stored(**kw):
        return float(acts.stored(StrategyArrays.of(Strategy(attention="flash", **kw), 1)))

    T, h, f = 4096, llama.hidden, llama.ffn
    saved = stored(recompute="selective", recompute_modules=("core_attn",)) - stored(
        recompute="selective", recompute_modules=("core_attn", "elementwise"))
    assert saved == pytest.approx(2 * 2 * T * h + 2 * T * f)  # two norm outputs and the SwiGLU product
    both = stored(recompute="selective", recompute_modules=("elementwise", "layernorm"))
    assert both == stored(recompute="selective", recompute_modules=("elementwise",))  # norms counted once
    kv = llama.kv_heads * (h // llama.heads)
    alternate = stored(recompute="selective", recompute_modules=("core_attn",)) - stored(
        recompute="selective", recompute_modules=("core_attn", "alternate_matmuls"))
    assert alternate == pytest.approx(2 * T * kv + 2 * T * f)  # K and the up projection's output


def test_windowed_model_mfu_stays_below_peak_at_long_sequences():
    """Issue 46, finding 1: Mistral 7B (window 4,096) at 32K tokens printed MFU 130% because the numerator
    counted the full 32K x 32K attention the window never computes; with the window's keys it is a share of
    the peak like any other run."""
    r = estimate("mistral-7b", "trn2-16", Strategy(cp=2, recompute="selective", zero=3, attention="flash"),
                 Training(seq_len=32768, global_batch=16), gpus=16)
    assert bool(r.feasible)
    assert 0 < float(r.mfu) <= float(r.hfu) <= 1
