"""Co-design: a space of systems (GPU count, memory tiers, network bandwidth per tier, scale-up domain
size) with a capital-cost and a power model; for each system the best strategy of the strategy search, and
the Pareto front of step time, cost and power."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
from pydantic import Field, NonNegativeFloat, PositiveInt

from armillary.errors import SpecError
from armillary.search.run import Candidate, Executor, Objective, search, serial
from armillary.search.space import StrategySpace
from armillary.specs.base import Spec
from armillary.specs.model import Model
from armillary.specs.quantity import Bytes, BytesPerSecond
from armillary.specs.strategy import Strategy
from armillary.specs.system import MemoryTier, System
from armillary.specs.workload import Training
from armillary.units import GIB, GIGA


class ComponentPrices(Spec):
    """Capital cost in dollars per component. No defaults: prices depend on vendor, year and volume, so a
    space file states them (with `sources`)."""

    device: NonNegativeFloat = Field(description="one accelerator without its HBM")
    hbm_per_gib: NonNegativeFloat
    tier2_per_gib: NonNegativeFloat = 0.0
    scale_up_per_gbps: NonNegativeFloat = Field(0.0, description="per device and GB/s of scale-up injection")
    scale_out_per_gbps: NonNegativeFloat = Field(0.0, description="per device and GB/s of scale-out injection")
    sources: dict[str, str] = Field(default_factory=dict)


class ComponentPower(Spec):
    """Watts per component; `device` defaults to the device preset's board power (which includes its HBM)."""

    device: NonNegativeFloat | None = None
    hbm_per_gib: NonNegativeFloat = 0.0
    tier2_per_gib: NonNegativeFloat = 0.0
    scale_up_per_gbps: NonNegativeFloat = 0.0
    scale_out_per_gbps: NonNegativeFloat = 0.0
    sources: dict[str, str] = Field(default_factory=dict)


class SystemSpace(Spec):
    """Values to try per system parameter (None: the base system's). Every combination is one system."""

    gpus: tuple[PositiveInt, ...]
    hbm_capacity: tuple[Bytes, ...] | None = None
    hbm_bandwidth: tuple[BytesPerSecond, ...] | None = None
    tier2_capacity: tuple[Bytes, ...] | None = None
    tier2_bandwidth: tuple[BytesPerSecond, ...] | None = None
    scale_up_bandwidth: tuple[BytesPerSecond, ...] | None = None
    scale_out_bandwidth: tuple[BytesPerSecond, ...] | None = None
    devices_per_node: tuple[PositiveInt, ...] | None = Field(None, description="scale-up domain size")
    prices: ComponentPrices
    power: ComponentPower = ComponentPower()


_PARAMETERS = ("gpus", "hbm_capacity", "hbm_bandwidth", "tier2_capacity", "tier2_bandwidth", "scale_up_bandwidth",
               "scale_out_bandwidth", "devices_per_node")


def _base_value(system: System, name: str) -> Any:
    tier2 = system.device.second_tier
    return {"hbm_capacity": system.device.hbm.capacity, "hbm_bandwidth": system.device.hbm.bandwidth,
            "tier2_capacity": tier2.capacity if tier2 else None, "tier2_bandwidth": tier2.bandwidth if tier2 else None,
            "scale_up_bandwidth": system.network[0].bandwidth, "scale_out_bandwidth": system.network[-1].bandwidth,
            "devices_per_node": system.devices_per_node}[name]


def system_variant(system: System, values: dict[str, Any]) -> System:
    """The base system with the given parameters replaced, sized to values['gpus']."""
    device = system.device
    hbm = device.hbm.model_copy(update={"capacity": values["hbm_capacity"], "bandwidth": values["hbm_bandwidth"]})
    memory: tuple[MemoryTier, ...] = (hbm,)
    if device.second_tier is not None:
        memory = (hbm, device.second_tier.model_copy(update={"capacity": values["tier2_capacity"],
                                                             "bandwidth": values["tier2_bandwidth"]}))
    elif values["tier2_capacity"] is not None:
        raise SpecError(f"space: tier2_capacity given, but the device {device.name} has no second memory tier")
    if len(system.network) < 2:
        raise SpecError(f"space: {system.name} has one network dimension; co-design varies a scale-up domain "
                        "under a scale-out network")
    varied = system.model_copy(update={"device": device.model_copy(update={"memory": memory})})
    varied = varied.with_dimension(0, bandwidth=values["scale_up_bandwidth"], size=int(values["devices_per_node"]))
    varied = varied.with_dimension(-1, bandwidth=values["scale_out_bandwidth"])
    return varied.with_devices(int(values["gpus"]))


