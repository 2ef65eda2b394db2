"""Serving a request stream on the replicas: a stream or trace (`simulate_serving`), the largest rate that
meets the SLOs (`max_rate`), and a published benchmark's way of running it (`serve_benchmark`)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from armillary import defaults
from armillary.api.estimates import estimate
from armillary.api.inputs import ModelLike, StrategyLike, SystemLike, WorkloadLike, load_specs
from armillary.errors import SpecError
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference

# the serving simulator loads on the first call that needs it
if TYPE_CHECKING:
    from armillary.serving.benchmark import Benchmark, BenchmarkResult
    from armillary.serving.engine import Engine
    from armillary.serving.rate import MaxRate
    from armillary.serving.run import ServingResult
    from armillary.serving.trace import Trace
    from armillary.specs.run import BenchmarkSection


def simulate_serving(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                     rate: float | None = None, duration_s: float | None = None, gpus: int | None = None,
                     trace: Trace | None = None) -> ServingResult:
    """Serve a request stream on dp replicas: `trace`, else the workload's `serving.trace` CSV, else Poisson
    arrivals at `rate` requests/s for `duration_s` seconds with the workload's lengths. Returns latency
    percentiles, throughput and goodput."""
    m, sysm, st, w = _served_specs(model, system, strategy, workload, gpus)
    from armillary.serving.trace import generated_trace, load_trace

    if trace is None:
        if w.serving.trace is not None:
            trace = load_trace(w.serving.trace)
        elif rate is None or duration_s is None:
            raise SpecError("serving: give a rate and a duration, or a trace (workload.serving.trace)")
        else:
            trace = generated_trace(w, rate, duration_s)
    return _served(m, sysm, st, w, trace)


def _served(m: Model, sysm: System, st: Strategy, w: Inference, trace: Trace,
            engine: Engine | None = None) -> ServingResult:
    """`trace` served on the replicas by `engine` (None: the workload's, as it launches), with its error band."""
    from armillary.estimate.result import RunConfig
    from armillary.plan.arrays import ModelArrays
    from armillary.plan.layout import data_parallel
    from armillary.serving.launch import with_engine
    from armillary.serving.run import serve_trace
    from armillary.validation.bands import inference_error_band

    served = serve_trace(ModelArrays.of(m), st, w, sysm, data_parallel(st, sysm), trace, engine=engine)
    engine = engine or with_engine(w, None)[1]
    family = engine.family.value if engine else "generic"  # the bands' regime goes by the engine's family
    return replace(served, error_band=inference_error_band(m, sysm, st, w, family),
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

    m, sysm, st, w = _served_specs(model, system, strategy, workload, gpus)
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
        start = analytical_rate(estimate(m, sysm, st, w))  # looked up here: tests replace api.serving.estimate
    except ArmillaryError:
        start = None
    found = steady_max_rate(serve, 1 if base is not None else seeds, start=start)
    if found.result is None:
        raise SpecError(f"no rate meets P90 TTFT <= {sv.ttft_slo_s} s and P99 TPOT <= {sv.tpot_slo_s} s")
    return found


def serve_benchmark(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                    benchmark: Benchmark | BenchmarkSection | dict[str, Any],
                    gpus: int | None = None) -> BenchmarkResult:
    """Serve the workload as a published benchmark runs it (`serving.benchmark`): mode rate, offline,
    concurrency, mlperf-offline, mlperf-server or mlperf-interactive, e.g. {"mode": "concurrency",
    "concurrency": 50}. Without a request count the run is long enough to reach its steady state and its
    rates are read over the steady window; MLPerf scenarios are judged on their P99 latency limits. A
    `client` that launches the engine itself launches it with its own settings (`serving.benchmark
    .client_engine`, as the validation harness does): {"mode": "offline", "client": "trtllm-bench"} with
    workload.serving.engine tensorrt-llm-1.0 runs trtllm-bench throughput, its limits from its heuristic unless
    the workload sets serving.max_batch or max_batched_tokens (--max_batch_size / --max_num_tokens); what it
    changed is in the result's `assumed`. The mapping is a run file's `benchmark:` section
    (`specs.run.BenchmarkSection`; `specs.run.load_benchmark` reads it from the file), read by
    `serving.benchmark.Benchmark.of` as `armillary serve` reads the file."""
    from armillary.plan.arrays import ModelArrays
    from armillary.plan.layout import data_parallel
    from armillary.serving.benchmark import (
        Benchmark,
        client_engine,
        judged,
        requests_for,
        sequences_held,
        trace_for,
        workload_for,
    )
    from armillary.serving.launch import launched_engine

    benchmark = Benchmark.of(benchmark)
    m, sysm, st, w = _served_specs(model, system, strategy, workload, gpus)
    w = workload_for(benchmark, w)
    arrays = ModelArrays.of(m)
    engine: Engine | None = None
    assumed: tuple[str, ...] = ()
    if benchmark.client is not None:  # the engine as the client launches it, passed as it is from here on
        launched = launched_engine(w, sysm.device, arrays, st.attention_dp, st.tp, st.pp)
        stated = bool({"max_batch", "max_batched_tokens"} & w.serving.model_fields_set)
        engine, assumed = client_engine(benchmark, launched, m, st, w, sysm, limits_stated=stated)
    held = sequences_held(arrays, st, w, sysm, engine, replicas=data_parallel(st, sysm)) \
        if benchmark.requests is None else 1
    served = _served(m, sysm, st, w, trace_for(benchmark, w, requests_for(benchmark, held)), engine)
    return judged(benchmark, served, assumed)


def _served_specs(model: ModelLike, system: SystemLike, strategy: StrategyLike, workload: WorkloadLike,
                  gpus: int | None) -> tuple[Model, System, Strategy, Inference]:
    """The call's specifications (`inputs.load_specs`); the workload must be an inference one."""
    m, sysm, st, w = load_specs(model, system, strategy, workload, gpus)
    if not isinstance(w, Inference):
        raise SpecError("workload: serving needs an inference workload (kind: inference)")
    return m, sysm, st, w
