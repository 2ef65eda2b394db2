"""Multi-token prediction in training (DeepSeek-V3 report §2.2; Megatron-Core multi_token_prediction.py): each
depth is one more transformer layer of the last layer's kind, a 2h -> h projection and one more LM-head pass and
loss, all on the last pipeline stage; counted in the model FLOPs as Megatron-Bridge's flop_utils counts it."""

from __future__ import annotations

from dataclasses import fields

import pytest
from pydantic import ValidationError

from armillary import api
from armillary.errors import SpecError
from armillary.estimate.mtp import with_mtp
from armillary.estimate.result import StepEstimate
from armillary.estimate.stages import split_stages
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_system
from armillary.specs.model import Model
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

SEQ, GBS = 4096, 256


def _estimate(mtp: bool, strategy: dict[str, object], model: object = "deepseek-v3") -> StepEstimate:
    result = api.estimate(model, load_system("dgx-b200", 64), strategy,
                          {"kind": "training", "seq_len": SEQ, "global_batch": GBS, "mtp": mtp}, gpus=64)
    assert isinstance(result, StepEstimate)
    return result


def test_deepseek_v3_mtp_adds_one_moe_layer_a_projection_and_a_head_by_hand() -> None:
    """Per token, forward + backward (3 x forward, 2 FLOPs per multiply-add), from the preset's exact counts
    (deepseek-v3.yaml `parameters`): the MoE layer's GEMMs, MLA 187,107,328 less its two latent norms (1,536 and
    512) + router 1,835,008 + the shared and 8 routed experts of 44,040,192; its attention core, QK^T over the
    192-wide heads and AV over the 128-wide values of 128 heads and s keys (no causal halving, as every layer
    here); the LM head 7168 x 129280 once more; the 2h -> h projection (Megatron-Bridge flop_utils.py:
    3 * 2 * 2h^2)."""
    st = {"tp": 1, "pp": 4, "ep": 8, "micro_batch": 1}
    h, vocab, heads = 7168, 129280, 128
    gemm_params = (187_107_328 - 1_536 - 512) + 1_835_008 + 9 * 44_040_192
    core = 2 * SEQ * heads * (192 + 128)
    per_token = 3 * (2 * gemm_params + core) + 3 * 2 * h * vocab + 3 * 2 * (2 * h) * h
    assert per_token == 10_695_081_984
    with_, without = _estimate(True, st), _estimate(False, st)
    assert float(with_.model_flop - without.model_flop) == pytest.approx(per_token * GBS * SEQ, rel=1e-12)
    # the source's own figures: Megatron-Bridge 25.11 B200-19 (w/ MTP) 557 TFLOP/s at 2139 tokens/s per GPU,
    # 260.4 GFLOP/token, against 249.7 for the same model without MTP (GB300-04); its causal halving of the
    # core (1.0 -> 0.5 GFLOP) aside, the same 10.2-10.7 GFLOP/token
    assert per_token - 3 * core / 2 == pytest.approx(10.19e9, rel=2e-3)


def test_the_last_stage_holds_the_mtp_layers_and_no_other_stage_does() -> None:
    m = ModelArrays.of(load_model("deepseek-v3"))
    stages = split_stages(m.layers, m.dense_layers, 4.0, 15.0, 14.0)
    grown = with_mtp(stages, 1.0, m)
    assert grown.first == stages.first and grown.middle == stages.middle
    assert grown.last == (stages.last[0], stages.last[1] + 1)  # an MoE layer: the last layer's kind
    assert grown.totals == (stages.totals[0], stages.totals[1], stages.totals[2] + 1)
    single = split_stages(m.layers, m.dense_layers, 1.0, 0.0, 0.0)
    assert with_mtp(single, 1.0, m).first[1] == single.first[1] + 1  # one stage is its own last
    dense = ModelArrays.of(load_model("llama3-8b"))
    assert with_mtp(split_stages(dense.layers, dense.dense_layers, 2.0, 0.0, 0.0), 2.0, dense).last == (18.0, 0.0)


def test_a_pipeline_whose_first_stage_is_critical_pays_mtp_only_in_its_fill_and_drain() -> None:
    """pp 2 with 45 of the 61 layers on the first stage: the first stage sets the steady state and holds the
    most parameters, so the MTP modules on the last stage move only the fill and drain (by the last stage's
    added time: one MoE layer and the MTP's other work) and the data-parallel traffic of its extra weights."""
    st = {"tp": 1, "pp": 2, "ep": 8, "micro_batch": 1, "first_stage_layers": 45, "last_stage_layers": 16}
    with_, without = _estimate(True, st), _estimate(False, st)
    assert with_.breakdown.forward_backward == without.breakdown.forward_backward
    assert with_.breakdown.ep_exposed == without.breakdown.ep_exposed
    assert float(with_.memory_hbm.total) == float(without.memory_hbm.total)  # the first stage is fullest
    moe = with_.moe_layer
    assert moe is not None
    assert with_.ends is not None
    added = float(moe.total_s + with_.ends.mtp_s + 4 * with_.ends.tp.time)  # tp 1: no exchange
    assert float(with_.breakdown.bubble - without.breakdown.bubble) == pytest.approx(added, rel=1e-9)
    assert float(with_.ends.mtp_s) > float(with_.ends.head_s) > 0  # the head once more, and the projection


