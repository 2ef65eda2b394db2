"""The benchmark modes people publish serving results in, as one input to the serving simulation.

- `rate`: open loop, Poisson arrivals at a request rate (vLLM benchmark_serving --request-rate).
- `offline`: every request queued at t = 0, the batch as large as the engine allows (trtllm-bench
  throughput, vLLM benchmark_throughput).
- `concurrency`: closed loop, at most N requests outstanding (--max-concurrency, genai-perf --concurrency).
- `mlperf-offline`, `mlperf-server`, `mlperf-interactive`: MLPerf Inference's LoadGen scenarios: all samples at
  once; Poisson at a target QPS judged on its P99 TTFT and TPOT limits; the same with the tighter limits of
  the interactive scenario.

A run that states its request count serves exactly that many and reports the whole run, as the clients
print it. One that does not (a load generator measuring over a time window) serves enough requests for
`STEADY_BATCHES` full batches, or LoadGen's minimum duration at a rate, and reports the steady window
(`serving.window`).

A benchmark tool that launches the engine itself is named as the benchmark's `client`: `trtllm-bench`
(TensorRT-LLM 1.x trtllm-bench throughput, offline) launches it with its own CUDA-graph sizes and, where the
run states neither --max_batch_size nor --max_num_tokens, its own limits (`serving.trtllm_bench`). No client:
one that sends requests to the server as the engine's profile launches it (benchmark_serving, genai-perf,
LoadGen's harness). `client_engine` is the one path of the API, `armillary serve` and the validation harness;
it goes by the engine profile's `family` and `versions`, never its name.

The modes and clients are a run file's words (`specs.run.Mode`, `Client`): its `benchmark:` section
(`specs.run.BenchmarkSection`) and the API's mapping are read by `Benchmark.of`, the one reading.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from armillary.errors import SpecError
from armillary.estimate.inference import replica_model
from armillary.estimate.inference_precision import recipe_weights
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import Engine
from armillary.serving.engine_releases import Family
from armillary.serving.launch import with_engine
from armillary.serving.run import ServingResult, replica_kv_tokens
from armillary.serving.trace import Trace, benchmark_trace
from armillary.serving.trtllm_bench import trtllm_bench_engine
from armillary.serving.window import SteadyThroughput, steady_throughput
from armillary.specs.loading import validate_spec
from armillary.specs.model import Model
from armillary.specs.run import BenchmarkSection, Client, Mode
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Arrivals, Inference, StoredPrecision

# The releases whose trtllm-bench throughput was read (serving.trtllm_bench: 1.0-1.2): TensorRT-LLM 1.x, the
# profile's `versions` within them
TRTLLM_BENCH_RELEASES = ("1.0", "2.0")

# P99 TTFT and P99 TPOT limits of MLPerf Inference's Llama 2 70B (MLPerf Inference rules, LLM latency
# constraints: Server 2 s / 200 ms since v4.0; Interactive 450 ms / 40 ms since v5.0)
MLPERF_LIMITS_S = {Mode.MLPERF_SERVER: (2.0, 0.2), Mode.MLPERF_INTERACTIVE: (0.45, 0.04)}
LOADGEN_MIN_DURATION_S = 600.0  # mlperf.conf: *.Server.min_duration = 600000 ms
STEADY_BATCHES = 8  # a run of unstated length: this many batches of what the server holds at once
MIN_STEADY_REQUESTS, MAX_ASSUMED_REQUESTS = 256, 50_000
_OPEN_LOOP = (Mode.RATE, Mode.MLPERF_SERVER, Mode.MLPERF_INTERACTIVE)
_ALL_AT_ONCE = (Mode.OFFLINE, Mode.MLPERF_OFFLINE)


@dataclass(frozen=True)
class Benchmark:
    """A benchmark client: its mode, and what it states of its requests."""

    mode: Mode
    requests: int | None = None  # None: not stated (measured over the steady window)
    rate: float | None = None  # requests/s of an open-loop mode
    concurrency: int | None = None  # outstanding requests of the closed loop
    client: Client | None = None  # the tool that launches the engine itself; None: the engine's server

    def __post_init__(self) -> None:
        if self.client is Client.TRTLLM_BENCH and self.mode is not Mode.OFFLINE:
            raise SpecError(f"benchmark client trtllm-bench: mode offline only, not {self.mode.value}: its rules "
                            "here (serving.trtllm_bench) are those of trtllm-bench throughput with every request "
                            "queued at once; its --concurrency runs and trtllm-bench latency were not read, and "
                            "the other modes are other clients (vLLM / SGLang benchmark scripts, MLPerf's LoadGen) "
                            "sending to a server launched as the engine's profile says: give no client for them")
        if self.mode in _OPEN_LOOP and not (self.rate is not None and math.isfinite(self.rate) and self.rate > 0):
            raise SpecError(f"benchmark mode {self.mode.value}: give a finite request rate > 0 (--rate)")
        if self.mode is Mode.CONCURRENCY and not (self.concurrency is not None and self.concurrency >= 1):
            raise SpecError("benchmark mode concurrency: give --concurrency N (1 or more outstanding requests)")
        if self.requests is not None and not 1 <= self.requests <= 2**24:
            raise SpecError(f"benchmark requests: expected 1 to {2**24}, got {self.requests}")

    @classmethod
    def of(cls, value: Benchmark | BenchmarkSection | Mapping[str, Any], where: str = "benchmark") -> Benchmark:
        """The benchmark a run file's `benchmark:` section, a mapping of its fields (`BenchmarkSection`: mode,
        requests, rate, concurrency, client) or a benchmark states: the one reading of the API's, the run
        file's and `armillary serve`'s; a field not known, or a mode or client not known, is refused naming
        the field and the allowed values (`where` names the section)."""
        if isinstance(value, Benchmark):
            return value
        section = value if isinstance(value, BenchmarkSection) else validate_spec(BenchmarkSection, value, where)
        return cls(section.mode, section.requests, section.rate, section.concurrency, section.client)

    @property
    def steady(self) -> bool:
        """Whether rates are read over the steady window (the request count was not stated)."""
        return self.requests is None

    @property
    def limits_s(self) -> tuple[float, float] | None:
        """(P99 TTFT, P99 TPOT) limits of an MLPerf scenario with latency constraints."""
        return MLPERF_LIMITS_S.get(self.mode)


def client_engine(benchmark: Benchmark, engine: Engine | None, model: Model, strategy: Strategy, w: Inference,
                  system: System, limits_stated: bool) -> tuple[Engine | None, tuple[str, ...]]:
    """The engine as the benchmark's client launches it, and what that changed in words: the engine itself
    where the client is the engine's server (no client); trtllm-bench's own settings for TensorRT-LLM 1.x
    (`serving.trtllm_bench.trtllm_bench_engine`: its CUDA graphs to its max batch and, unless the run states
    --max_batch_size or --max_num_tokens (`limits_stated`), the limits of its heuristic for the workload's
    weights, else the strategy's recipe's, and KV cache on the system's device over strategy.tp GPUs).
    Refused for any other engine: trtllm-bench runs TensorRT-LLM, and its rules were read in 1.x only."""
    if benchmark.client is None:
        return engine, ()
    if engine is None or not engine.within(Family.TENSORRT_LLM, *TRTLLM_BENCH_RELEASES):
        named = ("no engine is named (workload.serving.engine)" if engine is None
                 else f"the engine is {engine.name} ({engine.releases_stated})")
        raise SpecError(f"benchmark client trtllm-bench: {named}; its rules (serving.trtllm_bench) are those of "
                        "TensorRT-LLM 1.x trtllm-bench throughput on the PyTorch backend (a profile of family "
                        "tensorrt-llm whose versions lie within 1.x): give workload.serving.engine "
                        "tensorrt-llm-1.0 or tensorrt-llm-1.1, or no client")
    if strategy.pp > 1:  # trtllm_bench_engine sizes its heuristic over one stage's tp GPUs
        raise SpecError(f"benchmark client trtllm-bench: pp {strategy.pp}: its heuristic's limits are modelled "
                        "for one pipeline stage (serving.trtllm_bench reads pp 1); give pp 1, or no client")
    weights = w.weights if w.weights is not None else served_weights(strategy)
    return trtllm_bench_engine(engine, model, w.model_copy(update={"weights": weights}), strategy.tp, system.device,
                               limits=not limits_stated)


def served_weights(strategy: Strategy) -> StoredPrecision | None:
    """The weights' precision a serving workload that names none stores (`estimate.inference_precision.recipe_weights`,
    the one rule): the strategy's block format, else fp8 under the fp8 recipe, else the activation precision
    (None). The int8 block format (AQT's training recipe) is refused there, not turned into weight-only int8."""
    return recipe_weights(strategy)


def sequences_held(m: ModelArrays, strategy: Strategy, w: Inference, system: System, engine: Engine | None = None,
                   replicas: int = 1) -> int:
    """How many requests of the workload's lengths the replicas hold at once: the engine's batch limit or
    what their KV caches fit, whichever is smaller."""
    w, engine = with_engine(w, engine, system.device, m, strategy.attention_dp, strategy.tp, strategy.pp)
    replica = replica_model(m, strategy, w, system)
    fit = replica_kv_tokens(replica, w, engine, w.input_len) // (w.input_len + w.output_len)
    return max(1, min(w.serving.max_batch, fit)) * replicas


def requests_for(benchmark: Benchmark, held: int) -> int:
    """The requests to serve: the stated count, else LoadGen's minimum duration at an open-loop rate, else
    `STEADY_BATCHES` batches of what the server holds at once (`held`: its concurrency, or the engine's
    batch / KV bound)."""
    if benchmark.requests is not None:
        return benchmark.requests
    if benchmark.mode in _OPEN_LOOP:
        assert benchmark.rate is not None
        return min(math.ceil(benchmark.rate * LOADGEN_MIN_DURATION_S), MAX_ASSUMED_REQUESTS)
    if benchmark.concurrency is not None:
        held = min(held, benchmark.concurrency)
    return min(max(STEADY_BATCHES * max(held, 1), MIN_STEADY_REQUESTS), MAX_ASSUMED_REQUESTS)


def trace_for(benchmark: Benchmark, w: Inference, requests: int) -> Trace:
    """The requests of the benchmark with the workload's lengths and seed."""
    sv = w.serving
    if benchmark.mode in _OPEN_LOOP:
        assert benchmark.rate is not None
        return benchmark_trace(requests, benchmark.rate, w.input_len, w.output_len, Arrivals.POISSON,
                               lengths=sv.lengths, spread=sv.spread, seed=sv.seed)
    return benchmark_trace(requests, 0.0, w.input_len, w.output_len, Arrivals.OFFLINE, lengths=sv.lengths,
                           spread=sv.spread, seed=sv.seed)


def workload_for(benchmark: Benchmark, w: Inference) -> Inference:
    """The workload with the benchmark's closed-loop concurrency and, for MLPerf, its latency limits."""
    update: dict[str, object] = {"concurrency": benchmark.concurrency if benchmark.mode is Mode.CONCURRENCY
                                 else None}
    if benchmark.limits_s is not None:
        update.update(ttft_slo_s=benchmark.limits_s[0], tpot_slo_s=benchmark.limits_s[1])
    return w.model_copy(update={"serving": w.serving.model_copy(update=update)})


@dataclass(frozen=True)
class BenchmarkResult:
    benchmark: Benchmark
    served: ServingResult
    steady: SteadyThroughput | None  # the steady window (a run of unstated length)
    meets_limits: bool | None  # MLPerf scenarios with latency limits: P99 TTFT and P99 TPOT within them
    assumed: tuple[str, ...] = ()  # what the client's launch changed in the engine (`client_engine`), in words

    @property
    def output_tokens_per_s(self) -> float:
        """Output tokens/s as the benchmark reports them: over the steady window, or the whole run."""
        return self.steady.output_tokens_per_s if self.steady is not None else self.served.output_tokens_per_s


def judged(benchmark: Benchmark, served: ServingResult, assumed: tuple[str, ...] = ()) -> BenchmarkResult:
    limits = benchmark.limits_s
    meets = None if limits is None else bool(
        served.completed == served.requests and served.ttft_s.p99 <= limits[0]
        and (not math.isfinite(served.tpot_s.p99) or served.tpot_s.p99 <= limits[1]))
    return BenchmarkResult(benchmark, served, steady_throughput(served.times) if benchmark.steady else None, meets,
                           assumed)
