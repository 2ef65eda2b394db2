"""A run file (RUN.yaml): model, system (or a device count), strategy and workload in one document."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, PositiveInt

from armillary.errors import SpecError
from armillary.specs.base import Spec
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
from armillary.specs.stack import hopper_or_later, merged
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Workload


class RunFile(Spec):
    model: str | dict[str, Any] = Field(description="preset name, file path or inline mapping")
    system: str | dict[str, Any] = Field(description="preset name, file path or inline mapping")
    gpus: PositiveInt | None = Field(None, description="size the system to this many devices")
    stack: str | dict[str, Any] | None = Field(
        None, description="software stack (preset name, file or mapping) whose defaults the strategy takes "
        "where it is silent: attention kernel, overlaps, sharding, precision (armillary presets stacks)")
    strategy: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any]


def _set(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        if not isinstance(node.get(k), dict):
            node[k] = {}
        node = node[k]
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'strategy.tp=4' -> ('strategy.tp', 4); values are read as YAML scalars."""
    if "=" not in text:
        raise SpecError(f"override {text!r}: expected FIELD=VALUE, e.g. strategy.tp=4")
    key, value = text.split("=", 1)
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as err:
        raise SpecError(f"override {text!r}: the value is not valid YAML ({err.__class__.__name__})") from None


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
    for key, value in overrides:
        _set(data, key, value)
    run = validate_spec(RunFile, data, "run")

    def local(value: str | dict[str, Any]) -> str | dict[str, Any]:
        if isinstance(value, str) and (path.parent / value).is_file():
            return str(path.parent / value)
        return value

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
