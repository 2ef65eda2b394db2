"""MoE costs that the software stack changes (docs/moe.md): the host's wait at the dispatcher's sync, redundant
experts (EPLB) and the recomputation of whole MoE blocks. Hand calculations on the pure functions; the
StrategyArrays fields they read are set on a copy of the arrays where plan/arrays.py does not carry them."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
from pydantic import ValidationError

from armillary.estimate.layer import moe_host_wait
from armillary.plan.arrays import ModelArrays, StrategyArrays
from armillary.plan.codes import RECOMPUTE, RECOMPUTE_SELECTIVE
from armillary.specs.loading import load_model, load_stack
from armillary.specs.strategy import Recompute, Strategy
from armillary.workload.experts import experts_forward, rank_load

QWEN = ModelArrays.of(load_model("qwen3-30b-a3b"))


def _with(st: StrategyArrays, **fields: float) -> Any:
    """`st` with MoE fields set, whether or not StrategyArrays declares them yet."""
    declared = {f.name for f in dataclasses.fields(st)}
    out = SimpleNamespace(**{f.name: getattr(st, f.name) for f in dataclasses.fields(st)})
    for name, value in fields.items():
        assert name in declared or name.startswith(("moe_", "redundant_", "recompute_moe"))
        setattr(out, name, value)
    return out


def test_no_replicas_leave_the_busiest_rank_as_before():
    """(imbalance + n - 1) / n for n = experts / ep: 256 experts on 32 ranks, the hottest at 3x the mean."""
    assert float(rank_load(256, 32, 3.0, 0.0, 0.0)) == pytest.approx((3 + 7) / 8)
    assert float(rank_load(256, 32, 3.0, 0.0, 0.0, 0.0)) == pytest.approx((3 + 7) / 8)


def test_replicas_keep_balanced_routing_balanced():
    """Copies of equally loaded experts split the same tokens over more slots: the rank still carries 1."""
    for redundant in (1.0, 2.0, 4.0):
        assert float(rank_load(256, 32, 1.0, 0.0, 0.0, redundant)) == pytest.approx(1.0)


def test_replicas_split_the_hottest_expert_by_hand():
    """8 experts on 8 ranks, the hottest at 5x the mean, one replica per rank: 16 copies whose mean load is
    8 / 16 = 0.5; the hottest would need ceil(5 / 0.5) = 10 copies but there are 1 + 8 = 9: 5/9 each; its
    rank holds that copy and one other at 0.5: 5/9 + 0.5 over one expert per rank. Without replicas, 5."""
    assert float(rank_load(8, 8, 5.0, 0.0, 0.0)) == pytest.approx(5.0)
    assert float(rank_load(8, 8, 5.0, 0.0, 0.0, 1.0)) == pytest.approx(5 / 9 + 0.5)
    # fewer copies than it needs: 2 experts on 2 ranks, hottest at 1.8 (the other 0.2), one replica per rank:
    # 4 copies of mean 0.5, the hottest takes ceil(1.8 / 0.5) = 4 but at most 1 + 2 = 3: 0.6 each; its rank
    # 0.6 + 0.5 = 1.1 over one expert per rank
    assert float(rank_load(2, 2, 1.8, 0.0, 0.0, 1.0)) == pytest.approx(1.1)


def test_replicas_are_more_grouped_gemm_problems():
    """16 local experts and one replica: the rank's tokens spread over 17 problems."""
    plain = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    eplb = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, redundant=1.0)
    assert float(plain.experts_in.group) == pytest.approx(16.0, rel=1e-6)
    assert float(eplb.experts_in.group) == pytest.approx(17.0, rel=1e-6)
    assert float(eplb.experts_in.flop) == pytest.approx(float(plain.experts_in.flop))


def test_redundant_experts_need_dropless_routing():
    with pytest.raises(ValidationError, match="redundant_experts needs dropless routing"):
        Strategy(routing={"redundant_experts": 1, "capacity_factor": 1.0})


