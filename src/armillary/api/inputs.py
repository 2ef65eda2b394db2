"""What the calls of `armillary.api` accept for each specification: the spec object, a preset name or file
path (`specs.loading`), or a mapping of its fields."""

from __future__ import annotations

from typing import Any

from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Workload

ModelLike = Model | str | dict[str, Any]
SystemLike = System | str | dict[str, Any]
StrategyLike = Strategy | str | dict[str, Any]
WorkloadLike = Workload | dict[str, Any]
