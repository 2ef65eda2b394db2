"""A run file (RUN.yaml): model, system (or a device count), strategy and workload in one document.

`parse_override` and `Relative` come from `specs.overrides` (what-if `--set`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveInt

from armillary.errors import SpecError
from armillary.specs.base import Spec
from armillary.specs.costs import Costs
from armillary.specs.loading import (
    load_model,
    load_stack,
    load_strategy,
    load_system,
    load_workload,
    read_spec_file,
    validate_spec,
)
from armillary.specs.model import Model
from armillary.specs.overrides import Relative, apply_overrides, parse_override
from armillary.specs.stack import hopper_or_later, merged
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Workload

__all__ = ["Relative", "RunFile", "load_costs", "load_run", "parse_override"]


class RunFile(Spec):
    model: str | dict[str, Any] = Field(description="preset name, file path or inline mapping")
    system: str | dict[str, Any] = Field(description="preset name, file path or inline mapping")
    gpus: PositiveInt | None = Field(None, description="size the system to this many devices")
    stack: str | dict[str, Any] | None = Field(
        None, description="software stack (preset name, file or mapping) whose defaults the strategy takes "
        "where it is silent: attention kernel, overlaps, sharding, precision (armillary presets stacks)")
    strategy: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any]
    costs: Costs = Field(default_factory=Costs, description="PUE, $/device-hour, device power (energy and cost "
                         "per token)")


def load_run(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> tuple[
        Model, System, Strategy, Workload]:
    """Read a run file, apply dotted overrides, and resolve every part into a spec.

    Relative file paths inside the run file (model, system, a serving trace) are taken relative to the run
    file.
    """
    path = Path(path)
    data = read_spec_file(path, "run")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping with model, system, strategy, workload")

    def local(value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and (path.parent / value).is_file():
            return str(path.parent / value)
        return value

    run = validate_spec(RunFile, apply_overrides(data, overrides, RunFile, local), "run")

    workload = dict(run.workload)
    serving = workload.get("serving")
    if isinstance(serving, dict) and isinstance(serving.get("trace"), str):  # a trace file next to the run file
        workload["serving"] = {**serving, "trace": local(serving["trace"])}
    system = load_system(local(run.system), run.gpus)
    strategy = run.strategy
    if run.stack is not None:
        stack = load_stack(local(run.stack) if isinstance(run.stack, str) else run.stack)
        tp = strategy.get("tp", 1)
        strategy = merged(stack.strategy_defaults(tp if isinstance(tp, int) else 1,
                                                  hopper_or_later(system.device.name)), strategy)
    return load_model(local(run.model)), system, load_strategy(strategy), load_workload(workload)


def load_costs(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> Costs:
    """The run file's `costs:` block (defaults where absent), with the `costs.*` overrides."""
    data = read_spec_file(Path(path), "run")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping with model, system, strategy, workload")
    mine = [(k, v) for k, v in overrides if k == "costs" or k.startswith("costs.")]
    costs = apply_overrides({"costs": data.get("costs") or {}}, mine, RunFile, lambda v: v)["costs"]
    return validate_spec(Costs, costs, "costs")
