"""The 2-D tensor-parallel layout (estimate/tp_layouts.py; docs/tp-layouts.md): SUMMA's per-GEMM volume by
hand, its step schedule against a step-by-step simulation, how much TP communication it hides on Calculon's
Megatron-1T best strategy (tp 8 pp 16 dp 24 on 3,072 A100, micro-batch 2, vpp 8, attention-only recompute),
its memory, the refusals, and one sweep of both layouts against two single estimates."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.api import run_estimate
from armillary.errors import SpecError
from armillary.estimate.kernels import layer_kernels
from armillary.estimate.result import ParallelDimension
from armillary.estimate.tp_layouts import GemmShape, layer_gemm_shapes, summa_exposed, summa_layer, tp_hidden_share
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.report.deploy import deployment
from armillary.report.launch import Target
from armillary.specs.communication import Collective
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Training
from armillary.workload.transformer import ends_forward, layer_forward, tp_message_bytes

# Calculon's optimum for Megatron-1T on 3,072 A100-80G (research note 48 §2.3): tp 8 x pp 16 x dp 24, mbs 2,
# interleave 8, attention-only recompute, TP overlap; 3,072-sample batches of 2,048 tokens
BEST = {"tp": 8, "pp": 16, "vpp": 8, "micro_batch": 2, "recompute": "selective", "zero": 1,
        "overlap": {"tp_comm": True}}
TP4_2D = {**BEST, "tp": 4, "pp": 32, "vpp": 4, "tp_layout": "2d"}  # 2 x 2 grid, pp doubled: 3,072 devices
WORKLOAD = {"seq_len": 2048, "global_batch": 3072}


def hidden(strategy: dict) -> float:
    est = run_estimate("megatron-1t", "dgx-a100", strategy, WORKLOAD, gpus=3072)
    return float(tp_hidden_share(est.breakdown.tp_exposed, est.communication))


def test_summa_volume_by_hand():
    """Megatron-1T's MLP up-projection on a 2 x 2 grid, micro-batch 2 x 2,048 tokens: each rank receives
    (mk + kn) / q = (4096 x 25600 + 25600 x 102400) / 2 = (104,857,600 + 2,621,440,000) / 2 = 1,363,148,800
    elements per SUMMA product."""
    assert float(GemmShape(4096, 25600, 102400).summa_elements(2)) == 1_363_148_800


def test_layer_shapes_and_transfers_match_the_formula():
    """The four GEMMs' whole shapes come back from the per-rank ops, and the forward's broadcasts move
    w (mk + kn) / q per GEMM: summed over QKV (k 25600, n 76800), output (25600, 25600), MLP in (25600,
    102400) and out (102400, 25600) at m = 4096, w = 2 bytes, q = 2: mk 734,003,200 + kn 7,864,320,000 =
    8,598,323,200 elements / 2 x 2 bytes = 8,598,323,200 bytes; the two backward products move as much each."""
    m = ModelArrays.of(load_model("megatron-1t"))
    fw = layer_forward(m, 2, 2048, 4, 0, 2.0)
    shapes = [(float(g.m), float(g.k), float(g.n)) for g in layer_gemm_shapes(fw, 4)]
    assert shapes == [(4096, 25600, 76800), (4096, 25600, 25600), (4096, 25600, 102400), (4096, 102400, 25600)]
    system = load_system("dgx-a100", 3072)
    st = StrategyArrays.of(Strategy(**{**TP4_2D, "summa_steps": 8}), 24)
    kt = layer_kernels(fw, ends_forward(m, 2, 2048, 4, 2.0), None, system.device, st.precision, st.attention)
    layer = summa_layer(fw, kt, st, system, tp_message_bytes(m, 2, 2048, 2.0))

    def moved(calls, op):
        return sum(float(c.per_step * c.message_bytes) for c in calls if c.operation is op)

    assert moved(layer.forward_calls, Collective.BROADCAST) == pytest.approx(8_598_323_200)
    backward = moved(layer.backward_calls, Collective.BROADCAST) + moved(layer.backward_calls, Collective.REDUCE)
    assert backward == pytest.approx(2 * 8_598_323_200)
    assert all(float(c.per_step) == 8 for c in layer.forward_calls if c.operation is Collective.BROADCAST)


def step_schedule(comm: float, gemm: float, steps: int) -> float:
    """Double-buffered SUMMA step by step: step t's transfer starts once step t - 1's has ended and the buffer
    it refills is free (step t - 2's GEMM done); step t's GEMM starts when its transfer and step t - 1's GEMM
    are done. Returns the time past the GEMMs."""
    g = gemm / steps
    arrived, gemm_end = [0.0] * steps, [0.0] * steps
    for t in range(steps):
        start = max(arrived[t - 1] if t else 0.0, gemm_end[t - 2] if t >= 2 else 0.0)
        arrived[t] = start + comm
        gemm_end[t] = max(arrived[t], gemm_end[t - 1] if t else 0.0) + g
    return gemm_end[-1] - gemm


@settings(max_examples=200, deadline=None)
@given(comm=hs.floats(0.0, 10.0), gemm=hs.floats(0.0, 10.0), steps=hs.integers(2, 64))
def test_summa_exposed_matches_its_step_schedule(comm, gemm, steps):
    assert float(summa_exposed(comm, gemm, steps, 1.0)) == pytest.approx(step_schedule(comm, gemm, steps), abs=1e-9)


def test_summa_exposed_by_hand():
    """4 steps over 8 s of GEMM (2 s each): 1 s transfers leave the first exposed (1 s); 3 s transfers add
    3 + 3 x (3 - 2) = 6 s; blocking broadcasts expose all 4 x 3 = 12 s."""
    assert float(summa_exposed(1.0, 8.0, 4, 1.0)) == 1.0
    assert float(summa_exposed(3.0, 8.0, 4, 1.0)) == 6.0
    assert float(summa_exposed(3.0, 8.0, 4, 0.0)) == 12.0


def test_two_d_hides_at_least_95_percent_where_the_hiding_condition_holds():
    """On the 1T best strategy's devices, a 2 x 2 grid inside the NVLink node meets the hiding condition
    q <= 2 m n k beta / (w F (mk + kn)) (research note 48 §3.2) for every GEMM: each step's transfer is shorter
    than its GEMM, so only the first step stays exposed. With 32 SUMMA steps that is 1/32 of the GEMM transfers,
    plus the norms' statistics all-reduces and the ends' all-reduces: >= 95% hidden. With Colossal-AI's q steps
    one of the two steps is exposed: about 50%. Blocking broadcasts hide nothing."""
    assert hidden({**TP4_2D, "summa_steps": 32}) >= 0.95
    assert hidden(TP4_2D) == pytest.approx(0.5, abs=0.02)
    assert hidden({**TP4_2D, "overlap": {"tp_comm": False}}) == pytest.approx(0.0, abs=1e-9)


def test_two_d_hides_less_where_the_grid_columns_cross_nodes():
    """tp 16 = 4 x 4 on 8-GPU DGX A100 nodes: a grid column (ranks 4 apart) spans two nodes, so each step's
    weight panel crosses InfiniBand and outlasts its GEMM: the condition fails and most of it stays exposed."""
    assert hidden({**BEST, "tp": 16, "pp": 8, "vpp": 16, "micro_batch": 4, "tp_layout": "2d", "summa_steps": 32}) < 0.6


def test_one_d_overlap_on_the_1t_best_strategy():
    """For comparison, 1-D with sequence parallelism: Transformer Engine's userbuffers leave the bulk overlaps'
    and the pipelined reduce-scatters' excess exposed; ring exchange (async TP) hides nearly all."""
    userbuffers = hidden({**BEST, "sequence_parallel": True})
    ring = hidden({**BEST, "sequence_parallel": True, "overlap": {"tp_comm": True, "tp_comm_method": "ring"}})
    assert 0.5 < userbuffers < ring
    assert ring > 0.95


def test_two_d_activations_are_split_over_the_grid():
    """Optimus keeps every activation split q x q: the 2-D layout stores what the 1-D layout with sequence
    parallelism stores at the same tp (norm inputs, dropout masks and layer inputs split by tp too)."""
    two_d = run_estimate("megatron-1t", "dgx-a100", TP4_2D, WORKLOAD, gpus=3072)
    one_d_sp = run_estimate("megatron-1t", "dgx-a100", {**TP4_2D, "tp_layout": "1d", "sequence_parallel": True},
                            WORKLOAD, gpus=3072)
    one_d = run_estimate("megatron-1t", "dgx-a100", {**TP4_2D, "tp_layout": "1d"}, WORKLOAD, gpus=3072)
    assert float(two_d.memory_hbm.activations) == pytest.approx(float(one_d_sp.memory_hbm.activations))
    assert float(two_d.memory_hbm.activations) < float(one_d.memory_hbm.activations)
    assert not any(c.dimension is ParallelDimension.SP for c in two_d.communication)


@pytest.mark.parametrize(("fields", "message"), [
    ({"tp": 8}, "tp = q x q"),
    ({"tp": 4, "micro_batch": 1}, "divide micro_batch"),
    ({"tp": 4, "micro_batch": 2, "sequence_parallel": True}, "excludes sequence_parallel"),
    ({"tp": 4, "micro_batch": 2, "cp": 2}, "context parallelism"),
    ({"tp": 4, "micro_batch": 2, "ep": 2}, "expert layers"),
    ({"tp": 4, "micro_batch": 2, "overlap": {"tp_comm_method": "ring"}}, "tp_comm_method 'ring'"),
    ({"tp": 4, "micro_batch": 2, "summa_steps": 3}, "multiple of q"),
])
def test_refused_combinations_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        Strategy(tp_layout="2d", **fields)


def test_summa_steps_need_the_2d_layout():
    with pytest.raises(ValueError, match="summa_steps needs tp_layout '2d'"):
        Strategy(tp=4, summa_steps=4)


def test_moe_models_and_megatron_launch_are_refused():
    with pytest.raises(ValueError, match="tp_layout '2d' is not defined for MoE layers"):
        run_estimate("mixtral-8x7b", "dgx-h100", {"tp": 4, "micro_batch": 2, "tp_layout": "2d"},
                     {"seq_len": 4096, "global_batch": 64}, gpus=8)
    with pytest.raises(SpecError, match="no Megatron-LM launch"):
        deployment(Target.MEGATRON, load_model("megatron-1t"), load_system("dgx-a100", 3072),
                   Strategy(**TP4_2D), Training(**WORKLOAD))


def test_one_sweep_prices_both_layouts_as_two_estimates():
    """StrategyArrays carries the layout as an array: a sweep over (1d, 2d) gives each point's single estimate."""
    m, system, w = load_model("megatron-1t"), load_system("dgx-a100", 3072), Training(**WORKLOAD)
    points = [StrategyArrays.of(Strategy(**{**TP4_2D, "tp_layout": layout, "summa_steps": steps}), 24)
              for layout, steps in (("1d", None), ("2d", 8))]
    swept = replace(points[0], **{name: np.array([getattr(p, name) for p in points])
                                  for name in ("tp_layout", "summa_steps")})
    sweep = estimate_training(ModelArrays.of(m), swept, TrainingArrays.of(w), system)
    for i, point in enumerate(points):
        one = estimate_training(ModelArrays.of(m), point, TrainingArrays.of(w), system)
        assert sweep.step_time_s[i] == pytest.approx(float(one.step_time_s), rel=1e-9)
        assert sweep.breakdown.tp_exposed[i] == pytest.approx(float(one.breakdown.tp_exposed), rel=1e-9)
        assert sweep.memory_hbm.total[i] == pytest.approx(float(one.memory_hbm.total), rel=1e-9)


def test_more_steps_hide_more_but_run_shallower_gemms():
    """Each SUMMA step is its own, k / steps deep GEMM, priced through the device's efficiency curve: more
    steps expose less (1/steps of the transfers) but take longer to compute; q steps cost what the 1-D GEMMs do."""
    def run(steps):
        return run_estimate("megatron-1t", "dgx-a100", {**TP4_2D, "summa_steps": steps}, WORKLOAD, gpus=3072)

    q, few, many = run(None), run(8), run(128)
    one_d = run_estimate("megatron-1t", "dgx-a100", {**TP4_2D, "tp_layout": "1d", "sequence_parallel": True},
                         WORKLOAD, gpus=3072)
    assert float(q.breakdown.forward_backward) == pytest.approx(float(one_d.breakdown.forward_backward), rel=0.01)
    assert float(many.breakdown.forward_backward) > float(few.breakdown.forward_backward)
    assert float(many.breakdown.tp_exposed) < float(few.breakdown.tp_exposed) < float(q.breakdown.tp_exposed)


def test_the_rules_mask_a_sweep_as_they_judge_one_strategy():
    """plan.rules.tp_layout_checks takes arrays (a search's points) as it takes one strategy's numbers."""
    from armillary.plan.rules import tp_layout_checks

    points = [(1, 4, 2, 0), (1, 8, 2, 0), (1, 16, 2, 8), (0, 16, 2, 0), (1, 4, 1, 3)]  # 2d?, tp, micro-batch, steps
    two, tp, mb, steps = (np.array(column, dtype=float) for column in zip(*points, strict=True))
    zeros, ones = np.zeros(len(points)), np.ones(len(points))
    swept = tp_layout_checks(two, tp, mb, zeros, ones, ones, zeros, zeros, steps)
    for i, (t2, t, b, s) in enumerate(points):
        single = tp_layout_checks(t2, t, b, 0.0, 1.0, 1.0, 0.0, 0.0, s)
        assert [bool(c.ok[i]) for c in swept] == [bool(c.ok) for c in single]
    assert [all(bool(c.ok[i]) for c in swept) for i in range(len(points))] == [True, False, False, True, False]


def test_two_d_pipeline_sends_carry_the_ranks_block_without_a_regather():
    """Each rank of the q x q grid holds a 1/tp block of the stage's output, so it sends that block as is,
    as 1-D with sequence parallelism does, with no all-gather after the receive."""
    two_d = run_estimate("megatron-1t", "dgx-a100", TP4_2D, WORKLOAD, gpus=3072)
    one_d_sp = run_estimate("megatron-1t", "dgx-a100", {**TP4_2D, "tp_layout": "1d", "sequence_parallel": True},
                            WORKLOAD, gpus=3072)
    def pp_bytes(est):
        return sorted(float(c.message_bytes) for c in est.communication if c.dimension is ParallelDimension.PP)

    assert pp_bytes(two_d) and pp_bytes(two_d) == pytest.approx(pp_bytes(one_d_sp))
