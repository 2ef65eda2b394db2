"""MLA absorbed decode (DeepSeek-V2 §2.1.3; vLLM / SGLang): decode attends over the cached latent with W_UK folded
into the query and W_UV into the output, instead of per-head keys and values. Expected values are worked out by
hand from DeepSeek-V3's shapes (128 heads, d_nope 128 + d_rope 64 = 192, d_v 128, d_c 512)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as hs

from armillary.estimate.inference import replica_model
from armillary.estimate.inference_phases import prefill_pass
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import load_engine
from armillary.serving.launch import with_engine
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference, MlaDecode

MODEL = ModelArrays.of(load_model("deepseek-v3"))
SYSTEM = load_system("hgx-h200", 8)
STRATEGY = Strategy.model_validate({"tp": 8, "precision": "fp8", "attention": "flash3", "ep": 1, "expert_tp": 8})
HEADS, D_QK, D_V, D_C, D_R, T, LAYERS = 128, 192, 128, 512, 64, 8, 61


def _replica(mode: MlaDecode, input_len: int = 1000):  # type: ignore[no-untyped-def]
    w = Inference.model_validate({"kind": "inference", "input_len": input_len, "output_len": 100, "weights": "fp8",
                                  "mla_decode": mode.value})
    return w, replica_model(MODEL, STRATEGY, w, SYSTEM)


@pytest.mark.parametrize("past", [1, 4096, 100_000])
def test_decode_step_flops_and_bytes_per_token_by_hand(past: int) -> None:
    # one sequence, one new token over `past` cached ones, one layer on one of 8 TP ranks (16 heads);
    # activations 2 bytes (bf16), cache 2 bytes; the mean keys attended are past + 1/2 (keys_attended)
    e = c = 2.0
    keys = past + 0.5
    _, expanded = _replica(MlaDecode.EXPANDED)
    _, absorbed = _replica(MlaDecode.ABSORBED)
    x, a = expanded.attention(1.0, float(past)), absorbed.attention(1.0, float(past))
    heads = HEADS / T
    # expanded: every head scores over d_qk = 192 and sums values of 128; per-head K/V cached, split over TP
    per_head_kv = HEADS * (D_QK + D_V) / T  # 5120 elements per token on a rank
    assert float(x.flop) == pytest.approx(2 * heads * keys * (D_QK + D_V))
    assert float(x.bytes) == pytest.approx(per_head_kv * e  # Q and O of the new token
                                           + per_head_kv * e  # its K and V
                                           + past * per_head_kv * c + per_head_kv * c)  # cache read + write
    # absorbed: every head scores over the latent and the RoPE key (576) and sums latent values (512);
    # the cache holds 576 per token, shared by the heads (not split over TP)
    latent = D_C + D_R
    assert float(a.flop) == pytest.approx(2 * heads * keys * (latent + D_C))
    assert float(a.bytes) == pytest.approx(heads * (latent + D_C) * e + latent * e + past * latent * c + latent * c)


def test_absorbed_decode_reads_fewer_kv_bytes_and_does_more_attention_flops() -> None:
    _, expanded = _replica(MlaDecode.EXPANDED)
    _, absorbed = _replica(MlaDecode.ABSORBED)
    x, a = expanded.attention(1.0, 8192.0), absorbed.attention(1.0, 8192.0)
    assert float(a.bytes) < float(x.bytes) / 8  # 576 vs 5120 elements per cached token and rank
    assert float(a.flop) == pytest.approx(float(x.flop) * (D_C + D_R + D_C) / (D_QK + D_V))  # 1088 / 320
    # the cache one token takes on a device (61 layers)
    assert absorbed.cache_bytes_per_token == pytest.approx(LAYERS * (D_C + D_R) * 2)
    assert expanded.cache_bytes_per_token == pytest.approx(LAYERS * HEADS * (D_QK + D_V) / T * 2)


@given(input_len=hs.integers(1, 20_000), batch=hs.integers(1, 64))
def test_prefill_does_not_depend_on_the_decode_form(input_len: int, batch: int) -> None:
    # prefill keeps the per-head form either way: the same FLOPs and layer time; the bytes differ only by
    # the cache the prompt writes (the latent, or per-head K and V)
    w, absorbed = _replica(MlaDecode.ABSORBED, input_len)
    _, expanded = _replica(MlaDecode.EXPANDED, input_len)
    a, x = (r.attention(float(input_len), 0.0, float(batch), decode=False) for r in (absorbed, expanded))
    assert float(a.flop) == pytest.approx(float(x.flop))
    written = batch * input_len * (HEADS * (D_QK + D_V) / T - (D_C + D_R)) * absorbed.cache_bytes
    assert float(x.bytes) - float(a.bytes) == pytest.approx(written)
    pa = prefill_pass(absorbed, w, batch)
    px = prefill_pass(expanded, w, batch)
    assert (pa.layers, pa.tp, pa.ep, pa.ends) == (px.layers, px.tp, px.ep, px.ends)


def test_engines_say_whether_they_absorb() -> None:
    w = Inference.model_validate({"kind": "inference", "input_len": 10, "output_len": 10})
    for name, mode in (("sglang-0.4", MlaDecode.ABSORBED), ("vllm-0.8", MlaDecode.ABSORBED),
                       ("vllm-0.6", MlaDecode.MATERIALIZED), ("tensorrt-llm-0.6", MlaDecode.EXPANDED)):
        assert with_engine(w, load_engine(name))[0].mla_decode is mode
    # a workload that sets it keeps its own
    mine = Inference.model_validate({"kind": "inference", "input_len": 10, "output_len": 10, "mla_decode": "expanded"})
    assert with_engine(mine, load_engine("sglang-0.4"))[0].mla_decode is MlaDecode.EXPANDED


def test_speculative_verification_runs_the_decode_form() -> None:
    _, absorbed = _replica(MlaDecode.ABSORBED)
    verify = absorbed.attention(4.0, 1000.0, decode=True)
    prefill_like = absorbed.attention(4.0, 1000.0)
    assert float(verify.flop) / float(prefill_like.flop) == pytest.approx((D_C + D_R + D_C) / (D_QK + D_V))


def test_an_engine_that_absorbs_its_prefill_pays_the_latent_flops_by_hand() -> None:
    """SGLang 0.4's Triton backend runs a prompt chunk absorbed too (any cached prefix, and the BOS token
    always is): per query-key pair and head 2 (576 + 512) FLOPs instead of 2 (192 + 128), the prompt's
    queries and outputs 16 heads x (576 + 512) wide on a rank; the cache written is the latent either way."""
    w = Inference.model_validate({"kind": "inference", "input_len": 3200, "output_len": 100, "weights": "fp8",
                                  "absorbed_mla_prefill": True})
    absorbed = replica_model(MODEL, STRATEGY, w, SYSTEM)
    _, plain = _replica(MlaDecode.ABSORBED, 3200)
    q, past = 3200.0, 0.0
    a, x = absorbed.attention(q, past, decode=False), plain.attention(q, past, decode=False)
    heads, keys = HEADS / T, past + (q + 1) / 2  # causal: the mean query attends (q + 1) / 2 keys
    assert float(x.flop) == pytest.approx(2 * heads * q * keys * (D_QK + D_V), rel=1e-3)
    assert float(a.flop) == pytest.approx(2 * heads * q * keys * (D_C + D_R + D_C), rel=1e-3)
    assert float(a.flop) / float(x.flop) == pytest.approx((D_C + D_R + D_C) / (D_QK + D_V))  # 1088 / 320
    # decode is absorbed either way
    assert float(absorbed.attention(1.0, 4096.0).flop) == float(plain.attention(1.0, 4096.0).flop)
    # and the prompt pass is slower, never faster
    assert float(prefill_pass(absorbed, w, 4).total) > float(prefill_pass(plain, w, 4).total)


def test_only_sglang_absorbs_its_prefill() -> None:  # over a cached prefix (BOS): 0.4.0-0.4.3 and 0.5.x
    w = Inference.model_validate({"kind": "inference", "input_len": 10, "output_len": 10})
    for name, absorbs in (("sglang-0.4", True), ("sglang-0.5", True), ("vllm-0.8", False), ("vllm-0.6", False),
                          ("tensorrt-llm-1.0", False)):
        assert with_engine(w, load_engine(name))[0].absorbed_mla_prefill is absorbs, name


def test_materialized_products_take_memory_by_hand() -> None:
    """vLLM 0.7.x keeps W_Q W_UK (q_lora 1536 x d_c) and W_UV W_O (d_c x hidden 7168) per head in fp8 beside the
    raw weights, plus W_QR (1536 x d_rope) and the dequantized W_UK, W_UV (d_c x (128 + 128)) in bf16: per TP
    rank's 16 heads and 61 layers 61 x 16 x (1536 x 512 + 512 x 7168 + 2 (1536 x 64 + 512 x 256)) bytes. The
    decode step's time is that of the absorbed form (the products' GEMM shapes are not costed)."""
    from armillary.estimate.inference_memory import inference_memory, materialized_mla_bytes
    from armillary.estimate.inference_phases import decode_phase

    w, absorbed = _replica(MlaDecode.ABSORBED)
    _, materialized = _replica(MlaDecode.MATERIALIZED)
    by_hand = LAYERS * HEADS / T * (1536 * D_C + D_C * 7168 + 2 * (1536 * D_R + D_C * (D_QK - D_R + D_V)))
    assert by_hand == 4_797_235_200
    assert float(materialized_mla_bytes(materialized)) == by_hand
    assert float(materialized_mla_bytes(absorbed)) == 0.0
    grown = inference_memory(materialized, w, 1.0, 1.0).weights - inference_memory(absorbed, w, 1.0, 1.0).weights
    assert float(grown) == pytest.approx(by_hand)
    assert float(decode_phase(materialized, w, 4.0).total) == float(decode_phase(absorbed, w, 4.0).total)
    _, expanded = _replica(MlaDecode.EXPANDED)
    assert float(materialized_mla_bytes(expanded)) == 0.0
