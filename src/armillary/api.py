"""The library's entry points: one call from specifications to a typed result."""

from __future__ import annotations

from typing import Any

from armillary.estimate.result import StepEstimate
from armillary.estimate.training import estimate_training
from armillary.specs.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import SpecError, load_model, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training
from armillary.workload.parameters import count_parameters


def estimate(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
             strategy: Strategy | dict[str, Any], workload: Training | dict[str, Any],
             gpus: int | None = None) -> StepEstimate:
    """Estimate one training iteration. Specs may be objects, preset names, file paths or mappings.

    `gpus` sizes the system; without it the system's own size is used. dp defaults to
    devices / (tp * pp).
    """
    m, sysm = load_model(model), load_system(system, gpus)
    st, w = load_strategy(strategy), load_workload(workload)
    model_parallel = st.tp * st.cp * st.pp
    dp = st.dp if st.dp is not None else sysm.devices // model_parallel
    if dp < 1:
        raise SpecError(f"strategy: tp*cp*pp = {model_parallel} exceeds the system's {sysm.devices} devices")
    return estimate_training(ModelArrays.of(m), StrategyArrays.of(st, dp), TrainingArrays.of(w), sysm)


def parameters(model: Model | str | dict[str, Any]) -> int:
    """Exact parameter count of a model, embeddings and LM head included."""
    return int(count_parameters(ModelArrays.of(load_model(model))).total)
