"""A sweep's figures that follow from the step time (tokens/s, MFU, HFU, the capacities, the offload time) are
computed when first read (issue 47: a search reads none of them): the values are step_figures' computed at once,
bit for bit; one configuration's are plain values, equal to the sweep's point; the estimate copies, pickles and
compares as before; a figure read later computes under the estimate's own floating-point error handling."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import warnings

import numpy as np
import pytest

from armillary.estimate.result import StepEstimate
from armillary.estimate.step_figures import FIGURES, Deferral, Deferred, step_figures
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

MICRO, ZERO = (1.0, 2.0, 4.0), (0.0, 1.0)


def _estimate(**fields: np.ndarray | float) -> StepEstimate:
    """GPT-3 175B on 64 A100s (tp 8, pp 8), its strategy's `fields` replaced (arrays: a sweep)."""
    m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    w = load_workload({"seq_len": 2048, "global_batch": 64})
    st = dataclasses.replace(StrategyArrays.of(load_strategy({"attention": "flash", "tp": 8, "pp": 8}), 1), **fields)
    with np.errstate(all="ignore"):
        return estimate_training(ModelArrays.of(m), st, TrainingArrays.of(w), system)


@pytest.fixture(scope="module")
def sweep() -> StepEstimate:
    return _estimate(micro_batch=np.array(MICRO).reshape(3, 1), zero=np.array(ZERO).reshape(1, 2))


def test_sweep_figures_deferred_and_exact(sweep):
    from armillary.estimate.training import _figures

    held = [sweep.__dict__[name] for name in FIGURES]
    assert all(type(h) is Deferred for h in held)  # nothing computed yet
    args = held[0].figures._args
    at_once = _figures(*args)  # the same inputs, computed now
    assert args[0] is sweep.step_time_s
    for name, value in zip(FIGURES, at_once, strict=True):
        got = getattr(sweep, name)
        assert isinstance(got, np.ndarray) and np.array_equal(got, value), name
        if name not in ("model_flop", "hardware_flop"):  # (the FLOPs in the shape of what they follow from)
            assert got.shape == sweep.step_time_s.shape == (3, 2), name
        assert getattr(sweep, name) is got  # kept once read
    assert np.array_equal(sweep.tokens_per_s, 64 * 2048 / sweep.step_time_s)
    # the utilizations are the FLOPs over one product of the step, devices and peak (`step_figures`)
    assert np.allclose(sweep.hfu / sweep.mfu, sweep.hardware_flop / sweep.model_flop, rtol=1e-12)
    assert np.all(sweep.hardware_flop >= sweep.model_flop) and np.all(sweep.model_flop > 0)


@pytest.mark.parametrize("i, j", [(0, 0), (2, 1)])
def test_one_configuration_is_the_sweeps_point(sweep, i, j):
    one = _estimate(micro_batch=MICRO[i], zero=ZERO[j])
    assert not isinstance(one.step_time_s, np.ndarray)
    for name in FIGURES:
        assert type(one.__dict__[name]) is not Deferred, name
        swept = np.broadcast_to(getattr(sweep, name), sweep.step_time_s.shape)
        assert float(swept[i, j]) == pytest.approx(getattr(one, name), rel=1e-12), name


def test_sweep_estimate_copies_and_pickles(sweep):
    for copied in (copy.deepcopy(sweep), pickle.loads(pickle.dumps(sweep)), dataclasses.replace(sweep)):
        for name in FIGURES:
            assert np.array_equal(getattr(copied, name), getattr(sweep, name)), name
    d = sweep.to_dict()
    assert d["mfu"] == sweep.mfu.tolist() and d["memory"]["hbm_capacity_bytes"] == sweep.hbm_capacity_bytes.tolist()
    assert StepEstimate.offload_s == 0.0  # the class's default stays


def test_deferred_keeps_the_estimates_error_handling():
    """A zero step divides by zero: quiet where the estimate ignored it, raising where it raised, whatever
    the reader's own setting."""
    inputs = (np.array([2.0, 0.0]), 1.0, 1.0, 10.0, 5.0, 5.0, 1.0, 0.0, 0.0)
    with np.errstate(divide="ignore"):
        quiet = Deferral(step_figures, *inputs)
    with np.errstate(divide="raise"):
        loud = Deferral(step_figures, *inputs)
    with warnings.catch_warnings(), np.errstate(divide="raise"):
        warnings.simplefilter("error")
        assert quiet.value(0).tolist() == [5.0, np.inf]
    with np.errstate(divide="ignore"), pytest.raises(FloatingPointError):
        loud.value(0)


