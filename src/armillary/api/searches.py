"""Searches: the best strategies of a space for one system (`run_search`), and the best per system of a
system space with their Pareto front (`run_codesign`); `search` and `codesign` take the workload before the
strategy, the order before the API had one."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from armillary import defaults
from armillary.api.inputs import ModelLike, StrategyLike, SystemLike, WorkloadLike
from armillary.errors import SpecError
from armillary.specs.loading import load_model, load_spec, load_strategy, load_system, load_workload
from armillary.specs.workload import Inference, Training

# the search spaces and the searches load on the first call that needs them
if TYPE_CHECKING:
    from armillary.search.executors import Executor
    from armillary.search.inference import InferenceSearchResult, InferenceSpace
    from armillary.search.run import Objective, SearchResult
    from armillary.search.space import StrategySpace
    from armillary.search.systems import CoDesignResult, SystemSpace


def run_search(model: ModelLike, system: SystemLike, strategy: StrategyLike | None = None,
               workload: WorkloadLike | None = None,
               space: StrategySpace | InferenceSpace | str | Mapping[str, Any] | None = None, gpus: int | None = None,
               objective: Objective | str = "time", top: int = defaults.SEARCH_TOP,
               executor: Executor | None = None, progress: Callable[[int, int], None] | None = None,
               checkpoint: Path | None = None) -> SearchResult | InferenceSearchResult:
    """The best strategies for `model` on `system` and `workload`, as `armillary search` does; arguments in
    the order of `run_estimate` (`strategy` may be None: `defaults.SEARCH_BASE_STRATEGY`). Training: the
    `top` fastest (or, with objective "memory", leanest) points of a strategy space (`StrategySpace`;
    default: every valid value), fields outside the space from `strategy`. Inference: the configurations of
    an `InferenceSpace` (it states the TPOT limit) with the most output tokens/s per device. `executor`
    (default: serial, in this process) evaluates the chunks of a training space.

    Example: `run_search("llama3-8b", "dgx-h100", None, {"seq_len": 2048, "global_batch": 64}, gpus=8)`."""
    from armillary.search.executors import serial
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.search.run import Objective
    from armillary.search.run import search as search_strategies
    from armillary.search.space import StrategySpace
    from armillary.validation.bands import error_band

    if workload is None:
        raise SpecError("workload: a search needs a workload (Training or Inference, or a mapping of one)")
    m, sysm, w = load_model(model), load_system(system, gpus), load_workload(workload)
    base = load_strategy(strategy if strategy is not None else defaults.SEARCH_BASE_STRATEGY)
    if isinstance(w, Inference):
        if space is None:
            raise SpecError("space: an inference search needs an InferenceSpace with tpot_limit_s")
        return search_inference(m, sysm, w, base, load_spec(InferenceSpace, space, "space"), top)
    spec_space = load_spec(StrategySpace, space, "space") if space is not None else None
    try:
        goal = Objective(objective)
    except ValueError:
        raise SpecError(f"objective {objective!r}: one of {', '.join(o.value for o in Objective)}") from None
    found = search_strategies(m, sysm, w, base, spec_space, goal, top,
                              executor=serial if executor is None else executor, progress=progress,
                              checkpoint=checkpoint)
    return replace(found, top=tuple(replace(c, error_band=error_band(m, sysm, c.strategy)) for c in found.top))


def search(model: ModelLike, system: SystemLike, workload: WorkloadLike, strategy: StrategyLike | None = None,
           space: StrategySpace | InferenceSpace | str | Mapping[str, Any] | None = None, gpus: int | None = None,
           objective: Objective | str = "time", top: int = defaults.SEARCH_TOP,
           executor: Executor | None = None, progress: Callable[[int, int], None] | None = None,
           checkpoint: Path | None = None) -> SearchResult | InferenceSearchResult:
    """`run_search` with the workload before the strategy: the order before the API had one (kept for
    callers)."""
    return run_search(model, system, strategy, workload, space, gpus, objective, top, executor, progress, checkpoint)


def run_codesign(model: ModelLike, system: SystemLike, strategy: StrategyLike | None = None,
                 workload: WorkloadLike | None = None, systems: SystemSpace | str | Mapping[str, Any] | None = None,
                 space: StrategySpace | str | Mapping[str, Any] | None = None,
                 executor: Executor | None = None) -> CoDesignResult:
    """`codesign` in the order of `run_estimate` (model, system, strategy, workload), as `armillary search
    --space` does: for every system of `systems` (variants of `system`), the fastest strategy of `space`
    (fields outside it from `strategy`, default `defaults.STRATEGY`); the time / cost / power Pareto front."""
    if workload is None or systems is None:
        raise SpecError("workload / systems: co-design needs a training workload and a system space")
    return codesign(model, system, workload, systems, strategy, space, executor)


def codesign(model: ModelLike, system: SystemLike, workload: WorkloadLike,
             systems: SystemSpace | str | Mapping[str, Any], strategy: StrategyLike | None = None,
             space: StrategySpace | str | Mapping[str, Any] | None = None,
             executor: Executor | None = None) -> CoDesignResult:
    """For every system of `systems` (variants of `system`), the fastest strategy of `space`; the time /
    cost / power Pareto front. The workload before the strategy: `run_codesign` takes the one order."""
    from armillary.search.executors import serial
    from armillary.search.space import StrategySpace
    from armillary.search.systems import SystemSpace
    from armillary.search.systems import codesign as codesign_systems
    from armillary.validation.bands import error_band

    w = load_workload(workload)
    if not isinstance(w, Training):
        raise SpecError("workload: co-design searches a training workload")
    base = load_strategy(strategy if strategy is not None else defaults.SEARCH_BASE_STRATEGY)
    spec_space = load_spec(StrategySpace, space, "space") if space is not None else None
    m = load_model(model)
    designs = codesign_systems(m, load_system(system), w, load_spec(SystemSpace, systems, "space"), base, spec_space,
                               serial if executor is None else executor)
    return replace(designs, points=tuple(
        replace(p, best=replace(p.best, error_band=error_band(m, p.system, p.best.strategy))) if p.best else p
        for p in designs.points))
