"""Mixture of experts, multi-head latent attention, MatMul-free models and FlashAttention's IO count:
hand calculations from the papers, published model sizes and invariants."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from armillary import estimate
from armillary.estimate.flops import model_flop_per_iteration
from armillary.estimate.result import ParallelDimension
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import stage_dense_layers
from armillary.presets.registry import preset_names
from armillary.specs.communication import Collective
from armillary.specs.huggingface import from_huggingface
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import BitLinear, TernaryKernel
from armillary.specs.strategy import Routing, Strategy
from armillary.specs.workload import Training
from armillary.workload.attention import (
    flash_attention_hbm_accesses,
    kv_cache_elements_per_token,
    standard_attention_hbm_accesses,
)
from armillary.workload.experts import rank_load
from armillary.workload.parameters import count_parameters
from armillary.workload.transformer import layer_forward

HF = Path(__file__).parent / "data" / "huggingface"
W = Training(seq_len=4096, global_batch=64)


def _last_digit_unit(published: int) -> int:
    """A published figure such as 3,300,000,000 ('3.3B') is rounded to its last nonzero digit."""
    unit = 1
    while published % (unit * 10) == 0:
        unit *= 10
    return unit


@pytest.mark.parametrize("name", preset_names("models"))
def test_preset_sizes_match_published(name):
    """Total (and for MoE, active) parameters against the published counts: within 0.5%, or within one
    unit of the last digit of a rounded published figure ('1.7B' for 1.65B, '3.3B' active for 3.35B)."""
    model = load_model(name)
    assert model.published is not None, f"{name}: give its published size"
    count = count_parameters(ModelArrays.of(model))
    total = model.published.total
    assert abs(float(count.total) - total) <= max(0.005 * total, _last_digit_unit(total)), name
    if model.published.active is not None:
        active = float(count.active) - model.published.active_excludes_embedding * float(count.embedding)
        published = model.published.active
        assert abs(active - published) <= max(0.005 * published, _last_digit_unit(published)), name


@pytest.mark.parametrize(("config", "preset"), [
    ("mixtral-8x7b", "mixtral-8x7b"), ("deepseek-v3", "deepseek-v3"), ("deepseek-v2-lite", "deepseek-v2-lite"),
    ("qwen3-30b-a3b", "qwen3-30b-a3b"), ("gpt-oss-120b", "gpt-oss-120b"), ("mmfreelm-2.7b", "matmulfree-2.7b"),
    ("deepseek-v2", "deepseek-v2"), ("gpt-oss-20b", "gpt-oss-20b"), ("mistral-7b", "mistral-7b"),
    ("llama3.2-1b", "llama3.2-1b"), ("phi-4", "phi-4"), ("dbrx-base", "dbrx")])
def test_huggingface_configs_give_the_presets_parameters(config, preset):
    """config.json of each new family loads directly and counts exactly what the preset counts."""
    loaded = from_huggingface(json.loads((HF / f"{config}.json").read_text()))
    a, b = count_parameters(ModelArrays.of(loaded)), count_parameters(ModelArrays.of(load_model(preset)))
    assert float(a.total) == float(b.total) and float(a.active) == float(b.active)
    assert loaded.family == load_model(preset).family


def test_deepseek_v3_by_place():
    """DeepSeek-V3 (technical report Table/§4.2; HF config): 61 layers, 3 dense, 256 routed + 1 shared
    expert of 2048, top-8; MLA with q_lora 1536, kv_lora 512, RoPE 64, nope 128, v 128."""
    c = count_parameters(ModelArrays.of(load_model("deepseek-v3")))
    h, a = 7168, 128
    mla = h * 1536 + 1536 + 1536 * a * 192 + h * (512 + 64) + 512 + 512 * a * (128 + 128) + a * 128 * h
    assert float(c.attention) == mla + 2 * h
    assert float(c.expert) == 3 * h * 2048
    assert float(c.moe_shared) == h * 256 + 3 * h * 2048
    assert float(c.dense_mlp) == 3 * h * 18432
    assert float(c.total) == 671_026_404_352


def test_kv_cache_per_token_for_each_attention_kind():
    """Elements cached per token and layer (DeepSeek-V2 Table 1; docs/formulas.md §9.1): MHA 2 n_h d_h, GQA
    2 n_g d_h, MLA d_c + d_h^R; DeepSeek-V3 in bf16 caches (512 + 64) x 61 x 2 B = 68.6 KiB per token,
    Llama 2 70B 2 x 8 x 128 x 80 x 2 B = 320 KiB; the MatMul-free LM none."""
    def per_token_bytes(name: str) -> float:
        m = ModelArrays.of(load_model(name))
        return float(kv_cache_elements_per_token(m)) * float(m.layers) * 2

    assert per_token_bytes("deepseek-v3") == (512 + 64) * 61 * 2
    assert per_token_bytes("deepseek-v3") / 1024 == pytest.approx(68.6, abs=0.05)
    assert per_token_bytes("llama2-70b") == 320 * 1024
    assert per_token_bytes("gpt3-175b") == 2 * 96 * 128 * 96 * 2  # MHA
    assert per_token_bytes("matmulfree-2.7b") == 0


def test_flash_attention_io_count_follows_the_paper():
    """Dao et al. 2022: standard attention Theta(Nd + N^2) HBM accesses (Alg. 0, exactly 4Nd + 4N^2);
    FlashAttention (Alg. 1) 2Nd + T_c (3Nd + 4N) with T_c = ceil(N / ceil(M / 4d)), Theta(N^2 d^2 / M)
    (Theorem 2); GPT-2 medium's shape (N 1024, d 64, 96K elements of SRAM) needs several times fewer
    accesses (Fig. 2 reports 9x for the whole forward + backward)."""
    n, d, sram = 1024, 64, 48 * 1024  # 96 KB of SRAM in 16-bit elements
    assert standard_attention_hbm_accesses(n, d) == 4 * n * d + 4 * n * n
    t_c = math.ceil(n / math.ceil(sram / (4 * d)))
    assert flash_attention_hbm_accesses(n, d, sram, 1) == 2 * n * d + t_c * (3 * n * d + 4 * n)
    assert standard_attention_hbm_accesses(n, d) / flash_attention_hbm_accesses(n, d, sram, 1) > 3
    # Theta(N^2 d^2 / M): the ratio to N^2 d^2 / M settles to (4Nd/M)(3Nd + 4N) / (N^2 d^2 / M) = 12 + 16/d
    ratios = [flash_attention_hbm_accesses(n, d, sram, 1) / (n * n * d * d / sram) for n in (2**14, 2**16, 2**18)]
    assert ratios[-1] == pytest.approx(12 + 16 / d, rel=2e-3) and ratios[0] == pytest.approx(ratios[-1], rel=0.02)
    # FlashAttention-2 reads K and V once per query block: also Theta(N^2 d^2 / M) while d <= M / 4d
    assert flash_attention_hbm_accesses(n, d, sram, 2) < standard_attention_hbm_accesses(n, d)
    with pytest.raises(ValueError, match="d <= M"):
        flash_attention_hbm_accesses(n, d, 16, 1)


def test_rank_load_hand_cases():
    """Busiest expert at 2x the mean with 4 experts per rank: (2 + 3) / 4; capped by a capacity factor
    of 1.25 without padding: (1.25 + 3) / 4; padded: every expert computes 1.25x."""
    assert rank_load(8, 2, 2.0, 0.0, 0.0) == pytest.approx(5 / 4)
    assert rank_load(8, 2, 2.0, 1.25, 0.0) == pytest.approx(4.25 / 4)
    assert rank_load(8, 2, 2.0, 1.25, 1.0) == pytest.approx(1.25)
    assert rank_load(8, 8, 1.7, 0.0, 0.0) == pytest.approx(1.7)  # one expert per rank
    assert rank_load(64, 8, 1.0, 0.0, 0.0) == 1.0


def _mixtral(**routing):
    st = Strategy(tp=1, ep=8, attention="flash", routing=Routing(**routing))
    return estimate("mixtral-8x7b", "dgx-h100", st, W, gpus=8)


def test_imbalance_one_reproduces_the_balanced_result_exactly():
    balanced = _mixtral()
    for same in (_mixtral(imbalance=1.0), _mixtral(capacity_factor=2.0)):
        assert float(same.step_time_s) == float(balanced.step_time_s)
        assert float(same.memory_hbm.total) == float(balanced.memory_hbm.total)
    skewed, padded = _mixtral(imbalance=1.5), _mixtral(capacity_factor=1.25, pad_to_capacity=True)
    assert float(skewed.step_time_s) > float(balanced.step_time_s)
    assert float(padded.step_time_s) > float(balanced.step_time_s)
    # the busiest rank's all-to-all buffers grow 1.5x: bandwidth-bound, less the fixed per-peer costs
    ratio = float(skewed.breakdown.ep_exposed) / float(balanced.breakdown.ep_exposed)
    assert 1.3 < ratio <= 1.5


def test_all_to_all_volume_is_tokens_times_top_k_times_hidden():
    """Mixtral 8x7B, micro-batch 1 of 4096 tokens, ep 8 inside one node: each dispatch and combine buffer is
    T k h e = 4096 x 2 x 4096 x 2 B; forward and backward make 4 T k h e per layer and micro-batch
    (docs/formulas.md §7.2), of which (ep - 1)/ep leaves the device."""
    r = _mixtral()
    ep = [c for c in r.communication if c.dimension is ParallelDimension.EP]
    buffer = 4096 * 2 * 4096 * 2
    assert [c.operation for c in ep] == [Collective.ALL_TO_ALL] * 2
    assert all(float(c.message_bytes) == buffer for c in ep)
    microbatches, layers = 64 / 1, 32  # dp 1 (tp 1 x ep 8 folds into dp 8: 8 micro-batches per rank)
    microbatches = float(r.microbatches)
    assert sum(float(c.per_step) for c in ep) == 4 * layers * microbatches
    assert float(ep[0].scale_up_bytes_each) == pytest.approx(buffer * 7 / 8)


def test_moe_model_flops_count_the_active_experts():
    """Model FLOPs of Mixtral 8x7B: 3 x (per layer 2T(attention projections + router + top-2 experts) +
    4 B s^2 a d_h, plus 2 T h V) -- the 6 x active parameters rule with the attention core."""
    B, s, h, a, kv, dh, V, L = 8, 4096, 4096, 32, 8, 128, 32000, 32
    T = B * s
    attention = h * (a + 2 * kv) * dh + a * dh * h
    per_layer = 2 * T * (attention + h * 8 + 2 * 3 * h * 14336) + 4 * B * s * s * a * dh
    expected = 3 * (L * per_layer + 2 * T * h * V)
    got = model_flop_per_iteration(ModelArrays.of(load_model("mixtral-8x7b")),
                                   TrainingArrays(seq_len=s, global_batch=B))
    assert float(got.total) == pytest.approx(expected, rel=1e-12)


def test_moe_degrees_that_do_not_divide_are_reported():
    bad = estimate("mixtral-8x7b", "dgx-h100", Strategy(tp=1, ep=3), W, gpus=24)
    assert any("ep must divide the routed experts" in r for r in bad.infeasible_reasons)
    folded = estimate("mixtral-8x7b", "dgx-h100", Strategy(tp=2, ep=8), W, gpus=8)
    assert any("ep*expert_tp must divide" in r for r in folded.infeasible_reasons)
    dense = estimate("llama3-8b", "dgx-h100", Strategy(ep=2), W, gpus=8)
    assert not dense.feasible


def test_first_k_dense_layers_fill_the_first_stages():
    """DeepSeek-V3's 3 dense layers of 61 with pp 8 split (first 5, middle 8, last 8) all sit on stage 0;
    a dense model's layers are all dense."""
    assert stage_dense_layers(3, 8, 5, 8, 8) == (3, 0, 0)
    assert stage_dense_layers(10, 4, 4, 4, 4) == (4, 2, 0)  # 4 on stage 0, 4 on stage 1, 2 on the last middle
    assert stage_dense_layers(32, 4, 8, 8, 8) == (8, 8, 8)


