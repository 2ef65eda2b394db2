"""A step as a task graph on the event engine, or a static inference batch, simulated (`run_simulation`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from armillary.api.inputs import ModelLike, StrategyLike, SystemLike, WorkloadLike, load_specs
from armillary.errors import SpecError
from armillary.specs.strategy import Schedule
from armillary.specs.workload import Inference

# the simulators (numba kernels) load on the first call that needs them
if TYPE_CHECKING:
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult


def run_simulation(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                   gpus: int | None = None, schedule: Schedule | str | None = None, symmetric: bool = True,
                   stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
                   seed: int = 0, classes: bool = False) -> SimulationResult | InferenceSimulation:
    """Simulate one training iteration as a task graph on the event engine (`schedule` defaults to the
    strategy's), or a static inference batch, as `armillary simulate` does. `stragglers` maps a rank to its
    slowdown factor; `jitter` is the relative spread of task times (seeded). `symmetric=False` simulates every
    rank; with `classes` too, one rank per class of ranks with the same program and contention (exact)."""
    m, sysm, st, w = load_specs(model, system, strategy, workload, gpus)
    for name, flag in (("symmetric", symmetric), ("classes", classes)):
        if not isinstance(flag, bool):
            raise SpecError(f"{name}: expected True or False, got {flag!r}")
    from armillary.estimate.result import RunConfig
    from armillary.simulate.inference import simulate_inference
    from armillary.simulate.run import simulate_training

    # the inputs ride on the analytical estimate beside the simulation (`to_frame` shows them)
    config = RunConfig(m, sysm, st, w)
    if isinstance(w, Inference):
        served = simulate_inference(m, sysm, st, w, stragglers, jitter, seed)
        return replace(served, estimate=replace(served.estimate, config=config))
    try:
        chosen = Schedule(schedule) if schedule is not None else None
    except ValueError:
        raise SpecError(f"schedule {schedule!r}: one of {', '.join(s.value for s in Schedule)}") from None
    simulated = simulate_training(m, sysm, st, w, chosen, symmetric, stragglers, jitter, seed, classes)
    return replace(simulated, estimate=replace(simulated.estimate, config=config))


simulate = run_simulation  # the name before `armillary.simulate` became the package again (kept for callers)
