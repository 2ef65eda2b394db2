"""Inference: KV cache per attention kind, the memory-bound decode, batching up to memory, validation."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.api import estimate, parameters
from armillary.errors import SpecError
from armillary.estimate.inference import replica_model
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_strategy, load_system
from armillary.specs.workload import Inference
from armillary.validation.run import read_rows, run_row, summarize
from armillary.workload.attention import keys_attended, kv_cache_elements_per_rank

FLASH = {"precision": "bf16", "attention": "flash"}


def _replica(model, kv="bf16", tp=1, **model_changes):
    spec = load_model(model)
    spec = spec.model_copy(update=model_changes) if model_changes else spec
    w = Inference(input_len=100, output_len=28, kv_cache={"precision": kv})
    return replica_model(ModelArrays.of(spec), load_strategy({**FLASH, "tp": tp}), w, load_system("dgx-h100", 8))


@pytest.mark.parametrize(("model", "changes", "elements"), [
    ("llama2-7b", {}, 2 * 32 * 128),  # MHA: K and V of every head
    ("llama2-70b", {}, 2 * 8 * 128),  # GQA: 8 KV heads
    ("llama2-7b", {"kv_heads": 1}, 2 * 128),  # MQA: one KV head
    ("deepseek-v3", {}, 512 + 64),  # MLA: latent d_c plus the shared RoPE key d_h^R
])
def test_kv_cache_bytes_per_token_by_attention_kind(model, changes, elements):
    layers = load_model(model).layers
    for kv, size in (("bf16", 2), ("fp8", 1), ("int4", 0.5)):
        r = _replica(model, kv, **changes)
        assert r.cache_bytes_per_token == layers * elements * size


def test_kv_cache_splits_over_tensor_parallel_ranks_but_keeps_a_head_each():
    m70, mla = ModelArrays.of(load_model("llama2-70b")), ModelArrays.of(load_model("deepseek-v3"))
    assert kv_cache_elements_per_rank(m70, 4) == 2 * 2 * 128  # 8 KV heads over 4 ranks
    assert kv_cache_elements_per_rank(m70, 16) == 2 * 128  # more ranks than KV heads: one head each
    assert kv_cache_elements_per_rank(mla, 8) == 576  # the latent is not split


def test_paged_cache_holds_whole_pages():
    w = {"kind": "inference", "batch": 3, "input_len": 100, "output_len": 29, "kv_cache": {"block_tokens": 64}}
    r = estimate("llama2-7b", "dgx-h100", FLASH, w, gpus=1)
    per_token = 32 * 2 * 4096 * 2
    assert r.memory.kv_per_sequence == math.ceil(129 / 64) * 64 * per_token  # 3 pages, 63 slots unused
    assert r.memory.kv_cache == 3 * r.memory.kv_per_sequence


def test_keys_attended_with_a_cache():
    assert keys_attended(1000, 0, 1.0, 0) == 500  # a whole causal sequence
    assert keys_attended(1000, 0, 1.0, 999) == pytest.approx(999.5)  # one decoded token sees ~all keys
    assert keys_attended(1000, 100, 1.0, 0) == pytest.approx(100 * (1 - 100 / 2000))  # window, no cache
    assert keys_attended(1000, 100, 1.0, 999) == 100  # decoding inside a sliding window


def test_decode_at_batch_one_is_memory_bound_at_weights_over_bandwidth():
    r = estimate("llama2-7b", "dgx-h100", FLASH, {"kind": "inference", "input_len": 16, "output_len": 65}, gpus=1)
    device = load_system("dgx-h100", 1).device
    layer_weights = (parameters("llama2-7b") - 2 * 32000 * 4096) * 2  # all but embedding and LM head, bf16
    floor = layer_weights / device.hbm.rate
    launches = 8 * 32 * device.kernel_overhead  # GEMMs and element-wise kernels of 32 layers: 11%
    assert floor < r.decode.layers / 64 <= 1.01 * (floor + launches)  # the layers stream their weights
    assert floor < r.tpot_s < 1.25 * floor  # plus head, attention and launch overheads


def test_quantized_weights_shrink_memory_and_the_decode_step():
    times = {}
    for weights, size in (("bf16", 2.0), ("int8", 1.0), ("int4", 0.5)):
        w = {"kind": "inference", "input_len": 16, "output_len": 33, "weights": weights}
        r = estimate("llama2-7b", "dgx-h100", FLASH, w, gpus=1)
        ends = 2 * 32000 * 4096 + 4096  # embedding, LM head and final norm stay at 16 bits
        assert r.memory.weights == (parameters("llama2-7b") - ends) * size + 2 * ends
        times[weights] = r.tpot_s
    assert times["int4"] < times["int8"] < times["bf16"]


def test_throughput_grows_with_batch_until_memory_runs_out():
    w = {"kind": "inference", "input_len": 1024, "output_len": 512}
    largest = estimate("llama2-7b", "dgx-a100", FLASH, {**w, "batch": 1}, gpus=1).max_batch
    assert largest > 8
    previous = 0.0
    for batch in sorted({1, 2, 4, 8, 16, 32, largest // 2, largest}):
        r = estimate("llama2-7b", "dgx-a100", FLASH, {**w, "batch": batch}, gpus=1)
        assert r.feasible, r.infeasible_reasons
        assert r.output_tokens_per_s >= previous
        previous = r.output_tokens_per_s
    over = estimate("llama2-7b", "dgx-a100", FLASH, {**w, "batch": largest + 1}, gpus=1)
    assert not over.feasible and "KV cache" in over.infeasible_reasons[0]
    at_16 = estimate("llama2-7b", "dgx-a100", FLASH, {**w, "batch": 16}, gpus=1)
    assert at_16.max_context >= 1536 and at_16.max_context % 64 == 0
    longest = estimate("llama2-7b", "dgx-a100", FLASH, {**w, "batch": 16, "input_len": at_16.max_context - 512},
                       gpus=1)
    assert longest.memory.kv_cache <= 0.9 * (longest.hbm_capacity_bytes - longest.memory.weights
                                             - at_16.memory.activations)


@settings(max_examples=25, deadline=None)
@given(hs.integers(1, 256), hs.integers(16, 4096), hs.integers(2, 512))
def test_longer_context_never_speeds_up_decode(batch, input_len, output_len):
    w = {"kind": "inference", "batch": batch, "input_len": input_len, "output_len": output_len}
    short = estimate("llama2-70b", "dgx-h100", {**FLASH, "tp": 4}, w, gpus=4)
    longer = estimate("llama2-70b", "dgx-h100", {**FLASH, "tp": 4}, {**w, "input_len": input_len * 2}, gpus=4)
    assert longer.tpot_s >= short.tpot_s and longer.ttft_s >= short.ttft_s


def test_tensor_parallel_decode_pays_latency_bound_all_reduces():
    w = {"kind": "inference", "input_len": 128, "output_len": 33}
    tp4 = estimate("llama2-70b", "dgx-h100", {**FLASH, "tp": 4}, w, gpus=4)
    per_step = tp4.decode.tp / 32 / (2 * 80)  # two all-reduces per layer and step
    assert 1e-6 < per_step < 50e-6  # 16 KiB messages: microseconds of latency, not bandwidth


def test_per_query_head_reads_multiply_the_grouped_cache_traffic():
    w = {"kind": "inference", "batch": 32, "input_len": 4000, "output_len": 2}
    grouped = estimate("llama2-70b", "dgx-h100", {**FLASH, "tp": 8}, w, gpus=8)
    per_head = estimate("llama2-70b", "dgx-h100", {**FLASH, "tp": 8}, {**w, "decode_attention": "per_query_head"},
                        gpus=8)
    assert per_head.decode.attention > 5 * grouped.decode.attention  # 8 query heads per KV head
    assert per_head.prefill.total == grouped.prefill.total


def test_second_tier_cache_is_read_over_its_link():
    w = {"kind": "inference", "batch": 16, "input_len": 2048, "output_len": 65}
    hbm = estimate("llama2-7b", "dgx-h100", FLASH, w, gpus=1)
    split = estimate("llama2-7b", "dgx-h100", FLASH, {**w, "kv_cache": {"tier2_fraction": 0.5}}, gpus=1)
    assert split.memory.kv_cache == pytest.approx(hbm.memory.kv_cache / 2)
    assert split.memory.kv_cache_tier2 == pytest.approx(hbm.memory.kv_cache / 2)
    assert split.max_batch > 1.5 * hbm.max_batch
    link = load_system("dgx-h100", 1).device.second_tier
    assert link is not None
    cached = 16 * sum(2048 + k for k in range(64))  # tokens read per decode step, summed over the steps
    per_token = 32 * 2 * 4096 * 2
    # streamed at the tier's achievable rate (bandwidth x efficiency), as training's offload reads it
    assert split.decode.tier2 == pytest.approx(0.5 * cached * per_token / (link.bandwidth * link.efficiency))
    assert split.tpot_s > hbm.tpot_s


def test_inference_rejects_what_it_does_not_model():
    w = {"kind": "inference", "input_len": 16, "output_len": 2}
    with pytest.raises(SpecError, match="context parallelism with data-parallel attention"):
        estimate("deepseek-v2-lite", "dgx-h100", {**FLASH, "tp": 2, "cp": 2, "ep": 2, "attention_dp": 2},
                 {**w, "batch": 2}, gpus=4)
    with pytest.raises(SpecError, match=r"workload\.kind"):
        estimate("llama2-7b", "dgx-h100", FLASH, {"kind": "serving"}, gpus=1)


def test_validation_covers_the_inference_rows():
    # the TensorRT-LLM static-batch rows (the serving rows, SRV-*, simulate request streams for minutes:
    # they run in `armillary validate`, not here)
    results = [run_row(r) for r in read_rows() if r["id"].startswith("INF-TRT061")]
    assert len(results) == 45 and all(r.predicted is not None for r in results)
    errors = np.array([abs(r.error) for r in results])
    assert errors.mean() < 0.15  # the target
    groups = {g.group: g for g in summarize(results)}
    assert {"INF-TRT061 throughput H100", "INF-TRT061 first token A100"} <= set(groups)


def test_a_session_benchmark_engine_without_paged_cache_holds_its_batch_contiguously():
    """TensorRT-LLM v0.6.1 built its Llama 2 engines without --paged_kv_cache, so gptSessionBenchmark holds the
    batch's cache contiguously in the memory the weights leave: Llama 2 7B, batch 60 x 2,176 tokens on one A100
    (63.8 GiB of cache in 67 GiB) runs as published, where a paged cache at 90% of that memory would hold 56."""
    row = next(r for r in read_rows() if r["id"] == "INF-TRT061-22")
    result = run_row(row)
    assert result.feasible and result.error is not None and abs(result.error) < 0.15
    assert any("contiguous KV cache" in a for a in result.assumptions)
    paged = Inference(kind="inference", batch=60, input_len=128, output_len=2048)
    assert not bool(estimate("llama2-7b", "dgx-a100", {"tp": 1, "precision": "fp16", "attention": "flash"}, paged,
                             gpus=1).feasible)
