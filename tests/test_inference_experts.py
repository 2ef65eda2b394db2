"""MoE inference as vLLM / SGLang run it with tensor parallelism (estimate.inference.replicated_experts) and the
KV budget of engines whose memory share is of the whole device (vLLM gpu_memory_utilization, SGLang
mem_fraction_static). Expected values are worked out by hand from the model's shapes."""

from __future__ import annotations

import pytest

from armillary.comm.collectives import all_reduce
from armillary.estimate.inference import replica_model, replicated_experts
from armillary.estimate.inference_memory import kv_budget
from armillary.estimate.inference_result import InferenceMemory
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference

WORKLOAD = Inference.model_validate({"kind": "inference", "input_len": 1000, "output_len": 100, "weights": "fp8"})


def _replica(**moe: int):  # type: ignore[no-untyped-def]
    model = load_model("deepseek-v3")
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", **moe})
    return model, replica_model(ModelArrays.of(model), strategy, WORKLOAD, load_system("hgx-h200", 8))


@pytest.mark.parametrize(("ep", "etp"), [(1, 8), (8, 1), (2, 4), (1, 1)])
def test_tp_sharded_experts_compute_their_share_of_every_routed_token(ep: int, etp: int) -> None:
    # tokens are replicated over the 8 TP ranks after attention: the 8 ranks regroup as etp x ep x
    # 8 / (ep etp) expert-dp groups; a rank computes (T k / (ep x expert-dp)) routed copies on an
    # expert_ffn / etp shard, so its share of the experts' FLOPs is 1/8 of the whole layer's whatever the split
    model, r = _replica(ep=ep, expert_tp=etp)
    moe = model.moe
    assert moe is not None
    tokens, hidden = 512.0, model.hidden
    x = replicated_experts(r.m, r.st, tokens, 1.0, 1.0)
    whole_up = 2 * tokens * moe.top_k * 2 * moe.expert_ffn * hidden  # gate + up projections, all routed copies
    whole_down = 2 * tokens * moe.top_k * moe.expert_ffn * hidden
    assert float(x.experts_in.flop) == pytest.approx(whole_up / 8)
    assert float(x.experts_out.flop) == pytest.approx(whole_down / 8)
    assert float(x.received_tokens) == pytest.approx(tokens * moe.top_k * etp / 8)
    # every rank routes every token: the router GEMM is tokens x experts x hidden
    assert float(x.router.flop) == pytest.approx(2 * tokens * moe.experts * hidden)
    assert float(x.dispatch_bytes) == float(x.combine_bytes) == float(x.gathered_bytes) == 0.0


def test_moe_layers_exchange_nothing_beyond_the_layer_all_reduces() -> None:
    # vLLM FusedMoE / SGLang fused_moe under --tp 8: the experts' partial sums join the MLP's all-reduce,
    # so every layer, MoE or dense, has two all-reduces of T x h, plus the embedding's one; no EP time
    model, r = _replica(ep=1, expert_tp=8)
    tokens = 128.0
    t = r.tokens_time(tokens)
    one = all_reduce(tokens * model.hidden * r.activation_bytes, r.tp_group, r.system).time
    assert float(t.ep) == 0.0
    assert float(t.tp) == pytest.approx((2 * model.layers + 1) * float(one))


def test_memory_share_of_the_whole_device_leaves_the_kv_cache_the_rest_of_the_cap() -> None:
    _, r = _replica(ep=1, expert_tp=8)
    capacity = float(r.system.device.hbm.capacity)
    gib = 2.0**30
    memory = InferenceMemory(weights=78 * gib, kv_cache=0.0, activations=3 * gib, kv_cache_tier2=0.0,
                             kv_per_sequence=0.0)
    w = WORKLOAD.model_copy(update={"kv_cache": WORKLOAD.kv_cache.model_copy(update={"memory_fraction": 0.9})})
    free, of_free = kv_budget(r, w, memory)
    _, of_total = kv_budget(r, w, memory, of_total=True)
    assert free == pytest.approx(capacity - 81 * gib)
    assert of_free == pytest.approx(0.9 * (capacity - 81 * gib))  # TensorRT-LLM: a share of what is free
    assert of_total == pytest.approx(0.9 * capacity - 81 * gib)  # vLLM: the cap less weights and activations
    assert of_total < of_free


