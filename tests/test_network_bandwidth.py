"""Per-dimension bandwidth optimization (LIBRA-style): closed forms, brute-force grids, constraints."""

from __future__ import annotations

import numpy as np
import pytest

from armillary import api
from armillary.plan.placement import Placement
from armillary.search.bandwidth_workload import dimension_bytes, workload_from_estimate
from armillary.search.network_bandwidth import (
    BandwidthConstraints,
    BandwidthObjective,
    BandwidthWorkload,
    minimize_time,
    optimize,
    step_time,
)
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system
from armillary.specs.strategy import Strategy

GB = 1e9


def _grid_best(work: BandwidthWorkload, total: float, low: float, n: int = 500) -> float:
    g = np.linspace(low, total - 2 * low, n)
    x, y = np.meshgrid(g, g)
    z = total - x - y
    ok = z >= low
    b = np.stack([x[ok], y[ok], z[ok]], axis=-1)
    return float(step_time(work, b).min())


@pytest.mark.parametrize("pipelined", [True, False])
def test_matches_a_brute_force_grid(pipelined: bool) -> None:
    rng = np.random.default_rng(7)
    work = BandwidthWorkload(0.05, rng.uniform(0, 2 * GB, (8, 3)), pipelined)
    cons = BandwidthConstraints(np.full(3, GB), np.full(3, 500 * GB), total=500 * GB)
    best = minimize_time(work, cons)
    grid = _grid_best(work, 500 * GB, GB)
    assert best.step_time_s <= grid * 1.01
    assert best.step_time_s >= grid * 0.99
    assert best.bandwidth.sum() <= 500 * GB * (1 + 1e-9)


def test_unpipelined_closed_form() -> None:
    """min sum a_i / b_i with sum b_i = B: b_i = B sqrt(a_i) / sum sqrt(a_j) (Lagrange), T = (sum sqrt a)^2 / B."""
    a = np.array([9.0, 4.0, 1.0]) * GB
    work = BandwidthWorkload(0.0, a[None, :], pipelined=False)
    best = minimize_time(work, BandwidthConstraints(np.full(3, 1e6), np.full(3, 600 * GB), total=600 * GB))
    assert best.bandwidth / GB == pytest.approx([300, 200, 100], rel=1e-3)
    assert best.step_time_s == pytest.approx(36 * GB / (600 * GB), rel=1e-6)


def test_pipelined_single_collective_equalizes_dimensions() -> None:
    """A pipelined collective runs at its slowest dimension: the optimum makes every a_i / b_i equal."""
    a = np.array([6.0, 3.0, 1.0]) * GB
    work = BandwidthWorkload(0.0, a[None, :], pipelined=True)
    best = minimize_time(work, BandwidthConstraints(np.full(3, 1e6), np.full(3, 500 * GB), total=500 * GB))
    assert best.bandwidth / GB == pytest.approx([300, 150, 50], rel=1e-3)


def test_ordering_and_budget_hold() -> None:
    a = np.array([1.0, 5.0, 2.0]) * GB
    work = BandwidthWorkload(0.0, a[None, :], pipelined=False)
    cost = np.array([1.0, 2.0, 4.0]) / GB
    cons = BandwidthConstraints(np.full(3, GB), np.full(3, 500 * GB), total=500 * GB, ordered=True,
                                cost_per_bw=cost, budget=600.0)
    best = minimize_time(work, cons)
    assert best.bandwidth[0] >= best.bandwidth[1] * (1 - 1e-6) >= best.bandwidth[2] * (1 - 2e-6)
    assert float(cost @ best.bandwidth) <= 600.0 * (1 + 1e-6)
    unconstrained = minimize_time(work, BandwidthConstraints(np.full(3, GB), np.full(3, 500 * GB), total=500 * GB))
    assert best.step_time_s >= unconstrained.step_time_s


def test_time_cost_objective_is_no_worse_than_its_levels() -> None:
    a = np.array([4.0, 1.0]) * GB
    work = BandwidthWorkload(0.2, a[None, :], pipelined=False)
    cost = np.array([1.0, 3.0]) / GB
    cons = BandwidthConstraints(np.full(2, GB), np.full(2, 400 * GB), cost_per_bw=cost)
    best = optimize(work, cons, BandwidthObjective.TIME_COST, points=32)
    fast = minimize_time(work, cons)  # all the bandwidth: fastest, dearest
    assert best.step_time_s * best.cost <= fast.step_time_s * fast.cost


def test_dimension_bytes_by_hand() -> None:
    """All-reduce of n over 4 x 2 ranks: dimension 0 sends 2 (3/4) n, dimension 1 2 (1/2) n / 4."""
    group = Placement((4.0, 2.0))
    n = 1024.0
    assert dimension_bytes(Collective.ALL_REDUCE, n, group) == pytest.approx([1536.0, 256.0])
    assert dimension_bytes(Collective.ALL_GATHER, n, group) == pytest.approx([768.0, 128.0])
    assert dimension_bytes(Collective.SEND_RECV, n, Placement((1.0, 2.0))) == pytest.approx([0.0, n])


def test_libra_style_3d_network_favours_the_inner_dimension() -> None:
    """Ring16 x FullyConnected8 x Switch32 (LIBRA's example shape), GPT-3 with TP over the ring: the optimum
    gives the ring most of 500 GB/s and beats the equal split (LIBRA: [392.67, 94.28, 13.05] GB/s)."""
    dims = [("ring", 16, {"algorithms": ["ring"]}), ("fully_connected", 8, {"links": 7}), ("switch", 32, {})]
    system = load_system({"name": "libra-3d", "device": "a100-sxm4-80gb", "collectives": "hierarchical",
                          "network": [{"name": k, "kind": k, "size": s, "bandwidth": "166.7 GB/s",
                                       "latency": "0.5 us", "efficiency": 1.0, **extra} for k, s, extra in dims]},
                         4096)
    strategy = Strategy(tp=16, pp=8, micro_batch=1, recompute="selective", sequence_parallel=True, zero=1)
    result = api.estimate("gpt3-175b", system, strategy, {"seq_len": 2048, "global_batch": 4096})
    work = workload_from_estimate(result, system, strategy)
    best = minimize_time(work, BandwidthConstraints(np.full(3, GB), np.full(3, 500 * GB), total=500 * GB))
    equal = float(step_time(work, np.full(3, 500 * GB / 3)))
    assert best.bandwidth[0] > best.bandwidth[1] > best.bandwidth[2]
    assert best.step_time_s < equal


def test_refine_with_the_full_estimator_never_worsens_and_keeps_constraints() -> None:
    from armillary.search.bandwidth_refine import estimator_step, refine
    from armillary.specs.loading import load_model, load_workload

    system = load_system("dgx-a100", 64)
    strategy = Strategy(tp=8, pp=2, micro_batch=1, sequence_parallel=True)
    model, workload = load_model("gpt3-175b"), load_workload({"seq_len": 2048, "global_batch": 64})
    cons = BandwidthConstraints(np.full(2, GB), np.full(2, 325 * GB), total=325 * GB, ordered=True)
    start = np.array([300.0, 25.0]) * GB
    r = refine(model, system, strategy, workload, start, cons, budget=60)
    assert r.start_step_time_s == pytest.approx(estimator_step(model, system, strategy, workload, start))
    assert r.step_time_s <= r.start_step_time_s
    assert r.bandwidth.sum() <= 325 * GB * (1 + 1e-9) and r.bandwidth[0] >= r.bandwidth[1]