def capital_cost(system: System, prices: ComponentPrices) -> float:
    """Dollars: per device, its accelerator, HBM, second tier and network injection bandwidth."""
    return system.devices * _per_device(prices.device, prices, system)


def power_draw(system: System, power: ComponentPower) -> float:
    """Watts of the devices, their memory tiers beyond the board and their network injection."""
    device = power.device if power.device is not None else system.device.power
    if device is None:
        raise SpecError(f"space.power.device: the device {system.device.name} has no board power; give one")
    return system.devices * _per_device(device, power, system)


def _per_device(device: float, rates: ComponentPrices | ComponentPower, system: System) -> float:
    """`device` plus the rates per GiB of each memory tier and per GB/s of each network's injection."""
    tier2 = system.device.second_tier
    return (device + rates.hbm_per_gib * system.device.hbm.capacity / GIB
            + rates.tier2_per_gib * (tier2.capacity / GIB if tier2 else 0.0)
            + rates.scale_up_per_gbps * system.network[0].bandwidth / GIGA
            + rates.scale_out_per_gbps * sum(d.bandwidth for d in system.network[1:]) / GIGA)


@dataclass(frozen=True)
class DesignPoint:
    values: dict[str, Any]  # the system parameters of this point
    system: System
    best: Candidate | None  # the fastest strategy (None: nothing fits)
    cost: float  # dollars
    power: float  # watts
    evaluated: int

    @property
    def step_time_s(self) -> float:
        return self.best.step_time_s if self.best is not None else float("inf")

    @property
    def tokens_per_s(self) -> float:
        return self.best.tokens_per_s if self.best is not None else 0.0

    @property
    def tokens_per_s_per_dollar(self) -> float:
        return self.tokens_per_s / self.cost if self.cost > 0 else float("inf")

    @property
    def tokens_per_joule(self) -> float:
        """Training throughput per watt: tokens/s / W."""
        return self.tokens_per_s / self.power if self.power > 0 else float("inf")


class DesignGoal(StrEnum):
    TIME = "time"  # shortest step
    PER_DOLLAR = "per-dollar"  # most tokens/s per dollar of capital cost
    PER_WATT = "per-watt"  # most tokens per joule


@dataclass(frozen=True)
class CoDesignResult:
    points: tuple[DesignPoint, ...]
    pareto: tuple[int, ...]  # positions in `points` on the front of (step time, cost, power)

    @property
    def strategies_evaluated(self) -> int:
        return sum(p.evaluated for p in self.points)

    def best(self, goal: DesignGoal = DesignGoal.TIME, budget_usd: float | None = None) -> DesignPoint | None:
        """The best system that fits a strategy (and costs at most `budget_usd`) by `goal`; ties go to the
        first in space order."""
        fits = [p for p in self.points if p.best is not None and (budget_usd is None or p.cost <= budget_usd)]
        key = {DesignGoal.TIME: lambda p: p.step_time_s, DesignGoal.PER_DOLLAR: lambda p: -p.tokens_per_s_per_dollar,
               DesignGoal.PER_WATT: lambda p: -p.tokens_per_joule}[goal]
        return min(fits, key=key) if fits else None


def pareto_front(objectives: np.ndarray) -> np.ndarray:
    """Rows (points x objectives, all minimized) that no other row dominates; infinite rows never count."""
    finite = np.isfinite(objectives).all(axis=1)
    front = []
    for i in np.flatnonzero(finite):
        others = objectives[finite]
        dominated = ((others <= objectives[i]).all(axis=1) & (others < objectives[i]).any(axis=1)).any()
        if not dominated:
            front.append(int(i))
    return np.array(front, dtype=np.int64)


def codesign(model: Model, system: System, workload: Training, space: SystemSpace, base: Strategy | None = None,
             strategies: StrategySpace | None = None, executor: Executor = serial) -> CoDesignResult:
    """For every system of `space`, the fastest strategy; then the time / cost / power Pareto front."""
    choices = [getattr(space, p) or (_base_value(system, p),) for p in _PARAMETERS]
    points = []
    for combo in itertools.product(*choices):
        values = dict(zip(_PARAMETERS, combo, strict=True))
        variant = system_variant(system, values)
        found = search(model, variant, workload, base, strategies, Objective.TIME, top_k=1, executor=executor)
        points.append(DesignPoint(values, variant, found.top[0] if found.top else None,
                                  capital_cost(variant, space.prices), power_draw(variant, space.power),
                                  found.evaluated))
    objectives = np.array([[p.step_time_s, p.cost, p.power] for p in points])
    return CoDesignResult(tuple(points), tuple(int(i) for i in pareto_front(objectives)))
