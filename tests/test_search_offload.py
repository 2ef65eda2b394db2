"""Offload as search axes (weights, gradients, experts beside optimizer and activations), priced through the
same estimator as one estimate, and shown in the search's output."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpt

from armillary.api import estimate
from armillary.estimate.feasibility import training_checks
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import data_parallel
from armillary.report.records import layout_label, search_rows
from armillary.report.search_tables import search_report
from armillary.search.run import Objective, search
from armillary.search.space import StrategySpace, point_strategy, resolve_axes
from armillary.specs.loading import load_model, load_system
from armillary.specs.memory import MemoryPool
from armillary.specs.strategy import Attention, RankOrder, Recompute, Strategy, ZeroStage
from armillary.specs.workload import Training

MODEL = load_model("llama3-70b")
WORK = Training(seq_len=4096, global_batch=16)
SYSTEM = load_system("dgx-h100", 8).model_copy(update={"memory_pool": MemoryPool(
    kind="pooled", capacity=2**44, bandwidth=512e9, latency=1e-6)})
BASE = Strategy(attention="flash")
FIXED = {"tp": (8,), "pp": (1,), "vpp": (1,), "micro_batch": (1,), "sequence_parallel": (True,),
         "recompute": (Recompute.FULL,), "zero": (ZeroStage.NONE,), "overlap_dp": (True,), "overlap_tp": (False,),
         "overlap_param_gather": (True,), "rank_order": (RankOrder.DP_INNER,), "attention": (Attention.FLASH,)}
OFFLOAD = {"offload_weights": (False, True), "offload_gradients": (False, True), "offload_optimizer": (False, True),
           "offload_activations": (False, True)}


def brute_force(space, k, model=MODEL, system=SYSTEM, base=BASE, workload=WORK, objective=Objective.TIME):
    """Every point one by one through `estimate`: the k best distinct (value, strategy)."""
    axes = resolve_axes(space, model, system.devices, system.devices_per_node, base)
    m, w = ModelArrays.of(model), TrainingArrays.of(workload)
    scored = []
    for i in range(axes.size):
        try:
            strategy = point_strategy(base, axes.point(i))
        except ValueError:  # e.g. gradients offloaded without the optimizer
            continue
        st = StrategyArrays.of(strategy, data_parallel(strategy, system))
        if not all(bool(c.ok) for c in training_checks(m, st, w, system.devices)):
            continue
        r = estimate(model, system, strategy, workload)
        if r.feasible:
            scored.append((float(r.step_time_s if objective is Objective.TIME else r.memory_hbm.total), i,
                           strategy))
    distinct = {}
    for v, _i, st in sorted(scored, key=lambda x: x[:2]):
        distinct.setdefault(v, st)
    return list(distinct.items())[:k]


def test_the_offload_axes_equal_brute_force_and_the_output_shows_them():
    """Llama 3 70B on 8 H100s with a pooled memory: nothing fits without offload (156 GiB of HBM); the search
    over the four offload axes (16 points, 4 of them gradients without the optimizer, never evaluated) finds
    what brute force finds, and its rows, table and one-line labels say what each point offloads."""
    space = StrategySpace(**FIXED, **OFFLOAD)
    result = search(MODEL, SYSTEM, WORK, BASE, space, Objective.TIME, top_k=4, chunk=3)
    expected = brute_force(space, 4)
    assert [c.strategy for c in result.top] == [st for _, st in expected]
    np.testing.assert_allclose([c.step_time_s for c in result.top], [v for v, _ in expected], rtol=1e-9)
    assert result.points == 16 and result.evaluated == 12
    assert all(c.strategy.offload.optimizer for c in result.top)  # the optimizer states alone are 105 GiB
    rows = search_rows(result)
    assert [r["offload"] for r in rows] == [", ".join(n for n, on in (
        ("weights", c.strategy.offload.weights), ("gradients", c.strategy.offload.gradients),
        ("optimizer", c.strategy.offload.optimizer), ("activations", c.strategy.offload.activations)) if on)
        for c in result.top]
    assert "offload: " + rows[0]["offload"] in layout_label(rows[0])
    table = search_report(result, MODEL, SYSTEM, Objective.TIME)[0]
    assert "offload" in [c.header for c in table.columns]
    nothing = search(MODEL, SYSTEM, WORK, BASE, StrategySpace(**FIXED), Objective.TIME, top_k=4)
    assert not nothing.top  # without the axes: the base's (none) offload, out of memory


def test_an_axis_left_out_keeps_the_base_strategys_offload():
    """offload_weights / offload_gradients / offload_experts default to the base's setting (not off), so a
    search from a base that offloads weights keeps doing so; the memory floor prunes with it."""
    base = Strategy(attention="flash", offload={"weights": True, "optimizer": True, "gradients": True})
    space = StrategySpace(**FIXED)
    result = search(MODEL, SYSTEM, WORK, base, space.model_copy(update={"offload_optimizer": (True,)}),
                    Objective.TIME, top_k=1)
    assert result.top and result.top[0].strategy.offload == base.offload


def test_the_expert_offload_axis_on_an_moe_model():
    """Mixtral 8x7B, ep 8 on 8 devices, ZeRO-1 with the optimizer offloaded: offloading the routed experts
    moves a device's 32 experts (3 x 4096 x 14336 parameters each, 2 bytes) to the pool but two layers' worth;
    the leanest point offloads them."""
    model = load_model("mixtral-8x7b")
    space = StrategySpace(**{**FIXED, "tp": (1,), "sequence_parallel": (False,), "zero": (ZeroStage.OPTIMIZER,)},
                          ep=(8,), offload_optimizer=(True,), offload_experts=(False, True))
    work = Training(seq_len=4096, global_batch=16)
    result = search(model, SYSTEM, work, BASE, space, Objective.MEMORY, top_k=2)
    assert result.top[0].strategy.offload.experts and not result.top[1].strategy.offload.experts
    experts = 32 * 3 * 4096 * 14336 * 2
    assert result.top[1].memory_bytes - result.top[0].memory_bytes == pytest.approx(experts * (1 - 2 / 32))
    assert search_rows(result)[0]["offload"] == "experts, optimizer"


def test_the_weight_axis_through_the_arrays_equals_one_estimate_per_point():
    """A small GPT over tp 2 and 4 (several layouts in a block): by memory, the weight-offload points lead and
    equal one estimate per point; by time, their transfers hide behind the step (no stall), so each ties with
    its layout's point without offload, which stands for both."""
    model = gpt(8, 1024, 16)
    space = StrategySpace(**{**FIXED, "tp": (1, 2, 4)}, offload_weights=(False, True))
    work = Training(seq_len=1024, global_batch=64)
    lean = search(model, SYSTEM, work, BASE, space, Objective.MEMORY, top_k=4, chunk=4)
    expected = brute_force(space, 4, model=model, workload=work, objective=Objective.MEMORY)
    assert [c.strategy for c in lean.top] == [st for _, st in expected]
    np.testing.assert_allclose([c.memory_bytes for c in lean.top], [v for v, _ in expected], rtol=1e-9)
    assert lean.top[0].strategy.offload.weights
    fast = search(model, SYSTEM, work, BASE, space, Objective.TIME, top_k=4, chunk=4)
    assert len(fast.top) == 2 and not any(c.strategy.offload.weights for c in fast.top)