def test_moe_sweep_matches_single_estimates():
    """The same functions over an array of ep degrees and imbalances equal point-by-point estimates."""
    w = Training(seq_len=2048, global_batch=64)
    system = load_system("dgx-h100", 16)
    base = StrategyArrays.of(Strategy(tp=2, expert_tp=1, sequence_parallel=True), 8)
    eps, imbalance = np.array([[1.0, 2.0, 4.0, 8.0]]), np.array([[1.0], [1.6]])
    sweep = StrategyArrays(**{**base.__dict__, "ep": eps, "imbalance": imbalance})
    arr = estimate_training(ModelArrays.of(load_model("mixtral-8x7b")), sweep, TrainingArrays.of(w), system)
    for i, imb in enumerate(imbalance[:, 0]):
        for j, ep in enumerate(eps[0]):
            one = estimate("mixtral-8x7b", system, Strategy(tp=2, expert_tp=1, sequence_parallel=True, ep=int(ep),
                                                            routing=Routing(imbalance=float(imb))), w)
            assert np.isclose(arr.step_time_s[i, j], one.step_time_s, rtol=1e-12)
            assert np.isclose(arr.memory_hbm.total[i, j], one.memory_hbm.total, rtol=1e-12)


def test_latent_attention_shrinks_the_cache_not_the_flops():
    """MLA's per-head attention works on d_h + d_h^R = 192 query/key dims and 128 value dims: the forward
    attention core is 2 B s^2 a (192 + 128) model FLOPs (s^2 counted in full, SC'21 convention)."""
    m = ModelArrays.of(load_model("deepseek-v2-lite"))
    B, s = 1, 4096
    f = model_flop_per_iteration(m, TrainingArrays(seq_len=s, global_batch=B))
    assert float(f.attention_core) == 27 * 2 * B * s * s * 16 * (192 + 128)


