"""The scalar fast paths of one estimate (issue 47) compute what the array path computes, to the bit: plain-float
kernel times and efficiency curves, per-object derived values, quick frozen dataclasses; and one estimate stays
within a budget of Python calls (a deterministic guard against the per-call overhead creeping back)."""

from __future__ import annotations

import copy
import cProfile
import dataclasses
import gc
import math
import pstats
import random
from pathlib import Path

import numpy as np
import pytest

import armillary
from armillary.cost.compute import kernel_seconds, kernel_times
from armillary.estimate.training import estimate_training
from armillary.memo import DERIVED_PER_OBJECT, derived, quick_init
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import data_parallel
from armillary.specs.device import Precision
from armillary.specs.efficiency import EfficiencyCurve, interpolate
from armillary.specs.loading import load_system
from armillary.specs.run import load_run
from armillary.specs.workload import Training
from armillary.workload.ops import Op

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TRAINING_EXAMPLES = ("gpt3-175b-a100", "llama3-70b-h100", "mixtral-8x7b-h100", "llama2-70b-lora-h100",
                     "custom-model-fsdp")


def _curves() -> list[EfficiencyCurve]:
    curves = [EfficiencyCurve(points=((5.0, 0.5),)),
              EfficiencyCurve(points=((1e3, 0.1), (1e6, 0.3), (1e9, 0.8), (1e12, 0.6)))]
    for name in ("dgx-a100", "dgx-h100"):
        device = load_system(name).device
        curves += [device.gemm_efficiency(p) for p in (Precision.BF16, Precision.FP8, Precision.TF32)
                   if p in device.matrix_flops]
    return curves


def test_one_size_reads_the_curve_as_np_interp_does() -> None:
    """`interpolate` (one size, plain floats) against np.interp over an array: equal to the bit, at the points,
    between them, below and above them."""
    rng = random.Random(47)
    for curve in _curves():
        sizes = [math.exp(rng.uniform(-3.0, 70.0)) for _ in range(3000)]
        sizes += [p[0] for p in curve.points] + [0.0, 0.5, 1.0]
        swept = curve(np.array(sizes))
        assert [curve(s) for s in sizes] == swept.tolist()
        assert [interpolate(curve.table, float(np.log(max(s, 1.0)))) for s in sizes] == swept.tolist()


def test_kernel_times_of_one_configuration_equal_a_one_point_sweep() -> None:
    """The plain-float roofline (`kernel_seconds` of numbers) and the array roofline (a one-point sweep) agree
    to the bit, with a ceiling and a stream efficiency too, and ops without work take no time."""
    device = load_system("dgx-h100").device
    ops = (Op(2.0e12, 3.0e9), Op(7.0e6, 1.0e6, group=8.0), Op(0.0, 4.0e8), Op(0.0, 0.0), Op(3.0e15, 1.0e3, 2.0))
    for code in (0.0, 1.0, 3.0):
        for ceiling, stream in ((None, None), (0.4, 0.5)):
            one = kernel_seconds(ops, device, code, ceiling=ceiling, stream_efficiency=stream)
            assert isinstance(one, list)
            swept = kernel_times(tuple(Op(*(np.array([getattr(op, k)]) for k in ("flop", "bytes", "group")))
                                       for op in ops), device, np.array([code]), ceiling=ceiling,
                                 stream_efficiency=stream)
            assert one == swept[:, 0].tolist()
            assert one[3] == 0.0 and one[0] > 0
            assert kernel_times(ops, device, code, ceiling=ceiling, stream_efficiency=stream).tolist() == one


@pytest.mark.parametrize("name", TRAINING_EXAMPLES)
def test_one_estimate_equals_its_one_point_sweep(name: str) -> None:
    """estimate_training of numbers (the scalar fast paths, the per-point caches) and of one-element arrays (the
    search's path) give the same step time and memory to the bit."""
    model, system, strategy, workload = load_run(EXAMPLES / f"{name}.yaml")
    point = StrategyArrays.of(strategy, data_parallel(strategy, system))
    sweep = dataclasses.replace(point, **{f.name: np.array([getattr(point, f.name)], dtype=float)
                                          for f in dataclasses.fields(point)})
    assert isinstance(workload, Training)
    m, w = ModelArrays.of(model), TrainingArrays.of(workload)
    for _ in range(2):  # the second time from the values kept on the point
        one, many = estimate_training(m, point, w, system), estimate_training(m, sweep, w, system)
        assert one.step_time_s == float(np.asarray(many.step_time_s).reshape(-1)[0])
        assert one.memory_hbm.total == float(np.asarray(many.memory_hbm.total).reshape(-1)[0])
        assert one.mfu == float(np.asarray(many.mfu).reshape(-1)[0])


