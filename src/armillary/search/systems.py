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

from armillary.display import Displayed, Headline, number, seconds
from armillary.errors import SpecError
from armillary.search.executors import Executor, serial
from armillary.search.layout_cache import LayoutCache
from armillary.search.run import Candidate, Objective, search
from armillary.search.space import StrategySpace
from armillary.specs.base import Spec
from armillary.specs.memory import MemoryTier
from armillary.specs.model import Model
from armillary.specs.quantity import Bytes, BytesPerSecond
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
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
    dimension_per_gbps: dict[str, NonNegativeFloat] = Field(
        default_factory=dict, description="per device and GB/s of one network dimension's injection, by its name "
        "or index (innermost 0); replaces scale_up_per_gbps / scale_out_per_gbps for that dimension")
    sources: dict[str, str] = Field(default_factory=dict)


class ComponentPower(Spec):
    """Watts per component; `device` defaults to the device preset's board power (which includes its HBM)."""

    device: NonNegativeFloat | None = None
    hbm_per_gib: NonNegativeFloat = 0.0
    tier2_per_gib: NonNegativeFloat = 0.0
    scale_up_per_gbps: NonNegativeFloat = 0.0
    scale_out_per_gbps: NonNegativeFloat = 0.0
    dimension_per_gbps: dict[str, NonNegativeFloat] = Field(default_factory=dict)
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
    dimension_bandwidth: dict[str, tuple[BytesPerSecond, ...]] = Field(
        default_factory=dict, description="bandwidths to try per network dimension, by its name or index "
        "(innermost 0): the axes of a network of three or more dimensions")
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


CAPACITIES = ("hbm_capacity", "tier2_capacity")  # what a training step's time and memory do not depend on
DIMENSION = "bandwidth:"  # a value's key for a network dimension's bandwidth: "bandwidth:" + its name


def dimension_index(system: System, key: str, field: str) -> int:
    """The network dimension a space or price key names (its name, or its index from 0 innermost)."""
    names = [d.name for d in system.network]
    if key in names:
        return names.index(key)
    if key.isdigit() and int(key) < len(names):
        return int(key)
    raise SpecError(f"space.{field}: {key!r} is not a network dimension of {system.name}; give a name "
                    f"({', '.join(repr(n) for n in names)}) or an index 0..{len(names) - 1}")


def system_variant(system: System, values: dict[str, Any]) -> System:
    """The base system with the given parameters replaced, sized to values['gpus'] (per-dimension
    bandwidths: keys `DIMENSION` + the dimension's name)."""
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
    for key, bandwidth in values.items():
        if key.startswith(DIMENSION):
            varied = varied.with_dimension(dimension_index(system, key[len(DIMENSION):], "dimension_bandwidth"),
                                           bandwidth=bandwidth)
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
    """`device` plus the rates per GiB of each memory tier and per GB/s of each network dimension's
    injection (the scale-up rate for the innermost, the scale-out rate beyond, unless named per dimension)."""
    tier2 = system.device.second_tier
    per_gbps = [rates.scale_up_per_gbps] + [rates.scale_out_per_gbps] * (len(system.network) - 1)
    for key, rate in rates.dimension_per_gbps.items():
        per_gbps[dimension_index(system, key, "dimension_per_gbps")] = rate
    return (device + rates.hbm_per_gib * system.device.hbm.capacity / GIB
            + rates.tier2_per_gib * (tier2.capacity / GIB if tier2 else 0.0)
            + sum(r * d.bandwidth / GIGA for r, d in zip(per_gbps, system.network, strict=True)))


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


@dataclass(frozen=True, repr=False)
class CoDesignResult(Displayed):
    points: tuple[DesignPoint, ...]
    pareto: tuple[int, ...]  # positions in `points` on the front of (step time, cost, power)

    def headline(self) -> Headline:
        best = self.best()
        return [("systems", str(len(self.points))), ("on_front", str(len(self.pareto))),
                ("strategies_evaluated", number(self.strategies_evaluated)),
                ("fastest_step", seconds(best.step_time_s) if best else "nothing fits")]

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
    named = {dimension_index(system, k, "dimension_bandwidth"): v for k, v in space.dimension_bandwidth.items()}
    for edge, field in ((0, "scale_up_bandwidth"), (len(system.network) - 1, "scale_out_bandwidth")):
        if edge in named and getattr(space, field):
            raise SpecError(f"space: {field} and dimension_bandwidth both vary dimension {edge}; give one")
    parameters = (*_PARAMETERS, *(DIMENSION + system.network[d].name for d in named))
    choices = [getattr(space, p) or (_base_value(system, p),) for p in _PARAMETERS] + list(named.values())
    combos = [dict(zip(parameters, combo, strict=True)) for combo in itertools.product(*choices)]
    # systems that differ only in their memory capacities share one estimate of each block (LayoutCache): a
    # group at a time, so that one group's cache is held at once; the points keep the space's order
    groups: dict[tuple[Any, ...], list[int]] = {}
    for position, values in enumerate(combos):
        groups.setdefault(tuple(v for k, v in values.items() if k not in CAPACITIES), []).append(position)
    found_at: dict[int, DesignPoint] = {}
    for positions in groups.values():
        cache = LayoutCache() if executor is serial else None
        for position in positions:
            values = dict(combos[position])
            variant = system_variant(system, values)
            # the first and last dimensions as varied, whichever axis named them
            values |= {"scale_up_bandwidth": variant.network[0].bandwidth,
                       "scale_out_bandwidth": variant.network[-1].bandwidth}
            found = search(model, variant, workload, base, strategies, Objective.TIME, top_k=1, executor=executor,
                           cache=cache)
            found_at[position] = DesignPoint(values, variant, found.top[0] if found.top else None,
                                             capital_cost(variant, space.prices), power_draw(variant, space.power),
                                             found.evaluated)
    points = [found_at[position] for position in range(len(combos))]
    objectives = np.array([[p.step_time_s, p.cost, p.power] for p in points])
    return CoDesignResult(tuple(points), tuple(int(i) for i in pareto_front(objectives)))
