"""The array path of comm/compose.py (issue 47: search throughput) gives, bit for bit, what each point of a
sweep gets composed alone: a sweep is composed over its distinct points on one axis
(comm/distinct_points.Flattened), the pipelined phases' options are stacked (comm/joint_choice.Stack) and the
joint choice tries many caps at once (joint_choice.joint)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from armillary.comm import compose_memo, joint_choice, phases
from armillary.comm.algorithms import DimensionCost
from armillary.comm.collectives import collective
from armillary.comm.distinct_points import distinct_columns
from armillary.comm.joint_choice import Stack, fastest_together, frontier
from armillary.plan.placement import Placement
from armillary.specs.communication import Collective, Composition
from armillary.specs.loading import load_system

SIZES = np.array([3e3, 2.5e5, 6e6, 1.3e8, 4e9])


def _groups(system_name: str, spanned: int = 2) -> tuple[object, list[tuple[float, ...]]]:
    """The system and groups of 1, 2 or a dimension's size of ranks per dimension that span at least
    `spanned` dimensions."""
    system = load_system(system_name, 256)
    sizes = [d.size for d in system.network]
    spans = [s for s in itertools.product(*[(1.0, 2.0, float(k)) for k in sizes]) if sum(x > 1 for x in s) >= spanned]
    return system, spans


@pytest.mark.parametrize("name", ["dgx-a100", "gb200-nvl72", "trn2-16", "astra-3d"])
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.ALL_TO_ALL])
@pytest.mark.parametrize("composition", [Composition.AUTO, Composition.PIPELINED, Composition.SEQUENTIAL])
def test_a_sweep_over_sizes_and_groups_is_each_point_alone(name, op, composition):
    """A (sizes x groups) sweep, with repeated points, against every point costed as one configuration."""
    _each_point_alone(name, op, composition, 2)


@pytest.mark.parametrize("name", ["dgx-a100", "gb200-nvl72", "trn2-16", "mi300x-8"])
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.BROADCAST])
def test_a_sweep_mixing_groups_inside_one_dimension_is_each_point_alone(name, op):
    """A group inside one dimension is costed by `on_one_dimension` in a sweep too, not as a composition
    with one active dimension (gb200-nvl72, all-reduce of 3 kB over 4 ranks across racks: 21.644 us in a
    mixed sweep, 21.624 us alone; up to 59% apart on other presets before)."""
    _each_point_alone(name, op, Composition.AUTO, 1)


def _each_point_alone(name: str, op: Collective, composition: Composition, spanned: int) -> None:
    system, spans = _groups(name, spanned)
    swept = Placement(tuple(np.array([s[i] for s in spans] * 2)[None, :] for i in range(len(spans[0]))))
    try:
        r = collective(op, SIZES[:, None], swept, system, composition=composition)
    except ValueError:  # a pinned composition that runs nowhere in the sweep: refused at every point alone
        for n, s in itertools.product(SIZES, spans):
            with pytest.raises(ValueError, match="cannot run"):
                collective(op, float(n), Placement(s), system, composition=composition)
        return
    time = np.broadcast_to(r.cost.time, (len(SIZES), 2 * len(spans)))
    outer = np.broadcast_to(r.cost.scale_out_bytes, time.shape)
    for (a, n), (b, s) in itertools.product(enumerate(SIZES), enumerate(spans * 2)):
        try:
            one = collective(op, float(n), Placement(s), system, composition=composition)
        except ValueError:  # a pinned composition refused alone is infinite in a sweep
            assert time[a, b] == np.inf, (n, s)
            continue
        assert float(one.cost.time) == time[a, b], (n, s)
        assert float(one.cost.scale_out_bytes) == outer[a, b], (n, s)


def test_the_joint_choice_over_caps_in_batches_is_the_same(monkeypatch):
    """Bounded memory: caps tried a few at a time pick what all at once picks (ties to the first cap)."""
    rng = np.random.default_rng(47)
    points = 40
    choices = [[(DimensionCost(f + b, 0.0, j, 0, f),) for j, (f, b) in
                enumerate(rng.choice([0.5, 1.0, 2.0, 3.0, np.inf], (int(rng.integers(2, 6)), 2, points)))]
               for _ in range(3)]
    k = rng.choice([1.0, 4.0, 64.0], points)
    at_once = fastest_together(choices, k)
    monkeypatch.setattr(joint_choice, "_JOINT_ELEMENTS", 1)  # one cap per batch
    one_by_one = fastest_together(choices, k)
    for a, b in zip(at_once, one_by_one, strict=True):
        np.testing.assert_array_equal(a[0].algorithm, b[0].algorithm)
    for p in range(points):  # and each point is the scalar joint choice
        alone = fastest_together([[tuple(DimensionCost(*(np.asarray(x).flat[p] if np.ndim(x) else x
                                                         for x in (c.time, c.sent_bytes, c.algorithm, c.protocol,
                                                                   c.fixed))) for c in o) for o in options]
                                   for options in choices], float(k[p]))
        assert [int(o[0].algorithm) for o in alone] == [int(np.asarray(d[0].algorithm)[p]) for d in at_once]


@pytest.mark.parametrize("seed", range(4))
def test_the_stacked_frontier_keeps_what_the_frontier_keeps(seed):
    rng = np.random.default_rng(seed)
    options = [(DimensionCost(f + b, 0.0, j, 0, f),) for j, (f, b) in
               enumerate(rng.choice([0.0, 1.0, 2.0, np.inf], (12, 2, 3)))]
    kept = [int(o[0].algorithm) for o in frontier(options)]
    stack = Stack.of(options, (3,)).frontier()
    assert stack.fields[2, 0, :, 0].astype(int).tolist() == kept


def test_distinct_points_are_equal_bit_for_bit():
    columns = np.array([[0.0, -0.0, 0.0, np.nan, np.nan, 1.0], [2.0, 2.0, 2.0, 3.0, 3.0, 2.0]])
    distinct, inverse = distinct_columns(columns)
    assert distinct.shape[1] == 4 and inverse is not None  # -0.0 is not 0.0; one NaN is the other
    back = distinct[:, inverse]
    assert np.array_equal(back.view(np.int64), columns.view(np.int64))
    assert distinct_columns(columns[:, :2])[1] is None  # all distinct: nothing to index back


def _fields(r: object) -> list[np.ndarray]:
    found = [r.cost.time, r.cost.scale_up_bytes, r.cost.scale_out_bytes, r.composition]  # type: ignore[attr-defined]
    for d in r.dimensions:  # type: ignore[attr-defined]
        found += [d.time, d.sent_bytes, d.algorithm, d.protocol, d.fixed]
    return [np.asarray(x) for x in found]


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "gb200-nvl72", "mi300x-8", "dgx-superpod-h100"])
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.BROADCAST])
def test_leaving_out_a_pipelined_composition_that_cannot_win_changes_nothing(monkeypatch, name, op):
    """NCCL's pipelined phases are not built where they are never faster than its flat ring
    (`phases.never_faster_pipelined`): every field of sweeps mixing groups of one, groups inside a node and groups
    across nodes, and of each point alone, is what building them gives."""
    system, spans = _groups(name, 0)
    swept = Placement(tuple(np.array([s[i] for s in spans])[None, :] for i in range(len(spans[0]))))
    cases = [(SIZES[:, None], swept)] + [(float(n), Placement(s)) for n in SIZES[::2] for s in spans]
    quick = [_fields(collective(op, n, g, system)) for n, g in cases]
    monkeypatch.setattr(phases, "_SKIP_CHECK_OFF", True)
    for (n, g), fields in zip(cases, quick, strict=True):
        for a, b in zip(fields, _fields(collective(op, n, g, system)), strict=True):
            np.testing.assert_array_equal(*np.broadcast_arrays(a, b))


def test_a_search_s_blocks_share_their_collectives_exactly(monkeypatch):
    """`memoized`: the blocks of a search in small chunks, with and without the shared collectives (and with a
    memo so small that it evicts), give the same value at every point; a result taken from the memo is a copy."""
    from armillary.search.run import Objective, Problem
    from armillary.search.space import StrategySpace, resolve_axes
    from armillary.specs.loading import load_model, load_strategy, load_workload

    model, system = load_model("llama2-7b"), load_system("dgx-a100", 32)  # data parallel across nodes
    workload, base = load_workload({"seq_len": 2048, "global_batch": 128}), load_strategy({"attention": "flash"})
    space = StrategySpace(tp=(1, 2), pp=(1, 2), micro_batch=(1, 2), zero=(0, 1))
    axes = resolve_axes(space, model, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                        False, workload)

    def values(memo: str | None) -> list[np.ndarray]:
        problem = Problem(model, system, base, workload, space, axes, Objective.TIME, 3, memo=memo)
        return [problem.evaluate(a, b).value for a, b in axes.blocks(64)]

    alone = values(None)
    assert compose_memo.MEMO == {}
    shared = values("one search")
    assert len(compose_memo.MEMO) > 0
    for a, b in zip(alone, shared, strict=True):
        np.testing.assert_array_equal(a, b)
    monkeypatch.setattr(compose_memo, "MEMO_POINTS", 40)
    for a, b in zip(alone, values("another search"), strict=True):
        np.testing.assert_array_equal(a, b)
    assert compose_memo._MEMO_POINTS[0] <= 40
    for group in (Placement((np.array([2.0, 8.0]), np.array([4.0, 4.0]))),  # across nodes, and inside one
                  Placement((np.array([2.0, 8.0]), np.array([1.0, 1.0])))):
        with compose_memo.memoized("copies"):
            for _ in range(2):  # the result that filled the memo, then one read from it: both copies
                first = collective(Collective.ALL_REDUCE, np.array([1e6, 1e6]), group, system)
                np.asarray(first.cost.time)[...] = -1.0
            again = collective(Collective.ALL_REDUCE, np.array([1e6, 1e6]), group, system)
        assert (np.asarray(again.cost.time) > 0).all()
    compose_memo.forget()
    assert compose_memo.MEMO == {} and compose_memo._MEMO_POINTS[0] == 0
