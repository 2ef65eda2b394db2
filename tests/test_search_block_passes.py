"""Issue 47 (search speed): the block's fewer passes give the same values bit for bit. The step's stall without the
pass that adds 0.0 (`training._stall_and_step`), the best points found among the feasible points' values gathered
(`run._best_of`) rather than in a block filled with inf, and a block's axes of one value given as numbers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from armillary.estimate.training import _stall_and_step
from armillary.numerics import maximum
from armillary.search.run import _best, _best_of, _inner_indices


def _times(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Times with zeros, negative zeros, infinities and NaNs among them (negative ones too)."""
    x = rng.random(shape) * 10.0 ** rng.integers(-3, 2) * np.where(rng.random(shape) < 0.1, -1.0, 1.0)
    x[rng.random(shape) < 0.15] = 0.0
    x[rng.random(shape) < 0.15] = -0.0
    x[rng.random(shape) < 0.03] = np.inf
    x[rng.random(shape) < 0.03] = -np.inf
    x[rng.random(shape) < 0.03] = np.nan
    return x


def _bits(x: np.ndarray) -> bytes:
    return np.ascontiguousarray(x).tobytes()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf - inf)
def test_the_stall_and_step_of_a_sweep_are_the_plain_expressions_bit_for_bit():
    rng = np.random.default_rng(5)
    for _ in range(50):
        parts = tuple(_times(rng, shape) for shape in ((4, 1, 6), (1, 3, 6), (4, 3, 1), (1, 1, 6), (4, 3, 6),
                                                        (1, 3, 1), (4, 1, 1), (4, 3, 6)))
        optimizer, offload = _times(rng, (4, 1, 6)), _times(rng, (1, 3, 6))
        parts = (*parts, optimizer)
        # the plain expressions, point by point as one configuration computes them
        pipeline = sum(parts[1:], parts[0])
        want_stall = np.maximum(0.0, offload - ((pipeline + 0.0) - optimizer))
        stall, step = _stall_and_step(parts, optimizer, offload)
        assert _bits(stall) == _bits(want_stall)
        assert _bits(step) == _bits(pipeline + want_stall)
        for i, j, k in ((0, 0, 0), (3, 2, 5), (1, 2, 3)):
            one = [float(p[min(i, p.shape[0] - 1), min(j, p.shape[1] - 1), min(k, p.shape[2] - 1)]) for p in parts]
            s, t = _stall_and_step(tuple(one), one[-1], float(offload[0, j, k]))
            assert np.float64(s).tobytes() == stall[i, j, k].tobytes()
            assert np.float64(t).tobytes() == step[i, j, k].tobytes()


def test_a_stall_of_negative_zeros_keeps_its_sign_as_the_plain_expression():
    """The cases the dropped `+ 0.0` could change: a pipeline of -0.0 (only with an optimizer of -0.0), spare times
    of +-0.0, offload times of +-0.0."""
    zeros = np.array([0.0, -0.0])
    for p in zeros:
        for o in zeros:
            for off in zeros:
                parts = (*(np.full(3, p) for _ in range(8)), o * np.ones(3))
                stall, step = _stall_and_step(parts, parts[-1], np.full(3, off))
                pipeline = sum(parts[1:], parts[0])
                want = maximum(0.0, off - ((pipeline + 0.0) - parts[-1]))
                assert _bits(stall) == _bits(want) and _bits(step) == _bits(pipeline + want)


