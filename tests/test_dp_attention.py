"""Data-parallel attention with experts over all ranks (DeepSeek-style serving, SGLang --enable-dp-attention):
each attention group its own requests and KV cache, the routed experts exchanged by all-to-all (wide EP) or
gathered (experts sharded over tp). Expected values are worked out by hand from DeepSeek-V3's shapes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from pydantic import ValidationError

from armillary.comm.collectives import all_gather, collective, reduce_scatter
from armillary.errors import SpecError
from armillary.estimate.dp_attention import routed_experts
from armillary.estimate.inference import replica_model
from armillary.estimate.inference_memory import inference_memory
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.run import estimate_run
from armillary.plan.arrays import ModelArrays
from armillary.serving.run import replica_kv_tokens, serve_trace
from armillary.serving.trace import benchmark_trace
from armillary.specs.communication import Collective
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Arrivals, Inference, Training

SPEC = load_model("deepseek-v3")
MODEL = ModelArrays.of(SPEC)
SYSTEM = load_system("hgx-h200", 8)
W = Inference.model_validate({"kind": "inference", "input_len": 3200, "output_len": 800, "weights": "fp8",
                              "serving": {"engine": "sglang-0.4"}})
HIDDEN, TOP_K, MOE_LAYERS, DENSE_LAYERS = 7168, 8, 58, 3


def _replica(attention_dp: int, **moe: int):  # type: ignore[no-untyped-def]
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", "attention": "flash3",
                                        "attention_dp": attention_dp, **moe})
    return replica_model(MODEL, strategy, W, SYSTEM)


def test_all_to_all_bytes_per_token_by_hand() -> None:
    # wide EP over the 8 ranks, every rank its own attention group: each token goes to top_k = 8 experts, so a
    # rank's dispatch buffer carries 8 x 7168 elements per token (2 bytes: bf16), and its combine the same back
    r = _replica(8, ep=8, expert_tp=1)
    tokens = 32.0
    x = routed_experts(r, tokens)
    per_token = TOP_K * HIDDEN * 2.0
    assert float(x.dispatch_bytes) == pytest.approx(tokens * per_token)
    assert float(x.combine_bytes) == pytest.approx(tokens * per_token)
    assert float(x.received_tokens) == pytest.approx(tokens * TOP_K)  # balanced routing: T k copies per rank
    # the step's exchange: one dispatch and one combine all-to-all per MoE layer, over the 8 ranks' network
    assert r.expert_groups is not None
    a2a = collective(Collective.ALL_TO_ALL, tokens * per_token, r.expert_groups.ep, SYSTEM).cost.time
    assert float(r.tokens_time(tokens).ep) == pytest.approx(MOE_LAYERS * 2 * a2a)
    assert float(r.tokens_time(tokens).tp) == 0.0  # one rank per attention group: no attention all-reduce


def test_sharded_experts_gather_every_groups_tokens() -> None:
    # SGLang 0.4: experts sharded over tp; each layer all-gathers the 8 groups' tokens (8 T h bytes) to every
    # rank and reduce-scatters the MLP output back
    r = _replica(8, ep=1, expert_tp=8)
    tokens = 16.0
    gathered = 8 * tokens * HIDDEN * 2.0
    exchange = all_gather(gathered, r.tp_group, SYSTEM).time + reduce_scatter(gathered, r.tp_group, SYSTEM).time
    assert float(r.tokens_time(tokens).ep) == pytest.approx((MOE_LAYERS + DENSE_LAYERS) * float(exchange))
    assert float(routed_experts(r, tokens).received_tokens) == pytest.approx(8 * tokens * TOP_K)


def test_kv_capacity_grows_with_the_attention_dp_degree() -> None:
    # MLA's latent is the same on every TP rank of an attention group: more groups hold more tokens, though
    # each device keeps more attention weights (replicated over the groups)
    capacity = [replica_kv_tokens(_replica(d, ep=8, expert_tp=1), W) for d in (1, 2, 4, 8)]
    assert all(b > a for a, b in itertools.pairwise(capacity))
    assert capacity[-1] > 5 * capacity[0]  # 8 groups, each with less room (attention weights x 8)
    weights = [float(inference_memory(_replica(d, ep=8, expert_tp=1), W, 1.0, 1.0).weights) for d in (1, 8)]
    assert weights[1] > weights[0]


def test_attention_runs_on_the_groups_ranks() -> None:
    plain, dp = _replica(1, ep=8, expert_tp=1), _replica(8, ep=8, expert_tp=1)
    # decode attention of one sequence: all 128 heads on one rank instead of 16 on each of 8
    assert float(dp.attention(1.0, 1000.0).flop) == pytest.approx(8 * float(plain.attention(1.0, 1000.0).flop))
    assert dp.cache_bytes_per_token == plain.cache_bytes_per_token  # the latent is not split either way


def test_divisibility_rules() -> None:
    with pytest.raises(ValidationError, match="attention_dp must divide tp"):
        Strategy.model_validate({"tp": 8, "attention_dp": 3})
    with pytest.raises(SpecError, match="experts span the tp ranks"):
        _replica(8, ep=2, expert_tp=4)
    with pytest.raises(SpecError, match="attention_dp"):
        estimate_run(SPEC, SYSTEM, Strategy.model_validate({"tp": 8, "attention_dp": 8, "ep": 8, "expert_tp": 1}),
                     Inference.model_validate({"kind": "inference", "input_len": 10, "output_len": 10, "batch": 4}))
    with pytest.raises(SpecError, match="training needs attention_dp: 1"):
        estimate_run(SPEC, SYSTEM, Strategy.model_validate({"tp": 8, "attention_dp": 8, "ep": 8, "expert_tp": 1}),
                     Training(seq_len=128, global_batch=8))


def test_static_batch_splits_over_the_groups() -> None:
    # 64 sequences over 8 groups: each group decodes 8, so the replica's throughput is 8 x one group's
    strategy = {"tp": 8, "precision": "fp8", "attention": "flash3", "ep": 8, "expert_tp": 1}
    w = Inference.model_validate({"kind": "inference", "input_len": 1000, "output_len": 100, "batch": 64,
                                  "weights": "fp8"})
    dp = estimate_run(SPEC, SYSTEM, Strategy.model_validate({**strategy, "attention_dp": 8}), w)
    assert isinstance(dp, InferenceEstimate)
    assert dp.batch == 64
    assert dp.output_tokens_per_s == pytest.approx(8 * 8 * 100 / dp.e2e_s)


def test_serving_splits_requests_over_the_attention_groups() -> None:
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", "attention": "flash3", "attention_dp": 8,
                                        "ep": 1, "expert_tp": 8})
    w = W.model_copy(update={"serving": W.serving.model_copy(update={"concurrency": 4})})
    trace = benchmark_trace(16, 0.0, 3200, 100, Arrivals.OFFLINE)
    result = serve_trace(MODEL, strategy, w, SYSTEM, 1, trace)
    assert result.completed == 16
    assert result.mean_batch == pytest.approx(1.0)  # 4 in flight over 4 busy groups: one sequence each


def test_wide_ep_across_nodes_pays_the_scale_out_network() -> None:
    # the same tokens per rank and the same all-to-all buffer; over two nodes most of it leaves the node
    one, two = (replica_model(MODEL, Strategy.model_validate({"tp": n, "precision": "fp8", "attention": "flash3",
                                                               "attention_dp": n, "ep": n, "expert_tp": 1}),
                              W, load_system("hgx-h200", n)) for n in (8, 16))
    assert float(routed_experts(one, 64.0).dispatch_bytes) == float(routed_experts(two, 64.0).dispatch_bytes)
    assert two.expert_groups is not None and two.expert_groups.ep.nodes == 2
    assert float(two.tokens_time(64.0).ep) > float(one.tokens_time(64.0).ep)


def test_groups_run_in_lock_step() -> None:
    # two attention groups share every MoE layer: a long prompt in one stretches the other's decode steps,
    # and with the prompt absent the decoding group runs as fast as alone
    from armillary.serving.lockstep import GroupStepCost, simulate_groups
    from armillary.serving.run import _limits
    from armillary.serving.trace import Trace

    r = replica_model(MODEL, Strategy.model_validate({"tp": 8, "precision": "fp8", "attention": "flash3",
                                                       "attention_dp": 2, "ep": 8, "expert_tp": 1}), W, SYSTEM)
    limits = _limits(r, W, 8000, None)
    cost = GroupStepCost(r, 8192, 64)
    decode = Trace(np.array([0.0]), np.array([100]), np.array([50]))
    prompt = Trace(np.array([0.0]), np.array([8000]), np.array([2]))
    empty = Trace(np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
    alone = simulate_groups([decode, empty], cost, [limits, limits])[0].times.finish_s[0]
    beside = simulate_groups([decode, prompt], cost, [limits, limits])
    assert beside[0].times.finish_s[0] > alone
    # the stretch is the prompt's iteration: at least the prompt group's own part of it
    assert beside[0].times.finish_s[0] - alone >= cost.group(np.array([8000]), np.array([0]), 1) - cost.group(
        np.array([1]), np.array([100]), 1)


def test_padded_decode_steps_compute_the_largest_groups_batch_in_every_group() -> None:
    # SGLang before PR #4390: a CUDA-graph decode step pads every group to the largest group's batch, so
    # with 8 groups and 4 decoding sequences (one each in 4 groups) the experts compute 8 tokens; a prompt
    # chunk in the step (eager) is not padded
    from armillary.serving.lockstep import GroupStepCost

    r = _replica(8, ep=1, expert_tp=8)
    padded, plain = GroupStepCost(r, 4096, 64, pad_groups=True), GroupStepCost(r, 4096, 64)
    assert padded.joint(4, 1, decoding=True) == plain.joint(8)
    assert padded.joint(4, 1, decoding=True) > plain.joint(4)
    assert padded.joint(3000, 3000, decoding=False) == plain.joint(3000)
