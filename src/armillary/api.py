"""The public facade: one call from specifications to a typed result.

Every function accepts spec objects, preset names, file paths or mappings alike (`specs.loading`), and
`gpus` sizes the system (default: the system's own size). Internal modules never import this one: they
call the layer below (`estimate.run`, `search.run`, `simulate.run`...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from armillary import defaults
from armillary.errors import SpecError
from armillary.memo import quick_replace
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_model, load_spec, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.strategy import Schedule, Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training, Workload

# the formulas, the simulators (numba kernels), search spaces, the validation harness, collective sweeps and
# run files load on the first call that needs them: `import armillary` costs about what the specs cost
if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow
    from armillary.estimate.compare import Comparison
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import StepEstimate
    from armillary.search.inference import InferenceSearchResult, InferenceSpace
    from armillary.search.run import Executor, Objective, SearchResult
    from armillary.search.space import StrategySpace
    from armillary.search.systems import CoDesignResult, SystemSpace
    from armillary.serving.benchmark import Benchmark, BenchmarkResult
    from armillary.serving.rate import MaxRate
    from armillary.serving.run import ServingResult
    from armillary.serving.trace import Trace
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult
    from armillary.validation.run import RowResult

ModelLike = Model | str | dict[str, Any]
SystemLike = System | str | dict[str, Any]
StrategyLike = Strategy | str | dict[str, Any]
WorkloadLike = Workload | dict[str, Any]


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
    m, sysm, st, w = load_model(model), load_system(system, gpus), load_strategy(strategy), load_workload(workload)
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


def simulate_serving(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                     rate: float | None = None, duration_s: float | None = None, gpus: int | None = None,
                     trace: Trace | None = None) -> ServingResult:
    """Serve a request stream on dp replicas: `trace`, else the workload's `serving.trace` CSV, else Poisson
    arrivals at `rate` requests/s for `duration_s` seconds with the workload's lengths. Returns latency
    percentiles, throughput and goodput."""
    m, sysm = load_model(model), load_system(system, gpus)
    st, w = load_strategy(strategy), load_workload(workload)
    if not isinstance(w, Inference):
        raise SpecError("workload: serving needs an inference workload (kind: inference)")
    from armillary.plan.arrays import ModelArrays
    from armillary.plan.layout import data_parallel
    from armillary.serving.engine import with_engine
    from armillary.serving.run import serve_trace
    from armillary.serving.trace import generated_trace, load_trace
    from armillary.validation.bands import inference_error_band

    if trace is None:
        if w.serving.trace is not None:
            trace = load_trace(w.serving.trace)
        elif rate is None or duration_s is None:
            raise SpecError("serving: give a rate and a duration, or a trace (workload.serving.trace)")
        else:
            trace = generated_trace(w, rate, duration_s)
    served = serve_trace(ModelArrays.of(m), st, w, sysm, data_parallel(st, sysm), trace)
    from armillary.estimate.result import RunConfig

    engine = with_engine(w, None)[1]
    return replace(served, error_band=inference_error_band(m, sysm, st, w, engine.name if engine else "generic"),
                   config=RunConfig(m, sysm, st, w))


def max_rate(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
             duration_s: float = defaults.SERVE_DURATION_S, seeds: int = defaults.MAX_RATE_SEEDS,
             gpus: int | None = None) -> MaxRate:
    """The largest request rate (requests/s) whose served stream meets the workload's SLOs, as `armillary
    serve --max-rate` finds it: P90 TTFT <= `serving.ttft_slo_s` and P99 TPOT <= `serving.tpot_slo_s` on the
    steady part of the run (`serving.rate.steady_meets`), the mean over `seeds` seeds of Poisson arrivals
    (a trace file is stretched to each rate, one seed). `.rate` is the answer, `.result` the run there.

    Example: `max_rate("llama2-70b", "dgx-h100", {"tp": 4}, {"kind": "inference", "input_len": 512,
    "output_len": 128}, gpus=8).rate`."""
    from armillary.arguments import number, whole
    from armillary.errors import ArmillaryError
    from armillary.serving.rate import analytical_rate, steady_max_rate
    from armillary.serving.trace import load_trace, scaled

    m, sysm, st, w = load_model(model), load_system(system, gpus), load_strategy(strategy), load_workload(workload)
    if not isinstance(w, Inference):
        raise SpecError("workload: serving needs an inference workload (kind: inference)")
    duration_s, seeds = number("duration_s", duration_s, above=True), whole("seeds", seeds, 1, 100)
    sv = w.serving
    base = load_trace(sv.trace) if sv.trace is not None else None

    def serve(rate: float, seed: int) -> ServingResult:
        if base is not None:
            return simulate_serving(m, sysm, st, w, trace=scaled(base, rate))
        seeded = w.model_copy(update={"serving": sv.model_copy(update={"seed": sv.seed + seed})})
        return simulate_serving(m, sysm, st, seeded, rate, duration_s)

    # from the static estimate's rate (None where it refuses the layout, e.g. a batch attention_dp cannot split)
    try:
        start = analytical_rate(estimate(m, sysm, st, w))  # looked up here: tests replace api.estimate
    except ArmillaryError:
        start = None
    found = steady_max_rate(serve, 1 if base is not None else seeds, start=start)
    if found.result is None:
        raise SpecError(f"no rate meets P90 TTFT <= {sv.ttft_slo_s} s and P99 TPOT <= {sv.tpot_slo_s} s")
    return found


def serve_benchmark(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                    benchmark: Benchmark | dict[str, Any], gpus: int | None = None) -> BenchmarkResult:
    """Serve the workload as a published benchmark runs it (`serving.benchmark`): mode rate, offline,
    concurrency, mlperf-offline, mlperf-server or mlperf-interactive, e.g. {"mode": "concurrency",
    "concurrency": 50}. Without a request count the run is long enough to reach its steady state and its
    rates are read over the steady window; MLPerf scenarios are judged on their P99 latency limits."""
    from armillary.plan.arrays import ModelArrays
    from armillary.plan.layout import data_parallel
    from armillary.serving.benchmark import (
        Benchmark,
        Mode,
        judged,
        requests_for,
        sequences_held,
        trace_for,
        workload_for,
    )

    if isinstance(benchmark, dict):
        fields = ("mode", "requests", "rate", "concurrency")
        try:
            if set(benchmark) - set(fields):
                raise ValueError(f"unknown {', '.join(sorted(set(benchmark) - set(fields)))}")
            benchmark = Benchmark(Mode(str(benchmark.get("mode"))), benchmark.get("requests"), benchmark.get("rate"),
                                  benchmark.get("concurrency"))
        except ValueError as err:
            raise SpecError(f"benchmark: expected mode (one of {', '.join(m.value for m in Mode)}) and optionally "
                            f"requests, rate, concurrency; got {benchmark!r} ({err})") from None
    m, sysm, st, w = load_model(model), load_system(system, gpus), load_strategy(strategy), load_workload(workload)
    if not isinstance(w, Inference):
        raise SpecError("workload: serving needs an inference workload (kind: inference)")
    w = workload_for(benchmark, w)
    held = sequences_held(ModelArrays.of(m), st, w, sysm, replicas=data_parallel(st, sysm)) \
        if benchmark.requests is None else 1
    served = simulate_serving(m, sysm, st, w, trace=trace_for(benchmark, w, requests_for(benchmark, held)))
    return judged(benchmark, served)


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
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.search.run import Objective, serial
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
    from armillary.search.run import serial
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


def run_simulation(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                   gpus: int | None = None, schedule: Schedule | str | None = None, symmetric: bool = True,
                   stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
                   seed: int = 0, classes: bool = False) -> SimulationResult | InferenceSimulation:
    """Simulate one training iteration as a task graph on the event engine (`schedule` defaults to the
    strategy's), or a static inference batch, as `armillary simulate` does. `stragglers` maps a rank to its
    slowdown factor; `jitter` is the relative spread of task times (seeded). `symmetric=False` simulates every
    rank; with `classes` too, one rank per class of ranks with the same program and contention (exact)."""
    m, sysm = load_model(model), load_system(system, gpus)
    st, w = load_strategy(strategy), load_workload(workload)
    for name, flag in (("symmetric", symmetric), ("classes", classes)):
        if not isinstance(flag, bool):
            raise SpecError(f"{name}: expected True or False, got {flag!r}")
    from armillary.estimate.result import RunConfig
    from armillary.simulate.inference import simulate_inference
    from armillary.simulate.run import simulate_training

    # the inputs ride on the analytical estimate beside the simulation (`to_frame` shows them)
    config = RunConfig(m, sysm, st, w)
    if isinstance(w, Inference):
        served = simulate_inference(m, sysm, st, w, stragglers, jitter, seed)
        return replace(served, estimate=replace(served.estimate, config=config))
    try:
        chosen = Schedule(schedule) if schedule is not None else None
    except ValueError:
        raise SpecError(f"schedule {schedule!r}: one of {', '.join(s.value for s in Schedule)}") from None
    simulated = simulate_training(m, sysm, st, w, chosen, symmetric, stragglers, jitter, seed, classes)
    return replace(simulated, estimate=replace(simulated.estimate, config=config))


simulate = run_simulation  # the name before `armillary.simulate` became the package again (kept for callers)


def validate(path: Path | str | None = None,
             kinds: Iterable[str] = ("training", "inference", "collective", "memory"),
             progress: Callable[[list[dict[str, str]]], Iterable[dict[str, str]]] = iter) -> list[RowResult]:
    """Every measured row of `kinds` in the validation CSV (default: the shipped copy), predicted and
    compared, or skipped with the reason."""
    from armillary.validation.run import DEFAULT_CSV
    from armillary.validation.run import validate as validate_rows

    return validate_rows(DEFAULT_CSV if path is None else path, kinds, progress)


@overload
def collective(op: Collective | str, size_bytes: float, system: SystemLike, gpus: int | None = ...,
               algorithm: Algorithm | str = ..., composition: Composition | str = ...) -> SweepRow: ...


@overload
def collective(op: Collective | str, size_bytes: Sequence[float] | np.ndarray, system: SystemLike,
               gpus: int | None = ..., algorithm: Algorithm | str = ...,
               composition: Composition | str = ...) -> list[SweepRow]: ...


def collective(op: Collective | str, size_bytes: float | Sequence[float] | np.ndarray, system: SystemLike,
               gpus: int | None = defaults.COLLECTIVE_GPUS,
               algorithm: Algorithm | str = Algorithm.AUTO,
               composition: Composition | str = Composition.AUTO) -> SweepRow | list[SweepRow]:
    """One collective over `gpus` devices of `system` (inner dimensions filled first), as nccl-tests reports
    it: time, algbw, busbw, how the dimensions were composed and the algorithm / protocol chosen per
    dimension. A sequence of sizes gives a row per size."""
    try:
        operation, chosen, composed = Collective(op), Algorithm(algorithm), Composition(composition)
    except ValueError:
        raise SpecError(f"op {op!r} / algorithm {algorithm!r} / composition {composition!r}: op is one of "
                        f"{', '.join(c.value for c in Collective if c is not Collective.SEND_RECV)}; algorithm "
                        f"one of {', '.join(a.value for a in Algorithm)}; composition one of "
                        f"{', '.join(c.value for c in Composition)}") from None
    if operation is Collective.SEND_RECV:
        raise SpecError("op: send_recv is point-to-point, not a collective")
    from armillary.comm.sweep import collective_sweep, group_of

    sysm = load_system(system, gpus)
    gpus = sysm.devices if gpus is None else gpus  # as everywhere: None is the system's own size
    try:
        raw = np.asarray(size_bytes)
    except ValueError:  # a ragged nesting
        raw = np.asarray(None)
    if raw.dtype.kind not in "iuf" or raw.ndim > 1:  # strings, bools, None, objects are not sizes
        raise SpecError(f"size_bytes: expected a number of bytes or a sequence of them, got {size_bytes!r}")
    sizes = np.atleast_1d(raw.astype(float))
    try:
        rows = collective_sweep(operation, sizes, group_of(sysm, gpus), sysm, chosen, composed)
    except ValueError as err:
        raise SpecError(str(err)) from None
    return rows if np.ndim(size_bytes) else rows[0]


def parameters(model: ModelLike) -> int:
    """Exact parameter count of a model, embeddings and LM head included."""
    from armillary.plan.arrays import ModelArrays
    from armillary.workload.parameters import count_parameters

    return int(count_parameters(ModelArrays.of(load_model(model))).total)
