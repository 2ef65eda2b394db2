"""`network-optimize` as one function: a run's per-dimension bandwidths under a request's constraints and
objective, refused when the run itself is infeasible (the estimator's feasibility, as `estimate` reports
it), priced by component classes (named, or inferred per dimension) and, for time x cost, with the
device's own price in the objective (LIBRA's system perf-per-cost, `network_bandwidth.optimize`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from armillary.errors import SpecError
from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_run
from armillary.search.bandwidth_refine import Refined, estimator_step, refine
from armillary.search.bandwidth_workload import workload_from_estimate
from armillary.search.network_bandwidth import (
    BandwidthConstraints,
    BandwidthObjective,
    BandwidthOptimum,
    BandwidthWorkload,
    optimize,
    step_time,
)
from armillary.search.network_prices import DimensionPrices, device_price, dimension_prices
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


@dataclass(frozen=True)
class NetworkRequest:
    """What to optimize: the constraints (bandwidths in bytes/s, per device), the objective, and where the
    prices come from (None: the component classes and the device price table)."""

    constraints: BandwidthConstraints  # cost_per_bw / power_per_bw None: from the component classes
    objective: BandwidthObjective = BandwidthObjective.TIME
    pipelined: bool = True
    device_cost: float | None = None  # $ (time_cost) or W (time_power) per device besides the network
    refine: bool = False


@dataclass(frozen=True)
class NetworkPlan:
    """The answer: the model optimum, the estimator's refinement (when asked), the step and prices now."""

    work: BandwidthWorkload
    constraints: BandwidthConstraints  # as solved, prices filled in
    prices: DimensionPrices
    current: np.ndarray  # the system's own bandwidths
    current_step_s: float  # the LIBRA-style model's step at them
    optimum: BandwidthOptimum
    refined: Refined | None
    estimator_current_s: float | None  # the estimator's step at the system's own bandwidths (with refine)
    device_cost: float  # the fixed term of the objective ($ or W per device; 0 for time)
    device_cost_source: str
    cost_source: str
    power_source: str
    devices: int

    @property
    def bandwidth(self) -> np.ndarray:
        """What to build: the refined bandwidths when refined, else the model optimum."""
        return self.refined.bandwidth if self.refined is not None else self.optimum.bandwidth


def infeasible_message(result: StepEstimate) -> str:
    return ("the run is infeasible as `armillary estimate` sees it: " + "; ".join(result.infeasible_reasons)
            + ". network-optimize sizes the network of a run that runs: change the strategy first (or run "
            "`armillary search`)")


def optimize_network(model: Model, system: System, strategy: Strategy, workload: Training,
                     request: NetworkRequest) -> NetworkPlan:
    """The bandwidths for `request`; SpecError for an infeasible run or a price that is missing."""
    result = estimate_run(model, system, strategy, workload)
    if not isinstance(result, StepEstimate):
        raise SpecError("network-optimize takes a training run")
    if not result.feasible:
        raise SpecError(infeasible_message(result))
    work = workload_from_estimate(result, system, strategy, request.pipelined)
    prices = dimension_prices(system.network, infer=True)
    cons = request.constraints
    cost_source = _source(cons.cost_per_bw, prices, prices.cost_per_bw, prices.missing_cost)
    power_source = _source(cons.power_per_bw, prices, prices.power_per_bw, prices.missing_power)
    cons = replace(cons, cost_per_bw=prices.cost_per_bw if cons.cost_per_bw is None else cons.cost_per_bw,
                   power_per_bw=prices.power_per_bw if cons.power_per_bw is None else cons.power_per_bw)
    fixed, fixed_source = _device_cost(system, request)
    try:
        best = optimize(work, cons, request.objective, fixed=fixed)
    except ValueError as err:
        power = request.objective is BandwidthObjective.TIME_POWER
        reason = prices.missing_power if power else prices.missing_cost
        hint = f" ({reason}; give --{'power' if power else 'cost'})" if (
            request.objective is not BandwidthObjective.TIME and reason) else ""
        raise SpecError(f"{err}{hint}") from None
    now = np.array([d.bandwidth for d in system.network])
    refined, estimated_now = None, None
    if request.refine:
        weights = None if request.objective is BandwidthObjective.TIME else (
            cons.power_per_bw if request.objective is BandwidthObjective.TIME_POWER else cons.cost_per_bw)
        refined = refine(model, system, strategy, workload, best.bandwidth, cons, weights=weights, fixed=fixed)
        estimated_now = estimator_step(model, system, strategy, workload, now)
    return NetworkPlan(work, cons, prices, now, float(step_time(work, now)), best, refined, estimated_now, fixed,
                       fixed_source, cost_source, power_source, math.prod(system.sizes))


def _source(given: np.ndarray | None, prices: DimensionPrices, table: np.ndarray | None, missing: str) -> str:
    """Where the per-dimension figures came from."""
    if given is not None:
        return "command line"
    if table is None:
        return f"none ({missing})"
    if not any(prices.inferred):
        return "component classes (presets/network/components.yaml)"
    return "component classes (presets/network/components.yaml), inferred by kind where a dimension names none"


def _device_cost(system: System, request: NetworkRequest) -> tuple[float, str]:
    """The objective's fixed term per device: the given figure, else the device's price (time_cost) or
    board power (time_power)."""
    if request.objective is BandwidthObjective.TIME:
        if request.device_cost is not None:
            raise SpecError("--gpu-cost weighs the device in --objective time_cost or time_power; objective time "
                            "minimizes the step alone")
        return 0.0, "none (objective time)"
    if request.device_cost is not None:
        if not math.isfinite(request.device_cost) or request.device_cost < 0:
            raise SpecError(f"--gpu-cost must be a finite number >= 0, not {request.device_cost}")
        return request.device_cost, "command line"
    if request.objective is BandwidthObjective.TIME_POWER:
        if system.device.power is None:
            raise SpecError(f"device {system.device.name!r} has no power figure: give --gpu-cost WATTS "
                            "(or 0 to weigh the network's power alone)")
        return float(system.device.power), f"device {system.device.name} board power (device preset)"
    price = device_price(system.device.name)
    return price.dollars, f"presets/costs/device-prices.yaml ({system.device.name}, a street-price estimate)"