def test_a_critical_last_stage_runs_the_mtp_layer_and_head_every_micro_batch() -> None:
    st = {"tp": 1, "pp": 2, "ep": 8, "micro_batch": 1, "first_stage_layers": 16, "last_stage_layers": 45}
    with_, without = _estimate(True, st), _estimate(False, st)
    moe, ends = with_.moe_layer, with_.ends
    assert moe is not None and ends is not None
    per_mb = float(moe.compute_s + ends.mtp_s)  # tp 1: no exchange
    grown = float(with_.breakdown.forward_backward - without.breakdown.forward_backward)
    assert grown == pytest.approx(float(with_.microbatches) * per_mb, rel=1e-9)
    # the last stage's weights: one MoE layer's replicated part and its experts on this rank, the projection
    # (2h x h) and three norms, and a copy of the embedding (gpt_model.py builds it where mtp_process)
    assert float(with_.memory_hbm.weights) > float(without.memory_hbm.weights)


def test_without_training_mtp_the_estimate_is_as_before() -> None:
    """The preset states DeepSeek-V3's MTP depth (1); a workload that does not train it gets the estimate of a
    model without MTP modules, field for field."""
    st = {"tp": 1, "pp": 4, "ep": 8, "micro_batch": 1}
    plain = load_model("deepseek-v3").model_copy(update={"mtp_layers": 0})
    a, b = _estimate(False, st), _estimate(False, st, plain)
    for f in fields(StepEstimate):
        if f.name == "config":  # the run's specs: the model's own mtp_layers differs
            continue
        assert repr(getattr(a, f.name)) == repr(getattr(b, f.name)), f.name


def test_bad_mtp_input_names_the_field() -> None:
    with pytest.raises(ValidationError, match="mtp_layers"):
        Model.model_validate({**load_model("deepseek-v3").model_dump(), "mtp_layers": -1})
    with pytest.raises(SpecError, match=r"training\.mtp"):
        _estimate(True, {"tp": 1, "pp": 1, "micro_batch": 1}, "llama3-8b")


def test_the_harness_reads_mtp_from_the_model_words() -> None:
    rows = {r["id"]: r for r in read_rows()}
    assert row_specs(rows["TR-MBRIDGE-25.11-B200-19"])[0].workload.mtp  # "DeepSeekV3 (w/ MTP) (MoE)"
    assert not row_specs(rows["TR-MBRIDGE-25.11-GB200-12"])[0].workload.mtp  # "(w/o MTP)"
    assert not row_specs(rows["TR-MBRIDGE-25.11-GB200-16"])[0].workload.mtp  # says nothing: none
    llama = {**rows["TR-MBRIDGE-25.11-GB200-16"], "model": "Qwen3 235B-A22B (w/ MTP)"}
    with pytest.raises(Unsupported, match="no MTP modules"):
        row_specs(llama)


def test_mtp_simulates_as_estimated() -> None:
    """DeepSeek-V3 on pp 8 x vpp 4 (`Et|(tt|)*30mL`, Megatron's layout with the MTP module in the last chunk):
    the simulator runs the MTP layer and head after the last chunk's and agrees with the estimator."""
    import armillary

    st = {"tp": 2, "pp": 8, "vpp": 4, "ep": 64, "first_stage_layers": 7, "last_stage_layers": 6,
          "precision": "fp8", "recompute": "full"}
    r = armillary.simulate("deepseek-v3", "dgx-h100", st, {"seq_len": 4096, "global_batch": 1024, "mtp": True},
                           gpus=1024)
    assert bool(r.estimate.feasible) and abs(r.difference) < 0.03
    counts = [sum(1 for t in r.graph.tasks if t.name.startswith("layer") and t.ranks == (s,)) for s in (0, 7)]
    assert counts[1] == counts[0]  # 6 decoder layers and the MTP layer against 7
    assert any(t.name.startswith("mtp head") for t in r.graph.tasks)


def test_a_layout_places_the_mtp_modules_it_names_and_megatron_gets_the_depth() -> None:
    """Megatron-Core's layout for DeepSeek-V3 on pp 8 x vpp 4 with MTP, 'Et|(tt|)*30mL': the 'm' holds no decoder
    layer (stages 7 and 6 as without it); its count must be the depth the run trains; --mtp-num-layers is emitted."""
    from armillary.report.deploy_megatron import megatron
    from armillary.specs.loading import load_workload
    from armillary.specs.strategy import Strategy

    layout = Strategy(pp=8, vpp=4, ep=32, pipeline_layout="Et|(tt|)*30mL")
    assert (layout.first_stage_layers, layout.last_stage_layers) == (7, 6)
    work = {"kind": "training", "seq_len": 4096, "global_batch": 4096}
    system = load_system("gb200-nvl72", 256)
    assert float(api.estimate("deepseek-v3", system, layout, {**work, "mtp": True}).step_time_s) > 0
    with pytest.raises(SpecError, match="places 1 multi-token-prediction modules"):
        api.estimate("deepseek-v3", system, layout, work)
    args = [a for c in megatron(load_model("deepseek-v3"), system, layout,
                                load_workload({**work, "mtp": True})).commands for a in c.argv]
    assert args[args.index("--mtp-num-layers") + 1] == "1"
    assert "--mtp-num-layers" not in [a for c in megatron(load_model("deepseek-v3"), system, layout,
                                                          load_workload(work)).commands for a in c.argv]