def test_the_best_of_the_feasible_points_are_those_of_the_block_filled_with_inf():
    """`Problem.evaluate`: the feasible points' values gathered and searched (`_best_of`, NaN and infinite values
    left out there) are the same points and values as the block's values with inf at the infeasible points."""
    rng = np.random.default_rng(13)
    for _ in range(300):
        shape = tuple(int(d) for d in rng.integers(1, 6, size=int(rng.integers(1, 5))))
        order = [d for d in rng.permutation(len(shape)).tolist() if shape[d] > 1]
        inner = tuple(shape[d] for d in order)
        start, k = int(rng.integers(0, 1000)), int(rng.integers(1, 30))
        values = rng.choice(rng.random(int(rng.integers(1, 12))), inner)  # many ties
        values[rng.random(inner) < 0.05] = np.nan
        values[rng.random(inner) < 0.05] = np.inf
        feasible = rng.random(inner) < 0.7
        flat = np.where(feasible, values, np.inf).reshape(-1)

        def index_of(at: np.ndarray, a: int = start, s: tuple[int, ...] = shape, o: list[int] = order) -> np.ndarray:
            return _inner_indices(at, a, s, o)

        want = _best(None, flat, k, index_of)
        at = np.flatnonzero(feasible)
        got, best = _best_of(at, values.reshape(-1)[at], k, None, index_of)
        assert np.array_equal(got, want) and _bits(best) == _bits(flat[want])


def test_inner_indices_are_the_points_c_order_indices():
    rng = np.random.default_rng(17)
    for _ in range(100):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 7))))
        order = [d for d in rng.permutation(len(shape)).tolist() if shape[d] > 1]
        start = int(rng.integers(0, 10**6))
        index = np.arange(start, start + int(np.prod(shape))).reshape(shape)
        in_order = index.transpose([*order, *(d for d in range(len(shape)) if d not in order)]).reshape(-1)
        at = rng.integers(0, in_order.size, size=20)
        got = _inner_indices(at, start, shape, order)
        assert got.dtype == np.int64 and np.array_equal(got, in_order[at])


def test_a_block_s_axes_of_one_value_arrive_as_numbers_with_the_same_values():
    """An axis of one value (the default space's offload flags, ep, ...) is a number in the block's strategy; the
    block's values are those of the same block with that axis given as an array (the base strategy's value)."""
    from armillary.search.run import Objective, Problem
    from armillary.search.space import StrategySpace, resolve_axes
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

    model, system = load_model("llama2-7b"), load_system("dgx-a100", 16)
    workload, base = load_workload({"seq_len": 2048, "global_batch": 64}), load_strategy({"attention": "flash"})
    values = []
    for space in (StrategySpace(tp=(1, 2), pp=(1, 2), micro_batch=(1, 2), zero=(0, 1)),
                  # the same points, ZeRO 1 twice in the space: an axis of two values (arrays throughout)
                  StrategySpace(tp=(1, 2), pp=(1, 2), micro_batch=(1, 2), zero=(0, 1), offload_optimizer=(False,),
                                overlap_ep=(True,))):
        axes = resolve_axes(space, model, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                            False, workload)
        problem = Problem(model, system, base, workload, space, axes, Objective.TIME, 5)
        values.append([problem.evaluate(a, b) for a, b in axes.blocks(4096)])
    for a, b in zip(*values, strict=True):
        assert np.array_equal(a.index, b.index) and _bits(a.value) == _bits(b.value)


