"""What makes an out-of-memory training run fit: its largest memory categories, and the first of a ladder of
strategy changes (`defaults.FIT_CHANGES`, each on top of the ones before) under which the same estimator finds
it fits, else a pointer to `armillary search`. Reasons only: the estimate itself is unchanged."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from armillary import defaults
from armillary.errors import ArmillaryError
from armillary.estimate.result import MemoryBreakdown, StepEstimate
from armillary.estimate.run import estimate_training_run
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training

GIB = 2**30
SHOWN = 3  # memory categories named


def largest_categories(memory: MemoryBreakdown, shown: int = SHOWN) -> str:
    """'activations 120.3 GiB, optimizer states 26.2 GiB, ...': the `shown` largest categories per device."""
    sizes = sorted(((float(getattr(memory, f.name)), f.name.replace("_", " ")) for f in fields(memory)),
                   reverse=True)
    return ", ".join(f"{name} {size / GIB:.1f} GiB" for size, name in sizes[:shown] if size > 0)


def _changed(strategy: Strategy, change: dict[str, Any]) -> dict[str, Any]:
    """The fields of `change` that differ from `strategy` ("x2": double the current degree)."""
    out = {k: getattr(strategy, k) * 2 if v == "x2" else v for k, v in change.items()}
    return {k: v for k, v in out.items() if getattr(strategy, k) != v}


def _override(key: str, value: Any) -> str:
    text = str(value).lower() if isinstance(value, bool) else str(value)
    return f"--set strategy.{key}={text}"


def fitting_change(model: Model, system: System, strategy: Strategy, workload: Training,
                   ladder: tuple[dict[str, Any], ...] = defaults.FIT_CHANGES) -> tuple[dict[str, Any],
                                                                                      StepEstimate] | None:
    """The fields changed on the first rung of `ladder` (cumulative) whose estimate is feasible, with that
    estimate; None when no rung fits. A rung the layout refuses (tp beyond a node's devices, pp beyond the
    layers) is skipped."""
    current, changes = strategy, dict[str, Any]()
    for rung in ladder:
        step = _changed(current, rung)
        if not step:
            continue
        try:
            candidate = Strategy.model_validate({**current.model_dump(), **step})
            result = estimate_training_run(model, system, candidate, workload)
        except (ArmillaryError, ValueError):
            continue
        current, changes = candidate, {**changes, **step}
        if bool(result.feasible):
            return changes, result
    return None


def memory_advice(model: Model, system: System, strategy: Strategy, workload: Training,
                  result: StepEstimate) -> tuple[str, ...]:
    """Reasons to add to an out-of-memory training estimate: its largest categories, then the first change
    that fits (with the --set overrides that state it) or `armillary search`."""
    if bool(result.feasible) or float(result.memory_hbm.total) <= float(result.hbm_capacity_bytes):
        return ()
    advice = [f"largest per device: {largest_categories(result.memory_hbm)}"]
    found = fitting_change(model, system, strategy, workload)
    if found is None:
        advice.append("none of flash attention, sequence parallelism, ZeRO-1, recomputation or twice the pp / tp "
                      "makes it fit: run `armillary search` (or add devices)")
    else:
        changes, fits = found
        stated = ", ".join(f"{k}={v}" for k, v in changes.items())
        advice.append(f"fits with {stated}: {float(fits.memory_hbm.total) / GIB:.1f} GiB of "
                      f"{float(fits.hbm_capacity_bytes) / GIB:.1f} GiB, step {float(fits.step_time_s):.3g} s ("
                      + " ".join(_override(k, v) for k, v in changes.items()) + "); `armillary search` finds the "
                      "fastest that fits")
    return tuple(advice)
