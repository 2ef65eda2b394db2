"""A run file (RUN.yaml): model, system (or a device count), strategy and workload in one document.

`parse_override` and `Relative` come from `specs.overrides` (what-if `--set`)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, PositiveInt, model_validator
from pydantic_core import PydanticCustomError

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

__all__ = ["BenchmarkSection", "Client", "Mode", "Relative", "RunFile", "load_benchmark", "load_costs", "load_run",
           "parse_override"]


class Mode(StrEnum):
    """How a benchmark client sends its requests (`serving.benchmark`, which runs them)."""

    RATE = "rate"
    OFFLINE = "offline"
    CONCURRENCY = "concurrency"
    MLPERF_OFFLINE = "mlperf-offline"
    MLPERF_SERVER = "mlperf-server"
    MLPERF_INTERACTIVE = "mlperf-interactive"


class Client(StrEnum):
    """A benchmark tool that launches the engine with settings of its own (none: the server's)."""

    TRTLLM_BENCH = "trtllm-bench"  # TensorRT-LLM 1.x trtllm-bench throughput (serving.trtllm_bench)


class BenchmarkSection(Spec):
    """How a published benchmark runs the serving workload: the run file's `benchmark:` section, the mapping
    `api.serve_benchmark` takes, and `armillary serve`'s --mode, --requests, --rate, --concurrency and --client
    (which override the section's fields). `serving.benchmark.benchmark_of` turns it into the run's
    `Benchmark`, which checks what each mode needs (a rate, a concurrency; trtllm-bench offline only)."""

    mode: Mode = Field(description="rate (Poisson at `rate`), offline (all at once), concurrency (at most "
                       "`concurrency` outstanding), mlperf-offline, mlperf-server, mlperf-interactive (at `rate` QPS)")
    requests: int | None = Field(None, description="requests the client sends; none: not stated, the run reaches "
                                 "its steady state and rates are read over the steady window")
    rate: float | None = Field(None, description="requests/s of an open-loop mode (rate, mlperf-server, "
                               "mlperf-interactive)")
    concurrency: int | None = Field(None, description="outstanding requests of mode concurrency")
    client: Client | None = Field(None, description="the benchmark tool, where it launches the engine itself: "
                                  "trtllm-bench (mode offline, a TensorRT-LLM 1.x engine); none: a client of the "
                                  "engine's server as its profile launches it")

    @model_validator(mode="before")
    @classmethod
    def _mode_stated(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("mode") is None:
            raise PydanticCustomError("mode_missing", "mode: missing; give one of {modes}",
                                      {"modes": ", ".join(m.value for m in Mode)})
        return data


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
    benchmark: BenchmarkSection | None = Field(
        None, description="serve the inference workload as a published benchmark runs it (`armillary serve` "
        "without --mode; `BenchmarkSection`), e.g. {mode: offline, client: trtllm-bench}; none: serve needs "
        "--rate, --max-rate, --mode or a trace")


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


def load_benchmark(path: str | Path, overrides: Sequence[tuple[str, Any]] = ()) -> BenchmarkSection | None:
    """The run file's `benchmark:` section (None where it has none) with the `benchmark.*` overrides (which
    may also give one)."""
    data = read_spec_file(Path(path), "run")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping with model, system, strategy, workload")
    mine = [(k, v) for k, v in overrides if k == "benchmark" or k.startswith("benchmark.")]
    section = apply_overrides({"benchmark": data.get("benchmark")}, mine, RunFile, lambda v: v)["benchmark"]
    return None if section is None else validate_spec(BenchmarkSection, section, "benchmark")
