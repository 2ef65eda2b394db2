"""The MoE token exchange: group-limited routing's fan-out checked by enumeration, the deduplicated
(DeepEP-style) dispatch against DeepEP's published bandwidths, invariants, and the estimator's use of it."""

from __future__ import annotations

import itertools
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary import Strategy, Training, estimate
from armillary.errors import SpecError
from armillary.estimate.token_exchange import Fanout, deduplicated, token_exchange
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.placement import place_expert_groups
from armillary.report.deploy import megatron
from armillary.specs.huggingface import from_huggingface
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import MixtureOfExperts
from armillary.validation.strategy_words import deduplicated_dispatch
from armillary.workload.experts import holders_hit

DSV3 = ModelArrays.of(load_model("deepseek-v3"))


def _routing(experts: int, top_k: int, groups: int = 1, group_top_k: int = 1) -> ModelArrays:
    return replace(DSV3, experts=float(experts), top_k=float(top_k), expert_groups=float(groups),
                   group_top_k=float(group_top_k))


def _enumerated(experts: int, top_k: int, groups: int, group_top_k: int, parts: int) -> Fraction:
    """Exact expected parts hit: every choice of groups, then every top_k subset of their experts, alike."""
    size, per_part = experts // groups, experts // parts
    total, count = Fraction(0), 0
    for chosen in itertools.combinations(range(groups), group_top_k):
        pool = [e for g in chosen for e in range(g * size, (g + 1) * size)]
        for picked in itertools.combinations(pool, top_k):
            total += len({e // per_part for e in picked})
            count += 1
    return total / count


@pytest.mark.parametrize("experts,top_k,groups,group_top_k", [(16, 3, 1, 1), (16, 3, 4, 2), (12, 4, 6, 2),
                                                             (16, 2, 8, 3)])
@pytest.mark.parametrize("parts", [1, 2, 4, 8, 16])
def test_fanout_equals_enumeration(experts, top_k, groups, group_top_k, parts):
    if experts % parts:
        return
    exact = _enumerated(experts, top_k, groups, group_top_k, parts)
    assert holders_hit(_routing(experts, top_k, groups, group_top_k), float(parts)) == pytest.approx(float(exact),
                                                                                                   rel=1e-12)


def test_deepseek_v3_reaches_at_most_four_nodes():
    """n_group 8, topk_group 4: on EP64 over 8 nodes (one group a node) a token reaches at most 4 nodes, and
    3.63 in expectation (a chosen group gets none of the 8 experts with probability C(96,8)/C(128,8))."""
    miss = np.prod([(96 - i) / (128 - i) for i in range(8)])
    assert holders_hit(DSV3, 8.0) == pytest.approx(4 * (1 - miss), rel=1e-12)
    assert holders_hit(DSV3, 8.0) < holders_hit(_routing(256, 8), 8.0)  # without the limit: 5.34


# DeepEP README (legacy table, normal kernels; H800, one CX7 400 Gb/s NIC per GPU; 4096 tokens a rank, hidden
# 7168, top-8 of top-4 groups, FP8 dispatch, BF16 combine): "bottleneck" RDMA bandwidth. Its tests count
# every (token, node) pair, the own node's included, as RDMA bytes (tests/test_internode.py
# num_rdma_token_sent x hidden x 2, x (1 + 4/128)/2 for FP8 with its scales) over the kernel's time; its
# groups are the nodes and num_topk_groups = min(nodes, 4).
DEEPEP_RDMA_GBPS = {16: (43, 43), 32: (58, 57), 64: (51, 50)}
DEEPEP_TOLERANCE = {16: 0.25, 32: 0.10, 64: 0.10}


@pytest.mark.parametrize("ep", [16, 32, 64])
def test_deduplicated_exchange_matches_deepep(ep):
    nodes, tokens, hidden, top_k = ep // 8, 4096, 7168, 8
    m = replace(DSV3, expert_groups=float(nodes), group_top_k=float(min(nodes, 4)))
    system = load_system("dgx-h800", ep)
    _, group, _ = place_expert_groups(1.0, float(ep), 1.0, system.sizes)
    fanout = Fanout.of(m, group)
    for element_bytes, scale, gbps in ((1, 1 + 4 / 128, DEEPEP_RDMA_GBPS[ep][0]),
                                       (2, 1.0, DEEPEP_RDMA_GBPS[ep][1])):
        measured_s = tokens * fanout.nodes * hidden * element_bytes * scale / (gbps * 1e9)
        predicted = deduplicated(tokens * top_k * hidden * element_bytes, fanout, group, system)
        assert predicted.time == pytest.approx(measured_s, rel=DEEPEP_TOLERANCE[ep])
        # one copy per node crosses the network: the own node's share stays home
        assert predicted.scale_out_bytes == pytest.approx(
            tokens * fanout.nodes * hidden * element_bytes * (nodes - 1) / nodes, rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(ep=hs.sampled_from([8, 16, 32, 64, 128, 256]), group_top_k=hs.integers(1, 8),
       tokens=hs.sampled_from([128, 4096, 16384]))
def test_deduplication_never_sends_more(ep, group_top_k, tokens):
    """Deduplicating never puts more bytes on the scale-out network, nor takes longer on a DGX H100 cluster,
    than one copy per expert (the scale-up network may carry more: it forwards the copies that arrive from
    other nodes); letting a token use more groups never reaches fewer nodes."""
    m = replace(DSV3, group_top_k=float(group_top_k))
    system = load_system("dgx-h100", ep)
    _, group, _ = place_expert_groups(1.0, float(ep), 1.0, system.sizes)
    fanout, copies = Fanout.of(m, group), tokens * 8 * 7168 * 2.0
    plain, dedup = (token_exchange(copies, fanout, group, system, d) for d in (0.0, 1.0))
    assert dedup.scale_out_bytes <= plain.scale_out_bytes * (1 + 1e-12)
    assert dedup.time <= plain.time * (1 + 1e-12)
    assert 1.0 <= fanout.nodes <= min(group.nodes, 8.0) + 1e-12
    if group_top_k < 8:
        assert holders_hit(m, group.nodes) <= holders_hit(replace(m, group_top_k=group_top_k + 1.0),
                                                          group.nodes) + 1e-12


def test_training_step_with_deduplicated_dispatch():
    """DeepSeek-V3 on 256 H800s with EP64 over 8 nodes: the deduplicated exchange sends less across nodes
    and exposes less; a sweep over the flag equals the two single estimates."""
    system, w = load_system("dgx-h800", 256), Training(seq_len=4096, global_batch=1024)
    base = Strategy(pp=4, ep=64, micro_batch=1, recompute="full", routing={"dispatch_fp8": True})
    plain = estimate("deepseek-v3", system, base, w)
    dedup = estimate("deepseek-v3", system, base.model_copy(
        update={"routing": base.routing.model_copy(update={"dispatch_dedup": True})}), w)
    assert dedup.traffic.scale_out_bytes < plain.traffic.scale_out_bytes
    assert dedup.breakdown.ep_exposed < plain.breakdown.ep_exposed
    assert dedup.step_time_s < plain.step_time_s
    sweep = StrategyArrays(**{**StrategyArrays.of(base, 64 // 64 * 64).__dict__,
                              "dispatch_dedup": np.array([0.0, 1.0])})
    arr = estimate_training(ModelArrays.of(load_model("deepseek-v3")), sweep, TrainingArrays.of(w), system)
    assert np.allclose(arr.step_time_s, [plain.step_time_s, dedup.step_time_s], rtol=1e-12)


def test_group_limited_routing_is_read_and_checked():
    config = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
              "num_attention_heads": 128, "vocab_size": 129280, "intermediate_size": 18432,
              "n_routed_experts": 256, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
              "n_group": 8, "topk_group": 4, "topk_method": "noaux_tc", "kv_lora_rank": 512, "q_lora_rank": 1536,
              "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}
    moe = from_huggingface(config).moe
    assert moe is not None and (moe.expert_groups, moe.group_top_k) == (8, 4)
    greedy = from_huggingface({**config, "n_group": 1, "topk_group": 1, "topk_method": "greedy"}).moe
    assert greedy is not None and greedy.expert_groups is None
    with pytest.raises(ValueError, match="must divide experts"):
        MixtureOfExperts(experts=256, top_k=8, expert_ffn=2048, expert_groups=7, group_top_k=4)
    with pytest.raises(ValueError, match="hold fewer than top_k"):
        MixtureOfExperts(experts=256, top_k=64, expert_ffn=2048, expert_groups=8, group_top_k=1)
    with pytest.raises(ValueError, match="go together"):
        MixtureOfExperts(experts=256, top_k=8, expert_ffn=2048, expert_groups=8)
    with pytest.raises(SpecError, match="dispatch_dedup"):
        estimate("deepseek-v3", "dgx-h800", {"ep": 8, "routing": {"dispatch_dedup": "sometimes"}},
                 Training(seq_len=4096, global_batch=64))


def test_dispatcher_names_and_flags():
    assert deduplicated_dispatch("Megatron-Core 0.14, flex dispatcher with DeepEP")
    assert deduplicated_dispatch("moe-token-dispatcher-type=flex, HybridEP")
    assert not deduplicated_dispatch("Megatron-Core alltoall dispatcher")
    s = Strategy(pp=8, ep=64, routing={"dispatch_dedup": True})
    flags = megatron(load_model("deepseek-v3"), load_system("dgx-h800", 512), s,
                     Training(seq_len=4096, global_batch=1024)).text().replace(" \\\n ", "")
    assert "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep" in flags
    assert "--moe-router-num-groups 8 --moe-router-group-topk 4" in flags
