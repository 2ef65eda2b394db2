"""A training step's figures that follow from its time (throughput, utilization, capacities, offload time) and the
parts of its estimate a search never reads (model FLOPs, calls, traffic): made at once for one configuration, and
for a sweep when first read (`Deferral`; issue 47)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from armillary.numerics import Array


def step_figures(step: Array, devices: Array, peak: Array, tokens: Array, model_flop: Array, hardware_flop: Array,
                 hbm_capacity: Array, tier2_capacity: Array, offload_s: Array) -> tuple[Array, ...]:
    """A step's figures that follow from its time: (tokens / s, MFU, HFU, the HBM and second-tier capacities and
    the offload time, the last three one value per point of the step). `tokens`: global batch x sequence;
    `devices` x `peak`: the cluster's FLOP/s. The same products once each (a sweep's step is a whole block: each
    product a pass over every point)."""
    device_seconds, zero = step * devices * peak, 0.0 * step
    return (tokens / step, model_flop / device_seconds, hardware_flop / device_seconds, hbm_capacity + zero,
            tier2_capacity + zero, offload_s + zero)


class Deferral:
    """What a sweep's estimate holds but a search never reads (issue 47): `make(*args)`, made when one of its values
    is first read, under the floating-point error handling (np.errstate) of the estimate that deferred it, so the
    values and warnings are those of making them at once. (`make` a module's function and `args` the estimate's
    parts: the estimate still copies and pickles.)"""

    __slots__ = ("_args", "_errors", "_make", "_values")

    def __init__(self, make: Callable[..., tuple[Any, ...]], *args: Any) -> None:
        self._make, self._args = make, args  # (kept: two threads reading at once make the same values)
        self._errors = np.geterr()
        self._values: tuple[Any, ...] | None = None

    def value(self, index: int) -> Any:
        values = self._values
        if values is None:
            with np.errstate(**self._errors):  # type: ignore[arg-type]
                values = self._values = self._make(*self._args)
        return values[index]

    def made(self) -> tuple[Any, ...] | None:
        """The values, where made (None until one is read)."""
        return self._values

    def deferred(self, count: int) -> tuple[Any, ...]:
        """What the StepEstimate's fields hold until read: one `Deferred` for each of `make`'s `count` values."""
        return tuple(Deferred(self, i) for i in range(count))


# a step's figures that follow from its time, with the model FLOPs they read (`estimate.training._figures`, in this
# order), and its calls and their traffic (`training._calls_and_traffic`): a sweep's when first read
FIGURES = ("model_flop", "hardware_flop", "tokens_per_s", "mfu", "hfu", "hbm_capacity_bytes", "tier2_capacity_bytes",
           "offload_s")
PARTS = ("communication", "traffic")


class Deferred:
    """One of a sweep's `Deferral` values, held in a StepEstimate's field until it is read."""

    __slots__ = ("figures", "index")

    def __init__(self, figures: Deferral, index: int) -> None:
        self.figures, self.index = figures, index


class Figure:
    """A StepEstimate field that may hold a `Deferred` figure: computed and kept in the instance when first read
    (functools.cached_property's way, over a dataclass field). A data descriptor, so it is consulted before the
    instance's __dict__ (where `memo.quick_init` stores the fields)."""

    def __init__(self, name: str, default: Any = dataclasses.MISSING) -> None:
        self.name, self.default = name, default

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:  # the class: the field's default (dataclasses reads it so), or none
            if self.default is dataclasses.MISSING:
                raise AttributeError(self.name)
            return self.default
        value = obj.__dict__[self.name]
        if type(value) is Deferred:
            value = obj.__dict__[self.name] = value.figures.value(value.index)
        return value

    def __set__(self, obj: Any, value: Any) -> None:  # dataclasses' own __init__ (the frozen class refuses others)
        obj.__dict__[self.name] = value
