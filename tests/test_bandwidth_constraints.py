"""LIBRA's constraint forms (astra-sim/libra inputs/constraints/*.py) on LIBRA's own inputs: a fixed dimension
(equal bounds), sums of chosen dimensions as == and <=, a partial order, an exact total; each optimum checked
against a brute-force search of the same model."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.errors import SpecError
from armillary.search.bandwidth_options import ConstraintOptions, constraints
from armillary.search.network_bandwidth import (
    BandwidthConstraints,
    BandwidthWorkload,
    DimensionSum,
    minimize_time,
    step_time,
)
from armillary.specs.loading import load_system

GB = 1e9
# LIBRA's GPT-3 workload (inputs/workload/GPT_3.txt, ASTRA-sim 1.0 format, sizes in bytes, compute in ns):
# 684,448,242 ns of compute over all layers and phases; forward: 4 all-reduces of 805,306,368 B; input
# gradient: 4 all-reduces of 805,306,368 B and 2 all-gathers of 50,331,648 B; weight gradient: 1 all-reduce
# of 452,984,832 B. Communicators (inputs/communicator/GPT_3_3d.yml, GPT_3_4d.yml): forward and input
# gradient over [16, -, -] / [4, 4, -, -], weight gradient over [-, 8, 32] / [-, 2, 4, 32].
COMPUTE_NS = 684_448_242
CALLS = [("fwd", "all_reduce", 805_306_368, 4), ("input", "all_reduce", 805_306_368, 4),
         ("input", "all_gather", 50_331_648, 2), ("weight", "all_reduce", 452_984_832, 1)]


def _libra_dims(kind: str, size: float, comm: list[int]) -> list[float]:
    """LIBRA's per-dimension message (src/model/model.py, _apply_dim_time_sub_constraints): an all-reduce
    sends 2 m (c - 1) / c on each dimension of c NPUs, m shrinking by c; an all-gather walks the dimensions
    outermost first, sending m (c - 1), m growing by c."""
    out, m = [0.0] * len(comm), float(size)
    order = range(len(comm) - 1, -1, -1) if kind == "all_gather" else range(len(comm))
    for d in order:
        c = comm[d]
        if c < 0:
            continue
        if kind == "all_gather":
            out[d], m = m * (c - 1), m * c
        else:
            out[d], m = 2 * m * (c - 1) / c, m / c
    return out


def libra_gpt3(dims: int) -> BandwidthWorkload:
    """LIBRA's no_overlap training loop (inputs/training_loop/no_overlap.py): compute plus every collective,
    each at its slowest dimension (coll_time = max over dims): bandwidth in bytes/s, time in s."""
    tp, dp = ([16, -1, -1], [-1, 8, 32]) if dims == 3 else ([4, 4, -1, -1], [-1, 2, 4, 32])
    rows = [_libra_dims(kind, size, dp if phase == "weight" else tp)
            for phase, kind, size, count in CALLS for _ in range(count)]
    return BandwidthWorkload(COMPUTE_NS * 1e-9, np.array(rows), pipelined=True)


def test_libra_multiple_constraints_on_its_own_inputs() -> None:
    """LIBRA's default configuration (inputs/libra_configs.py): 4-D network, GPT-3, multiple_constraints:
    sum == 1000, bw0 == 500, bw0 >= bw1 >= bw2, bw2 + bw3 == 200 (GB/s). That leaves bw1 = 300 and one free
    direction (bw2, 200 - bw2): the optimum matches a 200,001-point search along it, and every equality holds
    to the digit (no +-0.001 workaround)."""
    work = libra_gpt3(4)
    lower, upper = np.array([500, 1e-3, 1e-3, 1e-3]) * GB, np.array([500, 1000, 1000, 1000]) * GB
    cons = BandwidthConstraints(lower, upper, total=1000 * GB, total_equal=True,
                                sums=(DimensionSum((2, 3), 200 * GB, equal=True),), order=((0, 1), (1, 2)))
    best = minimize_time(work, cons)
    b = best.bandwidth / GB
    assert b[0] == pytest.approx(500, abs=1e-9) and b.sum() == pytest.approx(1000, abs=1e-9)
    assert b[2] + b[3] == pytest.approx(200, abs=1e-9) and b[1] == pytest.approx(300, abs=1e-9)
    assert b[0] >= b[1] >= b[2]
    g = np.linspace(1e-3, 200 - 1e-3, 200_001) * GB
    grid = np.stack([np.full_like(g, 500 * GB), np.full_like(g, 300 * GB), g, 200 * GB - g], axis=-1)
    times = step_time(work, grid)
    assert float(times.min()) * (1 - 1e-7) <= best.step_time_s <= float(times.min())
    assert b[2] == pytest.approx(float(grid[times.argmin(), 2]) / GB, abs=2e-3)
    assert b == pytest.approx([500.0, 300.0, 151.18, 48.82], abs=0.01)


def test_libra_total_500_three_dimensions_matches_a_grid() -> None:
    """LIBRA's 3-D network (Ring16 x FullyConnected8 x Switch32) with total_bw_500gbps (sum == 500) on its
    GPT-3 inputs: the optimum is a 2-D search's best, most bandwidth on the ring."""
    work = libra_gpt3(3)
    cons = BandwidthConstraints(np.full(3, 1e-3 * GB), np.full(3, 500 * GB), total=500 * GB, total_equal=True)
    best = minimize_time(work, cons)
    assert best.bandwidth.sum() == pytest.approx(500 * GB, rel=1e-12)
    x, y = np.meshgrid(np.linspace(300, 480, 721) * GB, np.linspace(1, 180, 717) * GB)
    z = 500 * GB - x - y
    ok = z > 0
    grid = step_time(work, np.stack([x[ok], y[ok], z[ok]], axis=-1))
    assert best.step_time_s <= float(grid.min()) * (1 + 1e-6)
    assert best.bandwidth / GB == pytest.approx([397.55, 89.99, 12.45], abs=0.05)


