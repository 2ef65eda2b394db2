"""The layout of a run, derived once from its strategy and system: how many data-parallel ranks, how many
micro-batches, how many layers each pipeline stage holds, where each parallel group's ranks sit, and how
many tokens each rank works on. Every function broadcasts over arrays (a search evaluates many layouts
at once)."""

from __future__ import annotations

from armillary.errors import SpecError
from armillary.specs.strategy import Strategy
from armillary.specs.system import System


def data_parallel(strategy: Strategy, system: System) -> int:
    """Data-parallel ranks (model replicas in inference): the strategy's dp, else devices / (tp cp pp)."""
    model_parallel = strategy.tp * strategy.cp * strategy.pp
    dp = strategy.dp if strategy.dp is not None else system.devices // model_parallel
    if dp < 1:
        raise SpecError(f"strategy: tp*cp*pp = {model_parallel} exceeds the system's {system.devices} devices")
    return dp