def test_matmul_free_ideal_and_released_kernels():
    """The released GPU code dequantizes and runs dense matmuls: the same FLOPs as the dense shape, plus
    quantization traffic; the ideal additions-only kernels read 2-bit weights and 8-bit inputs, so their
    projections move fewer bytes, but on a GPU the vector units add far slower than the tensor cores
    multiply (H100: 134 vs 989 TFLOP/s), so the ideal form pays off only on other hardware (Zhu et al. 2024
    §5; docs/formulas.md §10)."""
    released = load_model("matmulfree-2.7b")
    ideal = released.model_copy(update={"bitlinear": BitLinear(kernel=TernaryKernel.ADDITIONS)})
    plain = released.model_copy(update={"bitlinear": None})
    st = Strategy(micro_batch=4)
    w = Training(seq_len=2048, global_batch=32)
    r, i, p = (estimate(m, "dgx-h100", st, w, gpus=8) for m in (released, ideal, plain))
    assert float(r.model_flop) == float(i.model_flop) == float(p.model_flop)
    assert float(r.layer.forward.flop) == float(p.layer.forward.flop)
    assert float(r.layer.forward.bytes) > float(p.layer.forward.bytes)
    assert float(r.layer.forward.time_s) > float(p.layer.forward.time_s)
    assert float(i.layer.forward.time_s) > float(p.layer.forward.time_s)

    def projection_bytes(m):
        fw = layer_forward(ModelArrays.of(m), 4, 2048, 1.0, 0.0, 2.0)
        return sum(float(op.bytes) for op in fw.dense_gemms)

    assert projection_bytes(ideal) < 0.75 * projection_bytes(released)  # outputs stay 16-bit