def test_a_fixed_dimension_by_equal_bounds_needs_no_epsilon() -> None:
    """Equal bounds fix a dimension exactly; the old workaround (a +-0.001 GB/s box) gives the same optimum."""
    work = libra_gpt3(3)
    fixed = BandwidthConstraints(np.array([250, 1, 1]) * GB, np.array([250, 500, 500]) * GB, total=500 * GB)
    boxed = BandwidthConstraints(np.array([249.999, 1, 1]) * GB, np.array([250.001, 500, 500]) * GB,
                                 total=500 * GB)
    a, b = minimize_time(work, fixed), minimize_time(work, boxed)
    assert a.bandwidth[0] == 250 * GB
    assert a.bandwidth / GB == pytest.approx(b.bandwidth / GB, abs=0.01)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=1e-5)  # the box's optimum sits at 250.001


def test_a_sum_of_dimensions_as_at_most_and_as_exactly() -> None:
    """Traffic mostly on dimension 0: with dims 1 + 2 <= 300 GB/s the sum stays below 300 (slack); with
    == 300 it is exactly 300, and the step is no faster."""
    work = BandwidthWorkload(0.0, np.array([[100.0, 1.0, 1.0]]) * GB, pipelined=False)
    base = dict(lower=np.full(3, GB), upper=np.full(3, 500 * GB), total=500 * GB)
    at_most = minimize_time(work, BandwidthConstraints(**base, sums=(DimensionSum((1, 2), 300 * GB),)))
    exactly = minimize_time(work, BandwidthConstraints(**base, sums=(DimensionSum((1, 2), 300 * GB, True),)))
    assert at_most.bandwidth[1:].sum() < 150 * GB
    assert exactly.bandwidth[1:].sum() == pytest.approx(300 * GB, rel=1e-12)
    assert exactly.step_time_s >= at_most.step_time_s
    # the closed form of the free case, min sum a_i / b_i with sum b = B: b_i proportional to sqrt(a_i)
    assert at_most.bandwidth / GB == pytest.approx(500 * np.array([10, 1, 1]) / 12, rel=1e-3)


def test_a_partial_order_binds_only_its_pairs() -> None:
    """Only b0 >= b2 is asked: dimension 1 (the heaviest traffic) may exceed dimension 0, and dimension 2,
    wanting more than 0, is held at b0 (unlike the full chain b0 >= b1 >= b2)."""
    work = BandwidthWorkload(0.0, np.array([[1.0, 9.0, 4.0]]) * GB, pipelined=False)
    base = dict(lower=np.full(3, GB), upper=np.full(3, 600 * GB), total=600 * GB)
    partial = minimize_time(work, BandwidthConstraints(**base, order=((0, 2),)))
    chain = minimize_time(work, BandwidthConstraints(**base, ordered=True))
    b = partial.bandwidth
    assert b[1] > b[0] and b[0] == pytest.approx(b[2], rel=1e-4)
    assert partial.step_time_s < chain.step_time_s
    # by hand: b0 = b2 = x, b1 = 600 - 2x, min 5/x + 9/(600 - 2x): 5 (600 - 2x)^2 = 18 x^2
    x = 600 / (2 + np.sqrt(18 / 5))
    assert b / GB == pytest.approx([x, 600 - 2 * x, x], rel=1e-3)


def test_contradictory_or_malformed_constraints_are_clear_errors() -> None:
    work = BandwidthWorkload(0.0, np.ones((1, 3)) * GB)
    with pytest.raises(ValueError, match="no feasible bandwidth"):
        minimize_time(work, BandwidthConstraints(np.array([300, 1, 1]) * GB, np.array([300, 500, 500]) * GB,
                                                 total=500 * GB, sums=(DimensionSum((1, 2), 300 * GB, True),)))
    with pytest.raises(ValueError, match="two different dimensions"):
        minimize_time(work, BandwidthConstraints(np.full(3, GB), np.full(3, 9 * GB), order=((1, 1),)))
    system = load_system("dgx-h100", 16)
    with pytest.raises(SpecError, match=r"--fix: dimension 'nvl' is none of .*\(or 0..1\)"):
        constraints(ConstraintOptions(fix=("nvl=100GB/s",)), system)
    with pytest.raises(SpecError, match="--sum '0\\+1 > 5GB/s'"):
        constraints(ConstraintOptions(sums=("0+1 > 5GB/s",)), system)
    with pytest.raises(SpecError, match="--total-exact needs --total"):
        constraints(ConstraintOptions(total_exact=True), system)


def test_options_read_libra_forms() -> None:
    system = load_system("dgx-h100", 16)
    inner = system.network[0].name
    cons = constraints(ConstraintOptions(total="500GB/s", total_exact=True, fix=(f"{inner}=400GB/s",),
                                         sums=("0+1<=480GB/s",), order=("0>=1",)), system)
    assert cons.lower[0] == cons.upper[0] == 400 * GB and cons.total_equal
    assert cons.sums == (DimensionSum((0, 1), 480 * GB, False),) and cons.order == ((0, 1),)
    e_rows, e = cons.equalities()
    assert e_rows.tolist() == [[1.0, 0.0], [1.0, 1.0]] and e.tolist() == [400 * GB, 500 * GB]
