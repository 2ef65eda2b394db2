"""The static estimates: one training step or inference batch (`run_estimate`), a run file beside its variants
(`compare_variants`), and a model's parameter count (`parameters`)."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from armillary.api.inputs import ModelLike, StrategyLike, SystemLike, WorkloadLike, load_specs
from armillary.errors import SpecError
from armillary.memo import quick_replace
from armillary.specs.loading import load_model, load_system
from armillary.specs.workload import Inference, Training

# the formulas and the validation bands load on the first call that needs them
if TYPE_CHECKING:
    from armillary.estimate.compare import Comparison
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import StepEstimate


@overload
def run_estimate(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: Training,
                 gpus: int | None = None) -> StepEstimate: ...


@overload
def run_estimate(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: Inference,
                 gpus: int | None = None) -> InferenceEstimate: ...


@overload
def run_estimate(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                 gpus: int | None = None) -> StepEstimate | InferenceEstimate: ...


def run_estimate(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                 gpus: int | None = None) -> StepEstimate | InferenceEstimate:
    """Estimate one training iteration (a training workload) or a static inference batch (an inference
    workload), as `armillary estimate` does. dp (data-parallel ranks, or model replicas in inference)
    defaults to devices / (tp cp pp). The result carries its inputs (`config`) and an error band.

    Example: `run_estimate("llama3-8b", "dgx-h100", {"tp": 2}, {"seq_len": 2048, "global_batch": 32}, gpus=8)`."""
    RunConfig, StepEstimate, estimate_run, error_band, inference_error_band = _estimate_parts()
    m, sysm, st, w = load_specs(model, system, strategy, workload, gpus)
    result = estimate_run(m, sysm, st, w)
    # how far to trust it: the validation residuals of its regime
    band = inference_error_band(m, sysm, st, w) if isinstance(w, Inference) else error_band(m, sysm, st)
    feasible = result.feasible
    if (feasible is not True and isinstance(result, StepEstimate) and isinstance(w, Training)
            and not np.ndim(feasible)):  # (a feasible one gets no advice: `memory_advice` gives ())
        from armillary.estimate.fit import memory_advice  # an out-of-memory run: what would make it fit

        # one copy of the result (`memo.quick_replace`: a StepEstimate has 23 fields, dataclasses.replace costs 5 us)
        return quick_replace(result, advice=memory_advice(m, sysm, st, w, result), error_band=band,
                             config=RunConfig(m, sysm, st, w))
    return quick_replace(result, error_band=band, config=RunConfig(m, sysm, st, w))


@functools.cache
def _estimate_parts() -> tuple[Any, ...]:
    """What `run_estimate` calls, imported on its first call (not at `import armillary`), then kept."""
    from armillary.estimate.result import RunConfig, StepEstimate
    from armillary.estimate.run import estimate_run
    from armillary.validation.bands import error_band, inference_error_band

    return RunConfig, StepEstimate, estimate_run, error_band, inference_error_band


estimate = run_estimate  # the name before `armillary.estimate` became the package again (kept for callers)


def compare_variants(run_file: Path | str, variants: Sequence[str | Mapping[str, Any]],
                     overrides: Sequence[str | tuple[str, Any]] = ()) -> Comparison:
    """`estimate` of a run file and of each variant of it side by side (`estimate.compare`): a variant is a
    set of --set style overrides, as text ('strategy.tp=4,strategy.pp=2', optionally 'NAME: ...') or a
    mapping {'strategy.tp': 4}; `overrides` apply to every column first. Columns: the run file's name, then
    each variant's."""
    from armillary.estimate.compare import compare
    from armillary.estimate.economics import economics_of
    from armillary.specs.overrides import parse_override
    from armillary.specs.run import load_costs, load_run
    from armillary.specs.variants import variant_of

    base = [parse_override(o) if isinstance(o, str) else o for o in overrides]
    named: list[tuple[str, list[tuple[str, Any]]]] = [(Path(run_file).stem, base)]
    named += [(v.name, [*base, *v.overrides]) for v in map(variant_of, variants)]
    results: list[tuple[str, StepEstimate | InferenceEstimate]] = []
    money = []
    for i, (name, changes) in enumerate(named):
        try:
            model, system, strategy, workload = load_run(run_file, changes)
        except SpecError as err:
            raise SpecError(f"variant {name!r}: {err}" if i else str(err)) from None
        result = estimate(model, system, strategy, workload)
        results.append((name, result))
        money.append(economics_of(result, result.config.system if result.config else load_system(system),
                                  load_costs(run_file, changes)))
    return compare(results, money)


def parameters(model: ModelLike) -> int:
    """Exact parameter count of a model, embeddings and LM head included."""
    from armillary.plan.arrays import ModelArrays
    from armillary.workload.parameters import count_parameters

    return int(count_parameters(ModelArrays.of(load_model(model))).total)