def test_the_host_wait_by_hand():
    """A forward that takes 1 ms on the device; the host issues 28 kernels at 7 us and 2 x 16 per-expert
    calls at 33 us: 0.196 + 1.056 = 1.252 ms, so the layer waits 0.252 ms on the host where the dispatcher
    syncs, nothing where it does not, nothing where the device is slower."""
    ex = experts_forward(QWEN, 512.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    assert float(ex.experts_in.group) == pytest.approx(16.0, rel=1e-9)
    st = _with(StrategyArrays.of(Strategy(ep=8), 8), expert_gemm_call=33e-6, moe_host_op=7e-6, moe_host_ops=28.0,
               moe_dispatch_sync=1.0)
    assert float(moe_host_wait(1e-3, ex, st)) == pytest.approx(28 * 7e-6 + 32 * 33e-6 - 1e-3, rel=1e-6)
    assert float(moe_host_wait(2e-3, ex, st)) == 0.0
    st.moe_dispatch_sync = 0.0
    assert float(moe_host_wait(1e-3, ex, st)) == 0.0


def test_the_stacks_describe_their_host_side():
    """Megatron-Core's dropless dispatchers sync; Megatron-Bridge's recipes graph the router and preprocess."""
    core, bridge = load_stack("megatron-core"), load_stack("megatron-bridge")
    assert core.moe_host is not None and bridge.moe_host is not None
    assert core.moe_host.dispatch_sync and bridge.moe_host.dispatch_sync
    assert bridge.moe_host.ops < core.moe_host.ops
    assert Strategy(**{"ep": 8, "moe_host": bridge.strategy_defaults(1, True)["moe_host"]}).moe_host == bridge.moe_host
    assert "pytorch/pytorch#41383" in bridge.sources["moe_host"]


def test_a_moe_block_recomputed_keeps_only_its_input():
    """Recompute module moe: the MoE layer's routed activations and its shared experts' hidden ones are not
    stored; moe_act alone drops only the experts' activation output."""
    from armillary.estimate.activations import layer_activations

    ex = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    acts = layer_activations(QWEN, 1.0, 4096.0, 1.0, 0.0, 2.0, 2.0, 1.0, QWEN.shared_ffn, ex, 2.0)
    base = StrategyArrays.of(Strategy(ep=8, recompute=Recompute.SELECTIVE), 8)
    assert float(base.recompute) == RECOMPUTE_SELECTIVE == RECOMPUTE.code(Recompute.SELECTIVE)
    kept = float(acts.stored(_with(base)))
    block = float(acts.stored(_with(base, recompute_moe=1.0)))
    assert kept - block == pytest.approx(float(acts.experts) + float(acts.mlp_hidden))
    assert float(acts.experts) > 0


def test_a_pipeline_layout_sets_the_uneven_stages():
    """DeepSeek-V3's 61 layers on pp 8 x vpp 4 as Megatron-Bridge lays them out, 'Et|(tt|)*30L': the first
    rank holds chunks 0, 8, 16, 24 (1 + 2 + 2 + 2 = 7 layers), the last 7, 15, 23, 31 (2 + 2 + 2 + 0: the
    loss alone), the others 8; the same as stating 7 and 6."""
    from armillary.specs.pipeline_layout import layout_stage_layers, pipeline_chunks

    assert len(pipeline_chunks("Et|(tt|)*30L")) == 32
    assert layout_stage_layers("Et|(tt|)*30L", 8, 4) == (7, 6)
    assert layout_stage_layers("Ett|tt|tt|ttL", 4, 1) == (None, None)  # every stage 2 layers
    layout = Strategy(pp=8, vpp=4, pipeline_layout="Et|(tt|)*30L")
    assert (layout.first_stage_layers, layout.last_stage_layers) == (7, 6)
    assert Strategy.model_validate(layout.model_dump()) == layout


@pytest.mark.parametrize(("layout", "pp", "vpp", "message"), [
    ("Et|(tt|)*30L", 8, 2, "32 chunks, but pp x vpp = 8 x 2 = 16"),
    ("tE|tL", 2, 1, "the embedding 'E' must come once, first"),
    ("Et|Lt", 2, 1, "the loss 'L' must come once, last"),
    ("Et|txL", 2, 1, "unknown layer characters \\['x'\\]"),
    ("Emt|tL", 2, 1, "'m' must come together at the end of the last chunk"),
    ("Et|ttt|tt|tL", 4, 1, "stages between the first and the last hold \\[2, 3\\]"),
    ("E|L", 2, 1, "holds no transformer layer"),
])
def test_impossible_layouts_are_refused(layout: str, pp: int, vpp: int, message: str):
    with pytest.raises(ValidationError, match=message):
        Strategy(pp=pp, vpp=vpp, pipeline_layout=layout)


def test_a_layout_and_other_stage_counts_are_refused():
    with pytest.raises(ValidationError, match="give one of them"):
        Strategy(pp=8, vpp=4, pipeline_layout="Et|(tt|)*30L", first_stage_layers=8)


def test_megatron_arguments_carry_the_layout():
    from armillary.report.deploy_megatron import megatron
    from armillary.specs.loading import load_system, load_workload

    model, system = load_model("deepseek-v3"), load_system("gb200-nvl72", 256)
    work = load_workload({"seq_len": 4096, "global_batch": 4096})
    s = Strategy(pp=8, vpp=4, ep=32, pipeline_layout="Et|(tt|)*30L", routing={"redundant_experts": 1})
    deployment = megatron(model, system, s, work)
    args = [a for c in deployment.commands for a in c.argv]
    assert args[args.index("--pipeline-model-parallel-layout") + 1] == "Et|(tt|)*30L"
    assert "--decoder-first-pipeline-num-layers" not in args
    assert any("redundant expert" in n for n in deployment.notes)


def _arrays(strategy: Strategy, dp: int, **moe: float) -> StrategyArrays:
    """The strategy's arrays with MoE fields set, as a dataclass whose fields include them."""
    base = StrategyArrays.of(strategy, dp)
    extra = [(name, float, 0.0) for name in moe if name not in {f.name for f in dataclasses.fields(base)}]
    cls = dataclasses.make_dataclass("MoeArrays", extra, bases=(StrategyArrays,), frozen=True)
    values: dict[str, Any] = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
    return cls(**{**values, **moe})  # type: ignore[no-any-return]


def test_a_moe_block_recomputed_reruns_its_kernels_and_exchange():
    """Qwen3-30B-A3B on 8 B200 with EP 8, selective recomputation: re-running the MoE block adds, per MoE layer
    and micro-batch, the routed kernels (router, routing, permutes, expert GEMMs, activation), the shared
    experts' MLP (none here) and one more dispatch and combine; memory drops."""
    from armillary.estimate.kernels import layer_kernels
    from armillary.estimate.training import estimate_training
    from armillary.plan.arrays import TrainingArrays
    from armillary.specs.loading import load_system, load_workload
    from armillary.workload.transformer import ends_forward, layer_forward

    system, work = load_system("dgx-b200", 8), TrainingArrays.of(load_workload({"seq_len": 4096, "global_batch": 64}))
    s = Strategy(ep=8, attention="flash3", recompute="selective", overlap={"ep_comm": False})
    plain = estimate_training(QWEN, _arrays(s, 8, recompute_moe=0.0), work, system)
    block = estimate_training(QWEN, _arrays(s, 8, recompute_moe=1.0), work, system)
    p, b = plain.moe_layer, block.moe_layer
    assert p is not None and b is not None
    st = StrategyArrays.of(s, 8)
    # the alltoall dispatcher's regrouping by local expert is part of the routed kernels (16 local experts)
    ex = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, sort_pass=1.0)
    kt = layer_kernels(layer_forward(QWEN, 1.0, 4096.0, 1.0, 0.0, 2.0, 1.0, QWEN.shared_ffn),
                       ends_forward(QWEN, 1.0, 4096.0, 1.0, 2.0), ex, system.device, st.precision, st.attention)
    added = float(b.recompute_modules.time_s) - float(p.recompute_modules.time_s)
    routed = float(kt.router + kt.expert_gemms + kt.expert_streams + kt.mlp_in + kt.mlp_out + kt.activation)
    assert added == pytest.approx(routed, rel=1e-9)
    assert float(b.ep_recompute_s) == pytest.approx(float(b.ep_forward_s)) and float(p.ep_recompute_s) == 0.0
    assert float(block.memory_hbm.activations) < float(plain.memory_hbm.activations)
    assert float(block.step_time_s) > float(plain.step_time_s)