def test_the_stages_hbm_totals_handed_to_the_fullest_stage_are_their_totals_bit_for_bit(monkeypatch):
    """`training_memory.stage_memories` hands `fullest_stage` each stage's HBM total from the tensors' sum it made
    (that sum + the runtime): the values of `MemoryBreakdown.total` of the stage, and the same fullest stage."""
    from armillary.estimate import training_memory
    from armillary.estimate.stages import fullest_stage
    from armillary.estimate.training import estimate_training
    from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

    seen = []

    def recorded(first, middle, last, has_mid, totals=None):
        seen.append((first, middle, last, has_mid, totals))
        return fullest_stage(first, middle, last, has_mid, totals)

    monkeypatch.setattr(training_memory, "fullest_stage", recorded)
    for model, fields in (("gpt3-175b", {"tp": 8, "pp": 8}), ("mixtral-8x7b", {"tp": 2, "pp": 4, "ep": 4})):
        m, system = load_model(model), load_system("dgx-a100", 64)
        w = load_workload({"seq_len": 2048, "global_batch": 256})
        base = StrategyArrays.of(load_strategy({"attention": "flash", **fields}), 1)
        st = dataclasses.replace(base, micro_batch=np.array([1.0, 2.0, 4.0]).reshape(3, 1, 1),
                                 zero=np.array([0.0, 1.0, 3.0]).reshape(1, 3, 1),
                                 recompute=np.array([0.0, 1.0, 2.0]).reshape(1, 1, 3))
        with np.errstate(all="ignore"):
            estimate_training(ModelArrays.of(m), st, TrainingArrays.of(w), system)
    assert len(seen) == 2
    for first, middle, last, has_mid, totals in seen:
        for (hbm, _), total in zip((first, middle, last), totals, strict=True):
            assert np.shape(total) == np.shape(hbm.total) and _bits(np.asarray(total)) == _bits(np.asarray(hbm.total))
        summed_here = fullest_stage(first, middle, last, has_mid)
        for a, b in zip(summed_here, fullest_stage(first, middle, last, has_mid, totals), strict=True):
            assert all(_bits(np.asarray(getattr(a, f))) == _bits(np.asarray(getattr(b, f))) for f in
                       ("weights", "gradients", "optimizer_states", "activations", "checkpoints", "comm_buffers",
                        "runtime"))


