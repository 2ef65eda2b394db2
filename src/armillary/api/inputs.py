"""What the calls of `armillary.api` accept for each specification: the spec object, a preset name or file
path, or a mapping of its fields; and the four of a call loaded (`specs.loading`)."""

from __future__ import annotations

from typing import Any

from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Workload

ModelLike = Model | str | dict[str, Any]
SystemLike = System | str | dict[str, Any]
StrategyLike = Strategy | str | dict[str, Any]
WorkloadLike = Workload | dict[str, Any]


def load_specs(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
               gpus: int | None = None) -> tuple[Model, System, Strategy, Workload]:
    """A call's four specifications loaded (`specs.loading`) in the order model, system, strategy, workload
    (the first one that is wrong is the one an error names), the system sized to `gpus`."""
    return load_model(model), load_system(system, gpus), load_strategy(strategy), load_workload(workload)