def test_eplb_replicas_split_the_hottest_expert_in_serving_by_hand() -> None:
    # DeepSeek-V3 (256 experts) under --tp 8 grouped as ep 8: 32 experts a rank, one replica each (R = 8
    # copies, a copy's mean load 256 / 264). An expert at 10x the mean would need ceil(10 x 264 / 256) = 11
    # copies; there are R + 1 = 9, at 10 / 9 each; its rank's other 32 slots run at the copy mean:
    # (10/9 + 32 x 256/264) / 32 of the balanced load (without replicas (10 + 31) / 32), and 33 grouped-GEMM
    # problems. At 3x the mean, 4 copies bring it below the copy mean and the rank carries 33 x 256/264 / 32
    # = exactly the balanced load
    tokens = 4096.0
    share = tokens * 8 / 8  # T k / tp routed copies a rank, at balance
    for imbalance, plain_load, eplb_load in ((10.0, 41 / 32, (10 / 9 + 32 * 256 / 264) / 32), (3.0, 34 / 32, 1.0)):
        _, plain = _replica(ep=8, expert_tp=1, routing={"imbalance": imbalance})  # type: ignore[arg-type]
        _, eplb = _replica(ep=8, expert_tp=1,  # type: ignore[arg-type]
                           routing={"imbalance": imbalance, "redundant_experts": 1})
        x0 = replicated_experts(plain.m, plain.st, tokens, 1.0, 1.0)
        x1 = replicated_experts(eplb.m, eplb.st, tokens, 1.0, 1.0)
        assert float(x0.received_tokens) == pytest.approx(share * plain_load)
        assert float(x1.received_tokens) == pytest.approx(share * eplb_load)
        assert float(x0.experts_in.group) == pytest.approx(32)
        assert float(x1.experts_in.group) == pytest.approx(33)


def test_eplb_replicas_hold_whole_expert_weights_in_serving_memory() -> None:
    # each replica is one more expert's weights on every rank: the routed weights of a rank grow by
    # (256 / 8 + 2) / (256 / 8) = 34 / 32; nothing else changes
    from armillary.estimate.inference_memory import inference_memory
    from armillary.workload.parameters import count_parameters

    model, plain = _replica(ep=8, expert_tp=1)
    _, eplb = _replica(ep=8, expert_tp=1, routing={"redundant_experts": 2})  # type: ignore[arg-type]
    p = count_parameters(plain.m)
    routed_per_rank = float(p.moe_layers * p.experts * p.expert) / 8
    grown = float(inference_memory(eplb, WORKLOAD, 1.0, 1.0).weights) - float(
        inference_memory(plain, WORKLOAD, 1.0, 1.0).weights)
    assert grown == pytest.approx(routed_per_rank * 2 / 32 * float(plain.weight_bytes))
    assert model.moe is not None and model.moe.experts == 256


def test_eplb_replicas_reach_data_parallel_attention_by_hand() -> None:
    # SGLang-style DP attention (attention_dp 8) with wide EP 8: the rank's experts receive their share of all
    # 8 groups' routed copies, split by the replicas as above (imbalance 10: 10/9 + 32 x 256/264 over 32),
    # with 33 grouped-GEMM problems; the rank's routed weights grow by 33 / 32
    from armillary.estimate.dp_attention import dp_attention_weights, routed_experts
    from armillary.workload.parameters import count_parameters

    _, plain = _replica(ep=8, expert_tp=1, attention_dp=8, routing={"imbalance": 10.0})  # type: ignore[arg-type]
    _, eplb = _replica(ep=8, expert_tp=1, attention_dp=8,  # type: ignore[arg-type]
                       routing={"imbalance": 10.0, "redundant_experts": 1})
    tokens = 256.0
    x0, x1 = routed_experts(plain, tokens), routed_experts(eplb, tokens)
    balanced = 8 * tokens * 8 / 8  # all groups' T k copies over the 8 ranks
    assert float(x0.received_tokens) == pytest.approx(balanced * 41 / 32)
    assert float(x1.received_tokens) == pytest.approx(balanced * (10 / 9 + 32 * 256 / 264) / 32)
    assert float(x1.experts_in.group) == pytest.approx(33)
    p = count_parameters(plain.m)
    grown = float(dp_attention_weights(p, eplb)) - float(dp_attention_weights(p, plain))
    assert grown == pytest.approx(float(p.moe_layers * p.experts * p.expert) / 8 / 32)
