"""plan/rules.py: every rule on a hand case that passes and one that fails, the same verdicts over numpy
arrays (a search's points) as one configuration at a time, and messages that name what they constrain."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.plan import rules

# (rule, passing args, failing args, words the message must name)
CASES = [
    (rules.devices_match, (8, 1, 4, 2, 64), (8, 1, 4, 3, 64), ["tp*cp*pp*dp", "64"]),
    (rules.model_parallel_divides, (8, 2, 2, 64), (8, 1, 3, 64), ["tp x cp x pp", "64"]),  # 24 does not divide 64
    (rules.replica_fits, (8, 2, 16), (8, 4, 16), ["tp x pp", "16"]),
    (rules.tp_divides_heads, (8, 64), (3, 64), ["tp", "heads"]),
    (rules.tp_divides_heads, (64, 64), (128, 64), ["tp", "heads"]),  # more ranks than heads
    (rules.tp_and_kv_heads, (16, 8), (3, 8), ["tp", "kv_heads"]),  # 16 ranks: each KV head on 2 ranks
    (rules.tp_and_kv_heads, (4, 8), (6, 8), ["tp", "kv_heads"]),
    (rules.tp_divides_ffn, (8, 28672), (3, 28672), ["tp", "MLP"]),  # Llama-3 70B: 28672 = 2^12 x 7
    (rules.cp_balances_sequence, (4, 4096), (3, 4096), ["2*cp", "sequence"]),  # 6 does not divide 4096
    (rules.cp_balances_sequence, (1, 4095), (2, 4094), ["2*cp", "sequence"]),  # cp 1: no chunks
    (rules.stages_split, (80, 20, 20, 20, 4, 2), (80, 20, 20, 20, 4, 3), ["pp*vpp", "layers"]),
    (rules.stages_split, (80, 2, 26, 26, 4, 1), (61, 7.625, 7.625, 7.625, 8, 1), ["pp*vpp", "layers"]),
    (rules.stages_split, (4, 2, 1, 1, 3, 1), (4, 2, 0, 2, 3, 1), ["pp*vpp"]),  # a middle stage left empty
    # DeepSeek-V3 on pp 2 x vpp 4 (no middle stage): chunks of 8, the first and last 7 and 6; 40 + 21 would
    # need chunks of 10 on the first stage and leave the last stage short of three of them
    (rules.stages_split, (61, 31, 0, 30, 2, 4), (61, 40, 0, 21, 2, 4), ["pp*vpp", "first model chunk"]),
    (rules.ep_divides_experts, (8, 256), (3, 256), ["ep", "experts"]),
    (rules.ep_divides_experts, (1, 0), (2, 0), ["ep", "MoE"]),  # a dense model: no expert parallelism
    (rules.expert_groups_fit, (8, 1, 64), (8, 2, 24), ["ep*expert_tp", "tp*cp*dp"]),  # 16 vs 24
    (rules.etp_divides_expert_ffn, (2, 256, 2048), (3, 256, 2048), ["expert_tp", "expert_ffn"]),
    (rules.etp_divides_expert_ffn, (3, 0, 2048), (3, 8, 2048), ["expert_tp"]),  # dense models pass
    (rules.batch_divides, (1, 24, 2304), (1, 7, 2304), ["micro_batch*dp", "global batch"]),
    (rules.interleaved_microbatches, (True, 4, 8), (True, 4, 6), ["interleaved", "pp"]),
    (rules.interleaved_microbatches, (False, 4, 6), (True, 35, 36), ["micro-batch count"]),
    (rules.interleaving_needs_stages, (2, 2), (2, 1), ["vpp", "pp > 1"]),
    (rules.interleaving_needs_stages, (1, 1), (4, 1), ["vpp"]),
    (rules.sequence_parallel_needs_tp, (1, 2), (1, 1), ["sequence_parallel", "tp > 1"]),
    (rules.sequence_parallel_needs_tp, (0, 1), (True, 1), ["sequence_parallel"]),
    (rules.rank_order_without_ep, (1, 1), (1, 8), ["tp-cp-pp-dp", "ep"]),
    (rules.rank_order_without_ep, (0, 8), (1.0, 2), ["rank_order"]),
    (rules.uneven_stages_supported, (2, 0, 2, 1), (2, 0, 1, 1), ["first_stage_layers", "pp >= 2"]),
    (rules.uneven_stages_supported, (15, 15, 8, 8), (0, 3, 1, 2), ["last_stage_layers", "pp >= 2"]),
    # Llama 3.1 405B on pp 8 x vpp 8, first / last stage 15 (one-layer first and last chunks) vs 14 (none)
    (rules.stages_split, (126, 15, 16, 15, 8, 8), (126, 14, 16, 16, 8, 8), ["pp*vpp", "first model chunk"]),
]
DEVICE_RULES = (rules.devices_match, rules.model_parallel_divides, rules.replica_fits)
IDS = [f"{rule.__name__}-{i}" for i, (rule, *_) in enumerate(CASES)]


@pytest.mark.parametrize(("rule", "good", "bad", "names"), CASES, ids=IDS)
def test_rule_on_one_configuration(rule, good, bad, names):
    ok, broken = rule(*good), rule(*bad)
    assert bool(ok.ok) is True and bool(broken.ok) is False
    for word in names:
        assert word in broken.message
    assert ok.message == broken.message  # the requirement, not the verdict


@pytest.mark.parametrize(("rule", "good", "bad", "names"), CASES, ids=IDS)
def test_rule_over_arrays_of_points(rule, good, bad, names):
    columns = [np.array([g, b, g], dtype=float) for g, b in zip(good, bad, strict=True)]
    if rule in DEVICE_RULES:  # the devices are one number for the whole search
        columns[-1] = good[-1]
    got = rule(*columns).ok
    assert isinstance(got, np.ndarray)
    assert got.tolist() == [True, False, True]


def test_failed_lists_the_messages_of_the_broken_rules():
    checks = (rules.tp_divides_heads(8, 64), rules.tp_divides_heads(3, 64), rules.replica_fits(8, 4, 16))
    assert rules.failed(checks) == ["tp must divide the attention heads", "tp x pp must not exceed the 16 devices"]
    assert rules.failed([rules.tp_divides_heads(8, 64)]) == []


# Every rule over integer arguments: one array of points gives the verdicts of the points one by one.
SMALL = hs.integers(1, 64)
ANY = hs.integers(0, 64)
FLAG = hs.integers(0, 1)
SIGNATURES = [
    (rules.tp_divides_heads, (SMALL, SMALL)), (rules.tp_and_kv_heads, (SMALL, SMALL)),
    (rules.tp_divides_ffn, (SMALL, hs.integers(1, 4096))), (rules.cp_balances_sequence, (SMALL, hs.integers(1, 4096))),
    (rules.stages_split, (SMALL, ANY, ANY, ANY, SMALL, SMALL)), (rules.ep_divides_experts, (SMALL, ANY)),
    (rules.expert_groups_fit, (SMALL, SMALL, SMALL)), (rules.etp_divides_expert_ffn, (SMALL, ANY, SMALL)),
    (rules.batch_divides, (SMALL, SMALL, hs.integers(1, 4096))),
    (rules.interleaved_microbatches, (FLAG, SMALL, SMALL)), (rules.interleaving_needs_stages, (SMALL, SMALL)),
    (rules.sequence_parallel_needs_tp, (FLAG, SMALL)), (rules.rank_order_without_ep, (FLAG, SMALL)),
    (rules.uneven_stages_supported, (ANY, ANY, SMALL, SMALL)),
    (rules.devices_match, (SMALL, SMALL, SMALL, SMALL)), (rules.model_parallel_divides, (SMALL, SMALL, SMALL)),
    (rules.replica_fits, (SMALL, SMALL)),
]


@settings(max_examples=150, deadline=None)
@given(data=hs.data(), index=hs.integers(0, len(SIGNATURES) - 1), points=hs.integers(1, 6),
       devices=hs.sampled_from([8, 16, 24, 64, 512]))
def test_array_verdicts_equal_the_scalar_ones(data, index, points, devices):
    rule, args = SIGNATURES[index]
    rows = [data.draw(hs.tuples(*args)) for _ in range(points)]
    extra = (devices,) if rule in DEVICE_RULES else ()
    one_by_one = [bool(rule(*row, *extra).ok) for row in rows]
    at_once = rule(*(np.array(col, dtype=float) for col in zip(*rows, strict=True)), *extra).ok
    assert np.asarray(at_once).tolist() == one_by_one


@pytest.mark.parametrize(("layers", "pp", "vpp", "split"), [
    (126, 8, 8, (15, 15)),  # Llama 3.1 405B: embedding and loss each take a layer's place, 2 per chunk
    (126, 16, 1, (7, 7)),
    # DeepSeek-V3's 61 layers: our generic rule (the loss side takes two slots), not a recipe's table. Megatron-
    # Bridge's DeepSeek-V3 recipe lays pp 16 out as 4 / 1 ('Et*4|(t*4|)*14tL', presets/stacks/megatron-bridge.yaml,
    # which the harness reads for that stack: tests/test_recipe_layouts.py)
    (61, 16, 1, (3, 2)),
    (61, 16, 2, (3, 2)),  # the last chunk holds the loss (and any MTP head) alone
    (61, 8, 4, (7, 6)),  # as 'Et|(tt|)*30mL', the layout Megatron-Bridge's H100 DeepSeek-V3 config passes
    (61, 8, 1, (7, 6)),  # without interleaving the last stage keeps its layers: 6 of them (the recipe: 8 / 5)
    (80, 3, 1, (27, 26)),  # one slot: the loss side takes it
    (61, 2, 4, (31, 30)),  # two stages, no middle one (Megatron-Bridge's GB300 rows' shape; not in its table)
    (48, 4, 1, None),  # even: nothing to do
    (7, 8, 1, None),  # fewer layers than stages
])
def test_megatron_uneven_layout_by_hand(layers, pp, vpp, split):
    from armillary.plan.layout import embedding_and_loss_split, stage_layers

    assert embedding_and_loss_split(layers, pp, vpp) == split
    if split is not None:
        first, middle, last = (float(x) for x in stage_layers(layers, pp, split[0], split[1]))
        assert first + (pp - 2) * middle + last == layers
        assert middle == int(middle) and middle % vpp == 0 and rules.stages_split(
            layers, first, middle, last, pp, vpp).ok


def test_two_stages_with_both_counts_given_simulate_their_chunks():
    # DeepSeek-V3 on pp 2 x vpp 4, first / last stage 31 / 30: chunks of 8, rank 0's first 7, rank 1's last 6
    from armillary.plan.layout import stage_layer_kinds
    from armillary.specs.loading import load_model
    from armillary.specs.strategy import Strategy

    strategy = Strategy.model_validate({"tp": 1, "pp": 2, "vpp": 4, "ep": 32, "expert_tp": 1,
                                        "first_stage_layers": 31, "last_stage_layers": 30})
    assert [len(c) for c in stage_layer_kinds(load_model("deepseek-v3"), strategy)] == [7, 8, 8, 8, 8, 8, 8, 6]