def test_module_recompute_trades_stored_activations_for_time():
    """Selective recomputation of layernorm and moe_act (Megatron --recompute-modules) stops storing the two
    norm outputs (2 e T h) and the experts' activation output (e x received tokens x expert_ffn) per MoE
    layer, and re-runs those kernels in backward; core_attn alone with FlashAttention changes nothing."""
    from armillary.estimate.activations import layer_activations
    from armillary.workload.experts import experts_forward

    m = ModelArrays.of(load_model("mixtral-8x7b"))
    b, s, e, h, f = 1, 4096, 2.0, 4096, 14336
    experts = experts_forward(m, b * s, 8.0, 1.0, 1.0, e, e)
    acts = layer_activations(m, b, s, 1.0, 0.0, e, 2.0, 1.0, m.shared_ffn, experts)

    def stored(**kw):
        return float(acts.stored(StrategyArrays.of(Strategy(attention="flash", **kw), 1)))

    saved = stored(recompute="selective") - stored(recompute="selective",
                                                   recompute_modules=("core_attn", "layernorm", "moe_act"))
    assert saved == pytest.approx(2 * e * b * s * h + e * b * s * 2 * f)  # top-2: 2 T tokens at the experts
    assert stored(recompute="none") - stored(recompute="selective") == 4 * b * 32 * s  # flash: the fp32 LSE only
    plain = _mixtral()
    modules = estimate("mixtral-8x7b", "dgx-h100", Strategy(tp=1, ep=8, attention="flash", recompute="selective",
                                                            recompute_modules=("layernorm", "moe_act")), W, gpus=8)
    assert float(modules.breakdown.recompute) > 0 == float(plain.breakdown.recompute)
    assert float(modules.memory_hbm.activations) < float(plain.memory_hbm.activations)
    assert float(modules.hardware_flop) == float(plain.hardware_flop)  # norms and activations: no GEMM FLOPs
    with pytest.raises(ValueError, match="recompute_modules apply to recompute 'selective' only"):
        Strategy(recompute="full", recompute_modules=("moe_act",))