def test_a_layout_counts_its_layers():
    """'Et|(tt|)*30L' holds 1 + 30 x 2 = 61 transformer layers: DeepSeek-V3's."""
    from armillary.specs.pipeline_layout import layout_layers

    assert layout_layers("Et|(tt|)*30L") == 61 == load_model("deepseek-v3").layers
    assert layout_layers("Et*3|t*4L") == 7


def test_a_layout_that_misses_the_models_layers_is_refused():
    """Megatron-Core's validate_layer_layout: the layout's decoder layers ('t') equal num_layers."""
    from armillary import Training, estimate
    from armillary.errors import SpecError

    w = Training(seq_len=4096, global_batch=8)
    with pytest.raises(SpecError, match=r"strategy.pipeline_layout.*20 transformer layers.*32"):
        estimate("llama3-8b", "dgx-h100", Strategy(pp=2, pipeline_layout="Et*10|t*10L"), w, gpus=8)
    assert float(estimate("llama3-8b", "dgx-h100", Strategy(pp=2, pipeline_layout="Et*16|t*16L"), w,
                          gpus=8).step_time_s) > 0


def test_megatron_bridge_recipes_reduce_gradients_in_bf16():
    """Every Megatron-Bridge performance recipe sets ddp.grad_reduce_in_fp32 = False: the stack's strategies
    hold and reduce bf16 gradients; a stack that does not say so keeps Megatron-Core's fp32 main gradients."""
    bridge, core = load_stack("megatron-bridge"), load_stack("megatron-core")
    assert bridge.strategy_defaults(1, True)["grad_reduce_in_bf16"] is True
    assert "grad_reduce_in_bf16" not in core.strategy_defaults(1, True)
    st = Strategy.model_validate({**bridge.strategy_defaults(1, True), "precision": "bf16"})
    assert float(StrategyArrays.of(st, 8).grad_reduce_bf16) == 1.0
