"""The library's entry points: one call from specifications to a typed result."""

from __future__ import annotations

from typing import Any, overload

from armillary.errors import SpecError
from armillary.estimate.inference import estimate_inference
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.result import StepEstimate
from armillary.estimate.training import estimate_training
from armillary.serving.run import ServingResult, serve_trace
from armillary.serving.trace import Trace, load_trace, poisson_trace
from armillary.specs.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training, Workload
from armillary.workload.parameters import count_parameters


@overload
def estimate(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
             strategy: Strategy | dict[str, Any], workload: Training, gpus: int | None = None) -> StepEstimate: ...


@overload
def estimate(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
             strategy: Strategy | dict[str, Any], workload: Inference,
             gpus: int | None = None) -> InferenceEstimate: ...


@overload
def estimate(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
             strategy: Strategy | dict[str, Any], workload: Workload | dict[str, Any],
             gpus: int | None = None) -> StepEstimate | InferenceEstimate: ...


def estimate(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
             strategy: Strategy | dict[str, Any], workload: Workload | dict[str, Any],
             gpus: int | None = None) -> StepEstimate | InferenceEstimate:
    """Estimate one training iteration (a training workload) or a static inference batch (an inference
    workload). Specs may be objects, preset names, file paths or mappings.

    `gpus` sizes the system; without it the system's own size is used. dp (data-parallel ranks, or model
    replicas in inference) defaults to devices / (tp * cp * pp).
    """
    m, sysm = load_model(model), load_system(system, gpus)
    st, w = load_strategy(strategy), load_workload(workload)
    dp = data_parallel(st, sysm)
    if isinstance(w, Inference):
        return estimate_inference(ModelArrays.of(m), st, w, sysm, dp)
    return estimate_training(ModelArrays.of(m), StrategyArrays.of(st, dp), TrainingArrays.of(w), sysm)


def simulate_serving(model: Model | str | dict[str, Any], system: System | str | dict[str, Any],
                     strategy: Strategy | dict[str, Any], workload: Inference | dict[str, Any],
                     rate: float | None = None, duration_s: float | None = None, gpus: int | None = None,
                     trace: Trace | None = None) -> ServingResult:
    """Serve a request stream on dp replicas (`data_parallel`): `trace`, else the workload's
    `serving.trace` CSV, else Poisson arrivals at `rate` requests/s for `duration_s` seconds with the
    workload's lengths. Returns latency percentiles, throughput and goodput."""
    m, sysm = load_model(model), load_system(system, gpus)
    st, w = load_strategy(strategy), load_workload(workload)
    if not isinstance(w, Inference):
        raise SpecError("workload: serving needs an inference workload (kind: inference)")
    replicas = data_parallel(st, sysm)
    if trace is None:
        if w.serving.trace is not None:
            trace = load_trace(w.serving.trace)
        elif rate is None or duration_s is None:
            raise SpecError("serving: give a rate and a duration, or a trace (workload.serving.trace)")
        else:
            sv = w.serving
            trace = poisson_trace(rate, duration_s, w.input_len, w.output_len, sv.lengths, sv.spread, sv.seed)
    return serve_trace(ModelArrays.of(m), st, w, sysm, replicas, trace)


def data_parallel(st: Strategy, sysm: System) -> int:
    """Data-parallel ranks (model replicas in inference): the strategy's dp, else devices / (tp cp pp)."""
    model_parallel = st.tp * st.cp * st.pp
    dp = st.dp if st.dp is not None else sysm.devices // model_parallel
    if dp < 1:
        raise SpecError(f"strategy: tp*cp*pp = {model_parallel} exceeds the system's {sysm.devices} devices")
    return dp


def parameters(model: Model | str | dict[str, Any]) -> int:
    """Exact parameter count of a model, embeddings and LM head included."""
    return int(count_parameters(ModelArrays.of(load_model(model))).total)