def test_a_sweeps_feasibility_holds_its_shape_rules_so_the_block_reads_it_alone():
    """`Problem.evaluate` takes the feasible points from the estimate's feasibility alone: it holds the shape rules'
    verdict (`feasibility.check` ANDs it), so no feasible point breaks a rule; the valid points are counted on the
    verdict's own shape (each of its values standing for the points it broadcasts over)."""
    from armillary.estimate.feasibility import shape_rules
    from armillary.estimate.training import estimate_training
    from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

    m, system = ModelArrays.of(load_model("gpt3-175b")), load_system("dgx-a100", 64)
    w = TrainingArrays.of(load_workload({"seq_len": 2048, "global_batch": 64}))
    tp, pp = np.array([1.0, 2.0, 4.0, 8.0, 16.0]).reshape(5, 1, 1), np.array([1.0, 2.0, 3.0, 8.0]).reshape(1, 4, 1)
    st = dataclasses.replace(StrategyArrays.of(load_strategy({"attention": "flash"}), 1), tp=tp, pp=pp,
                             dp=64 / (tp * pp), micro_batch=np.array([1.0, 3.0, 4.0]).reshape(1, 1, 3))
    with np.errstate(all="ignore"):
        r = estimate_training(m, st, w, system)
    verdict = np.asarray(shape_rules(m, st, w, 64)[0], bool)
    feasible = np.broadcast_to(np.asarray(r.feasible, bool), (5, 4, 3))
    assert feasible.any() and not verdict.all()
    assert not (feasible & ~np.broadcast_to(verdict, (5, 4, 3))).any()
    assert np.count_nonzero(verdict) * (60 // verdict.size) == np.count_nonzero(np.broadcast_to(verdict, (5, 4, 3)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (inf - inf, 0 x inf)
def test_the_fullest_stage_chosen_when_read_is_the_eager_choice_with_its_total_bit_for_bit():
    """`fullest_stage` given the stages' totals defers a sweep's HBM fields (`ChosenMemory`): read, they are the
    field-by-field choice made at once; its total, read before or after them, is the sum of those fields bit for bit
    and of its shape; it pickles and copies; a copy with a field replaced sums its own fields."""
    import copy
    import pickle

    from armillary.estimate.result import MemoryBreakdown
    from armillary.estimate.stages import ChosenMemory, fullest_stage

    rng = np.random.default_rng(23)
    names = [f.name for f in dataclasses.fields(MemoryBreakdown)]
    made = 0
    for trial in range(60):
        shared = _times(rng, (1, 4))  # one array in every stage (the pipeline and TP buffers)

        def memory(scale: float, shared: np.ndarray = shared) -> MemoryBreakdown:
            return MemoryBreakdown(_times(rng, (3, 1)) * scale, _times(rng, (1, 4)) * scale, 1.0 * scale,
                                   _times(rng, (3, 4)), 0.0, shared, runtime=_times(rng, (3, 4)) * scale)

        stages = [(memory(s), memory(2 * s)) for s in rng.random(3) * 3]
        has_mid = rng.integers(0, 2, size=(3, 1)).astype(float)
        with np.errstate(all="ignore"):
            eager = fullest_stage(*stages, has_mid)
            lazy = fullest_stage(*stages, has_mid, tuple(s[0].total for s in stages))
            total_first = trial % 2 == 0
            for tier in (0, 1):  # the HBM, then the second tier
                if total_first:
                    total = lazy[tier].total
                fields_read = [getattr(lazy[tier], name) for name in names]
                if not total_first:
                    total = lazy[tier].total
                summed = eager[tier].total
                for a, b in zip(fields_read, (getattr(eager[tier], name) for name in names), strict=True):
                    assert np.shape(a) == np.shape(b) and _bits(np.asarray(a)) == _bits(np.asarray(b))
                assert np.shape(total) == np.shape(summed) and _bits(np.asarray(total)) == _bits(np.asarray(summed))
            summed = eager[0].total
        made += type(lazy[0]) is ChosenMemory and type(lazy[1]) is ChosenMemory
        if type(lazy[0]) is ChosenMemory:
            again = fullest_stage(*stages, has_mid, tuple(s[0].total for s in stages))[0]
            for other in (pickle.loads(pickle.dumps(again)), copy.copy(again), copy.deepcopy(again)):
                assert _bits(np.asarray(other.total)) == _bits(np.asarray(summed))
                assert _bits(np.asarray(other.weights)) == _bits(np.asarray(eager[0].weights))
            replaced = dataclasses.replace(again, weights=0.0 * np.asarray(again.weights))
            assert _bits(np.asarray(replaced.total)) == _bits(np.asarray(
                MemoryBreakdown(*(getattr(replaced, name) for name in names)).total))
    assert made > 10


def test_a_block_s_values_without_their_leading_ones_are_the_same(monkeypatch):
    """`Problem.evaluate` drops each axis value's leading dimensions of length 1 (numpy aligns shapes on their last
    dimensions): every block's points, values and counts are those with every value at the block's full number of
    dimensions, bit for bit (a dense and an MoE model, time and memory)."""
    import armillary.search.run as run
    from armillary.search.space import StrategySpace, resolve_axes
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

    for model, gpus, space in (("llama2-7b", 32, StrategySpace(tp=(1, 2, 4), pp=(1, 2), micro_batch=(1, 2, 4),
                                                               zero=(0, 1, 3), sequence_parallel=(False, True))),
                               ("mixtral-8x7b", 32, StrategySpace(tp=(1, 2), pp=(1, 2, 4), ep=(1, 2, 8),
                                                                  zero=(0, 1), micro_batch=(1, 2)))):
        m, system = load_model(model), load_system("dgx-h100", gpus)
        workload, base = load_workload({"seq_len": 2048, "global_batch": 128}), load_strategy({"attention": "flash"})
        axes = resolve_axes(space, m, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                            False, workload)
        for objective in (run.Objective.TIME, run.Objective.MEMORY):
            problem = run.Problem(m, system, base, workload, space, axes, objective, 7)
            dropped = [problem.evaluate(a, b) for a, b in axes.blocks(2048)]
            with monkeypatch.context() as patched:
                patched.setattr(run, "_leading_ones_dropped", lambda v: v)
                kept = [problem.evaluate(a, b) for a, b in axes.blocks(2048)]
            assert any(len(r.index) for r in kept)
            for a, b in zip(dropped, kept, strict=True):
                assert (a.evaluated, a.feasible) == (b.evaluated, b.feasible)
                assert np.array_equal(a.index, b.index) and _bits(a.value) == _bits(b.value)