def test_qwen2_keeps_its_qkv_biases():
    """Qwen2.5-7B's config.json has no bias key, yet modeling_qwen2 puts biases on q, k and v: the card's
    7.61B parameters (6.53B without the embedding and the untied head) need them."""
    cfg = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064, "hidden_act": "silu",
           "tie_word_embeddings": False, "max_position_embeddings": 32768}
    model = from_huggingface(cfg)
    count = count_parameters(ModelArrays.of(model))
    head = 152064 * 3584
    assert model.qkv_bias and not model.linear_bias
    assert float(count.total) / 1e9 == pytest.approx(7.61, abs=0.006)
    assert (float(count.total) - 2 * head) / 1e9 == pytest.approx(6.53, abs=0.006)
    without = count_parameters(ModelArrays.of(model.model_copy(update={"qkv_bias": False})))
    assert float(count.total - without.total) == 28 * (3584 + 2 * 4 * 128)  # q, k, v biases per layer
    assert not from_huggingface({**cfg, "model_type": "qwen3"}).qkv_bias  # Qwen3 dropped them


def test_config_keys_the_reader_does_not_model_are_named():
    """A key the reader does not model is named instead of silently left out (here a made-up projection); ids,
    norms' epsilons and rope settings change no cost and are not listed. DeepSeek-V3's multi-token-prediction
    depth is read (`Model.mtp_layers`, trained only where `Training.mtp` says so)."""
    from armillary.report.records import run_record
    from armillary.specs.huggingface import UNREAD, unread_keys

    data = json.loads((HF / "deepseek-v3.json").read_text())
    assert unread_keys(data) == ()
    assert from_huggingface(data).mtp_layers == 1 == load_model("deepseek-v3").mtp_layers
    data["num_extra_projections"] = 2
    assert unread_keys(data) == ("num_extra_projections",)
    model = from_huggingface(data)
    assert model.sources[UNREAD] == "num_extra_projections"
    record = run_record(model, load_system("dgx-h100", 8), Strategy(), Training(seq_len=4096, global_batch=8))
    assert record["model_keys_not_modelled"] == ["num_extra_projections"]
    assert UNREAD not in from_huggingface(json.loads((HF / "mixtral-8x7b.json").read_text())).sources


def test_dbrx_reads_its_nested_configs_and_names_them_in_errors():
    """DBRX keeps KV heads in attn_config and its experts in ffn_config (transformers DbrxConfig): a bad
    value there is an error naming the nested key, an activation the experts cannot be is refused, and a
    nested key the reader does not know is listed as not modelled."""
    data = json.loads((HF / "dbrx-base.json").read_text())
    model = from_huggingface(data)
    assert (model.kv_heads, model.moe.experts, model.moe.top_k, model.moe.expert_ffn) == (8, 16, 4, 10752)
    ffn = data["ffn_config"]
    with pytest.raises(ValueError, match=r"ffn_config\.moe_top_k: Value error, top_k \(20\) exceeds experts"):
        from_huggingface({**data, "ffn_config": {**ffn, "moe_top_k": 20}})
    with pytest.raises(ValueError, match=r"ffn_config\.moe_num_experts: expected a whole number"):
        from_huggingface({**data, "ffn_config": {**ffn, "moe_num_experts": "16"}})
    with pytest.raises(ValueError, match=r"attn_config\.kv_n_heads: Value error, heads \(48\) must be a multiple"):
        from_huggingface({**data, "attn_config": {**data["attn_config"], "kv_n_heads": 7}})
    with pytest.raises(ValueError, match=r"ffn_config\.ffn_act_fn: 'gelu' is not modelled"):
        from_huggingface({**data, "ffn_config": {**ffn, "ffn_act_fn": {"name": "gelu"}}})
    with pytest.raises(ValueError, match="ffn_config: expected a mapping"):
        from_huggingface({**data, "ffn_config": [16]})
    from armillary.specs.huggingface import UNREAD
    assert UNREAD not in model.sources
    assert from_huggingface({**data, "ffn_config": {**ffn, "moe_capacity": 2}}).sources[UNREAD] == (
        "ffn_config.moe_capacity")