def test_sweep_calls_and_traffic_deferred_and_exact(sweep):
    """A sweep's calls and traffic (`PARTS`) wait until read, then are what `_calls_and_traffic` makes of the same
    parts at once; the traffic is the calls' bytes summed; a copy and a pickle hold the same."""
    from armillary.estimate.step_figures import PARTS
    from armillary.estimate.training import _calls_and_traffic

    fresh = _estimate(micro_batch=np.array(MICRO).reshape(3, 1), zero=np.array(ZERO).reshape(1, 2))
    held = [fresh.__dict__[name] for name in PARTS]
    assert all(type(h) is Deferred for h in held)  # nothing made yet
    calls, traffic = _calls_and_traffic(*held[0].figures._args)
    copied = pickle.loads(pickle.dumps(fresh))
    assert len(fresh.communication) == len(calls) == len(copied.communication) > 0
    for got, want, other in zip(fresh.communication, calls, copied.communication, strict=True):
        assert (got.dimension, got.operation) == (want.dimension, want.operation)
        assert np.array_equal(got.per_step, want.per_step) and np.array_equal(got.time_each_s, want.time_each_s)
        assert np.array_equal(other.per_step, want.per_step)
    scale_out = sum(c.per_step * c.scale_out_bytes_each for c in calls)
    assert np.array_equal(fresh.traffic.scale_out_bytes, traffic.scale_out_bytes)
    assert np.allclose(fresh.traffic.scale_out_bytes, scale_out, rtol=1e-12) and np.all(scale_out > 0)
    assert fresh.communication is fresh.communication  # kept once read


def test_one_configuration_and_a_pool_link_make_calls_at_once():
    """One configuration's calls and traffic are plain values, equal to the sweep's point; a sweep offloading to a
    memory pool reached over the network reads its traffic for the pool's link (nothing deferred)."""
    from armillary.estimate.step_figures import PARTS
    from armillary.specs.memory import MemoryPool

    one = _estimate(micro_batch=MICRO[1], zero=ZERO[1])
    assert all(type(one.__dict__[name]) is not Deferred for name in PARTS)
    sweep = _estimate(micro_batch=np.array(MICRO).reshape(3, 1), zero=np.array(ZERO).reshape(1, 2))
    assert float(np.asarray(sweep.traffic.scale_out_bytes)[1, 1]) == pytest.approx(one.traffic.scale_out_bytes,
                                                                                   rel=1e-12)
    m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    pool = MemoryPool.model_validate({"kind": "per_device", "capacity": "1 TiB", "bandwidth": "64 GB/s",
                                      "network": 1})
    system = system.model_copy(update={"memory_pool": pool})
    w = load_workload({"seq_len": 2048, "global_batch": 64})
    st = dataclasses.replace(StrategyArrays.of(load_strategy({"attention": "flash", "tp": 8, "pp": 8,
                                                              "offload": {"optimizer": True}}), 1),
                             micro_batch=np.array(MICRO))
    with np.errstate(all="ignore"):
        pooled = estimate_training(ModelArrays.of(m), st, TrainingArrays.of(w), system)
    assert all(type(pooled.__dict__[name]) is not Deferred for name in PARTS)
    assert np.all(np.asarray(pooled.traffic.scale_out_bytes) > 0)


def test_sweep_data_parallel_calls_deferred_and_exact():
    """A sweep's data-parallel calls (`DataParallelCost.calls`) wait until read, then are `_calls` of the same
    inputs; one configuration's are the calls it makes (counts of 0 left out), equal to the sweep's point."""
    from armillary.estimate.data_parallel import _calls, data_parallel_cost
    from armillary.plan.placement import Placement

    system = load_system("dgx-a100", 64)
    base = StrategyArrays.of(load_strategy({"attention": "flash", "tp": 8, "pp": 8}), 1)
    group = Placement((1.0, 8.0))  # dp 8 across 8 nodes
    params = np.array([1e9, 2e9]).reshape(2, 1)
    sweep = data_parallel_cost(params, 12.0, 4.0, dataclasses.replace(base, zero=np.array((*ZERO, 2.0, 3.0))),
                               group, system)
    held = sweep.__dict__["calls"]
    assert type(held) is Deferred
    want = _calls(*held.figures._args)[0]
    copied = pickle.loads(pickle.dumps(sweep))
    assert len(sweep.calls) == len(want) == len(copied.calls) == 5
    for got, other, expected in zip(sweep.calls, copied.calls, want, strict=True):
        assert got.operation == expected.operation and np.array_equal(got.per_step, expected.per_step)
        assert np.array_equal(other.per_step, expected.per_step)
        assert np.array_equal(got.time_each_s, expected.time_each_s)
    one = data_parallel_cost(2e9, 12.0, 4.0, dataclasses.replace(base, zero=1.0), group, system)
    assert type(one.__dict__["calls"]) is tuple
    assert [c.operation.value for c in one.calls] == ["reduce_scatter", "all_gather"]  # ZeRO 1: once each
    scatter = next(c for c in sweep.calls if c.operation.value == "reduce_scatter")
    assert float(np.asarray(scatter.per_step)[1, 1]) == one.calls[0].per_step == 1.0