def test_derived_values_are_made_once_per_object() -> None:
    @dataclasses.dataclass(frozen=True)
    class Point:
        x: float

    made: list[object] = []

    def make(value: float) -> float:
        made.append(value)
        return value

    a, b = Point(1.0), Point(1.0)
    assert derived(a, "k", lambda: make(2.0)) == 2.0
    assert derived(a, "k", lambda: make(3.0)) == 2.0  # kept on a
    assert derived(b, "k", lambda: make(4.0)) == 4.0  # an equal object is another object
    assert derived(a, ("k", np.zeros(2).tobytes()), lambda: make(5.0)) == 5.0
    assert derived(a, np.zeros(2), lambda: make(6.0)) == 6.0  # type: ignore[arg-type]  # unhashable: made each time
    assert derived(a, np.zeros(2), lambda: make(7.0)) == 7.0  # type: ignore[arg-type]
    assert derived(1.5, "k", lambda: make(8.0)) == 8.0  # no __dict__ to keep it on
    assert made == [2.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    for i in range(DERIVED_PER_OBJECT + 5):  # bounded per object: the oldest values go first
        derived(b, ("n", i), lambda: 0.0)
    assert derived(b, ("n", DERIVED_PER_OBJECT + 4), lambda: make(9.0)) == 0.0
    assert derived(b, "k", lambda: make(10.0)) == 10.0 and made[-1] == 10.0  # "k" went
    twin = copy.copy(a)  # another object: values of its own
    assert derived(twin, "k", lambda: make(11.0)) == 11.0 and derived(a, "k", lambda: make(12.0)) == 2.0
    assert "_derived" not in vars(a) and Point(**vars(a)) == a  # the object itself untouched
    del a, twin
    gc.collect()
    assert derived(Point(1.0), "k", lambda: make(13.0)) == 13.0  # gone with its object


def test_quick_init_keeps_a_frozen_dataclass() -> None:
    posts: list[float] = []

    @quick_init
    @dataclasses.dataclass(frozen=True)
    class Part:
        flop: float
        bytes: float = 2.0
        scale: tuple[float, ...] = (1.0,)

        def __post_init__(self) -> None:
            posts.append(self.flop)

    @dataclasses.dataclass(frozen=True)
    class Plain:
        flop: float
        bytes: float = 2.0
        scale: tuple[float, ...] = (1.0,)

    assert Part.__init__.__qualname__.endswith("Part.__init__")
    p = Part(1.0)
    assert (p.flop, p.bytes, p.scale) == (1.0, 2.0, (1.0,)) and posts == [1.0]
    assert Part(1.0, bytes=3.0) == Part(1.0, 3.0) != p and hash(Part(1.0)) == hash(p)
    assert dataclasses.replace(p, bytes=5.0).bytes == 5.0 and posts == [1.0, 1.0, 1.0, 1.0, 1.0]
    assert dataclasses.astuple(p) == dataclasses.astuple(Plain(1.0)) and repr(p).endswith("Part(flop=1.0, bytes=2.0, "
                                                                                         "scale=(1.0,))")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.flop = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        Part()  # type: ignore[call-arg]

    @quick_init
    @dataclasses.dataclass(frozen=True)
    class WithFactory:  # keeps dataclasses' own __init__
        items: list[int] = dataclasses.field(default_factory=list)

    assert WithFactory().items == [] and WithFactory().items is not WithFactory().items


@pytest.mark.parametrize(("example", "budget"), [("gpt3-175b-a100.yaml", 1350), ("mixtral-8x7b-h100.yaml", 3200)])
def test_one_estimate_stays_within_its_python_calls(example: str, budget: int) -> None:
    """The quick-start example's estimate() made 2,940 Python calls before issue 47's work, about 1,420 at
    3e4fadf and 1,120 after the layer kinds shared their TP collectives and the sums and copies were written
    out (Mixtral 8x7B: 3,500 -> 2,820): a deterministic guard (unlike a timing) that the per-call overhead does
    not creep back."""
    model, system, strategy, workload = load_run(EXAMPLES / example)
    armillary.run_estimate(model, system, strategy, workload)
    counter = cProfile.Profile()
    counter.runcall(lambda: [armillary.run_estimate(model, system, strategy, workload) for _ in range(5)])
    calls = pstats.Stats(counter).total_calls / 5  # type: ignore[attr-defined]
    assert calls < budget, f"{calls:.0f} Python calls per estimate"
