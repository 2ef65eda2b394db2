"""Serving a request stream on a deployment: replicas (colocated, or prefill and decode pools), the KV
capacity of each, the trace split among them, and the metrics: TTFT / TPOT / latency percentiles,
throughput, goodput under SLOs (the largest request rate that meets them: `serving.rate`)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from armillary import display
from armillary.errors import ResultError, SpecError
from armillary.estimate.feasibility import inference_checks
from armillary.estimate.inference import ReplicaModel, replica_model
from armillary.estimate.inference_memory import inference_memory, kv_blocks, kv_budget
from armillary.estimate.inference_phases import kv_handover_time
from armillary.estimate.invariants import HINT, MAX_TIME_S
from armillary.estimate.result import ErrorBand, RunConfig
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays
from armillary.serving.balance import serve_least_outstanding
from armillary.serving.engine import Engine, cache_sizing_factor, overheads
from armillary.serving.launch import with_engine
from armillary.serving.lockstep import GroupStepCost, simulate_groups
from armillary.serving.simulate import IterationCost, ReplicaRun, RequestTimes, SchedulerLimits, simulate_replica
from armillary.serving.trace import Trace, checked_trace
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Balance, Inference, Policy, Serving


@dataclass(frozen=True)
class Percentiles:
    """Mean and percentiles of a per-request latency, in seconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        v = values[np.isfinite(values)]
        if not len(v):
            return cls(*(4 * [float("nan")]))
        p50, p90, p99 = np.percentile(v, [50, 90, 99])
        return cls(float(v.mean()), float(p50), float(p90), float(p99))


@dataclass(frozen=True, repr=False)
class ServingResult(display.Displayed):
    """A trace served by `replicas` replicas (of which `prefill_replicas` only prefill)."""

    requests: int
    completed: int
    rejected: int  # a request whose cache alone exceeds a replica's KV capacity
    offered_rate: float  # requests per second of the trace
    makespan_s: float  # first arrival to last token
    ttft_s: Percentiles
    tpot_s: Percentiles  # per request: (last token - first token) / (output tokens - 1)
    e2e_s: Percentiles
    output_tokens_per_s: float
    output_tokens_per_s_per_device: float
    goodput_requests_per_s: float  # requests meeting both SLOs, per second
    slo_attainment: float  # share of requests meeting both SLOs
    ttft_slo_s: float
    tpot_slo_s: float
    preemptions: int
    iterations: int
    eager_steps: int  # decode steps outside the engine's CUDA graphs (paying the host's launches)
    mean_batch: float
    kv_blocks_per_device: int
    replicas: int
    prefill_replicas: int
    devices: int
    times: RequestTimes
    error_band: ErrorBand | None = None  # how far to trust its throughput (the serving rows of its regime)
    config: RunConfig | None = None  # the inputs (set by armillary.api)

    def headline(self) -> display.Headline:
        """The figures a repr shows: rate, throughput, latency percentiles, SLO attainment."""
        return [("requests", f"{self.completed} of {self.requests}"),
                ("offered_rate", display.number(self.offered_rate) + "/s"),
                ("output_tokens_per_s_per_device", display.number(self.output_tokens_per_s_per_device)),
                ("ttft_p90", display.seconds(self.ttft_s.p90)), ("tpot_p99", display.seconds(self.tpot_s.p99)),
                ("slo_attainment", display.percent(self.slo_attainment))]

    @property
    def requests_per_s(self) -> float:
        """Request throughput as the benchmark clients print it: completed requests over the duration."""
        return self.completed / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def total_tokens_per_s(self) -> float:
        """Prompt and output tokens of the completed requests over the duration (the clients' "total token
        throughput")."""
        t = self.times
        done = np.isfinite(t.finish_s)
        tokens = float((t.input_len[done] + t.output_len[done]).sum())
        return tokens / self.makespan_s if self.makespan_s > 0 else 0.0

    @property
    def itl_mean_s(self) -> float:
        """Mean inter-token latency over every generated token after the first (token-weighted TPOT)."""
        t = self.times
        done = np.isfinite(t.finish_s) & (t.output_len > 1)
        gaps = float((t.output_len[done] - 1).sum())
        return float((t.finish_s[done] - t.first_token_s[done]).sum()) / gaps if gaps else float("nan")

    def meets(self) -> bool:
        """P90 TTFT and P99 TPOT within the SLOs, every request served."""
        return (self.rejected == 0 and self.completed == self.requests and self.ttft_s.p90 <= self.ttft_slo_s
                and (not np.isfinite(self.tpot_s.p99) or self.tpot_s.p99 <= self.tpot_slo_s))

    def to_dict(self) -> dict[str, object]:
        from dataclasses import asdict

        d = asdict(self)
        d.pop("times")
        d.pop("config")
        return d


def _limits(r: ReplicaModel, w: Inference, largest_prompt: int, engine: Engine | None) -> SchedulerLimits:
    """The scheduler's limits and the pages that fit next to the weights and the largest pass."""
    sv = w.serving
    pass_tokens = sv.max_batched_tokens if sv.chunked_prefill else max(sv.max_batched_tokens, largest_prompt)
    memory = inference_memory(r, w, float(sv.max_batch), float(pass_tokens))
    free, budget = kv_budget(r, w, memory, engine is not None and engine.memory_of_total,
                             engine is not None and engine.activations_outside_share)
    if free <= 0:
        raise SpecError(f"weights ({float(memory.weights) / 2**30:.1f} GiB) and activations leave no room for a KV "
                        f"cache on {r.system.device.name}")
    hbm_share = 1 - r.tier2_fraction
    sizing = cache_sizing_factor(engine, r.m)  # an engine counting a latent cache as K + V fits half the tokens
    blocks = kv_blocks(float(budget), hbm_share * sizing * r.cache_bytes_per_token, w.kv_cache.block_tokens)
    swap = 0.0
    if sv.policy is Policy.SWAP:
        tier2 = r.system.device.second_tier
        if tier2 is None:
            raise SpecError(f"workload.serving.policy: swap needs a second memory tier; {r.system.device.name} has "
                            "none (use recompute, max_utilization or guaranteed_no_evict)")
        swap = r.cache_bytes_per_token / tier2.rate  # each device moves its shard over its own link
    host = overheads(engine, r.m, r.stage_layers, sv.scheduler_steps)
    return SchedulerLimits(sv.max_batch, sv.max_batched_tokens, sv.chunked_prefill, blocks, w.kv_cache.block_tokens,
                           sv.policy, sv.prefix_hit_rate, sv.concurrency, swap, host.request_s,
                           int(engine.admission_watermark * blocks) if engine is not None else 0,
                           host.graph_context, host.graph_batch, sv.scheduler_steps)


def replica_kv_tokens(r: ReplicaModel, w: Inference, engine: Engine | None = None, largest_prompt: int = 1) -> int:
    """Tokens the KV caches of one replica hold: each attention group keeps its own (with data-parallel
    attention a replica has attention_dp of them; MLA's latent is then no longer copied on every TP rank)."""
    limits = _limits(r, w, largest_prompt, engine)
    return int(r.attention_dp) * limits.kv_blocks * limits.block_tokens


def serve_trace(m: ModelArrays, strategy: Strategy, w: Inference, system: System, replicas: int,
                trace: Trace, engine: Engine | None = None) -> ServingResult:
    """Simulate `trace` on `replicas` replicas: spread over them (`serving.balance`: round robin, or to the
    replica with the least outstanding tokens), or, with prefill_replicas > 0, over the prefill pool, then
    (after the KV handover) over the decode pool in order of first tokens.
    `engine` (else the workload's `serving.engine`, as it starts on the system's device) fills the workload's
    unset fields and costs overheads."""
    w, engine = with_engine(w, engine, system.device, m, strategy.attention_dp, strategy.tp, strategy.pp)
    if strategy.cp > 1:
        raise SpecError("strategy.cp: the serving simulation runs cp = 1; context parallelism is estimated for a "
                        "static batch (`armillary estimate`)")
    # the layout rules `armillary estimate` applies to a static batch (one source: estimate.feasibility)
    broken = rules.failed(inference_checks(m, strategy.tp, strategy.cp, strategy.pp, strategy.ep, replicas,
                                           system.devices))
    if broken:
        raise SpecError(f"strategy: {'; '.join(broken)} ({replicas} replicas of tp*cp*pp = "
                        f"{strategy.tp * strategy.cp * strategy.pp} devices on {system.devices})")
    trace = checked_trace(trace)
    r = replica_model(m, strategy, w, system)
    sv = w.serving
    _check_deployment(sv, r, replicas)
    largest = int(trace.input_len.max()) if len(trace) else 1
    limits = _limits(r, w, largest, engine)
    host = overheads(engine, r.m, r.stage_layers, sv.scheduler_steps)
    cost = IterationCost(r, max(sv.max_batched_tokens, 1), sv.max_batch, host)
    _check_iteration_times(cost)
    done = _Requests.of(trace)
    everyone = np.arange(len(trace))
    # data-parallel attention: each attention group schedules its own requests over its own cache (SGLang
    # dispatches requests round-robin to its DP workers, load_balance_method round_robin)
    groups = int(r.attention_dp)
    if sv.prefill_replicas == 0 and groups > 1:
        step = GroupStepCost(r, max(sv.max_batched_tokens, 1), sv.max_batch, host,
                             engine is not None and engine.pad_attention_groups)
        _lock_step(done, everyone, trace, step, limits, replicas, groups)
    elif sv.prefill_replicas == 0:
        _spread(done, replicas, everyone, trace, cost, limits, sv.balance)
    else:  # disaggregated: the groups are costed as independent (not in lock step)
        _spread(done, sv.prefill_replicas * groups, everyone, trace, cost, limits, sv.balance, prefill_only=True)
        _decode_pool(done, trace, r, cost, limits, sv.balance, (replicas - sv.prefill_replicas) * groups)
    times = RequestTimes(done.sent, done.first, done.finish, trace.input_len, trace.output_len, done.preempted)
    return _metrics(times, w, r.devices * replicas, replicas, limits.kv_blocks, done)


def _check_iteration_times(cost: IterationCost) -> None:
    """An iteration's tabulated times must be finite, >= 0 and below `MAX_TIME_S` (else the simulation would
    report every request rejected, or serve in nonsense times): extreme system values refused loudly."""
    parts = [cost.by_tokens, cost.by_sequences] + ([cost.fitted] if cost.fitted is not None else [])
    for part in parts:
        values = np.asarray(part, dtype=float)
        if not (np.isfinite(values).all() and (values >= 0).all() and (values < MAX_TIME_S).all()):
            bad = values[~(np.isfinite(values) & (values >= 0) & (values < MAX_TIME_S))][0]
            raise ResultError(f"serving: an iteration takes {bad:g} s, expected a finite time of 0 to "
                              f"{MAX_TIME_S:g} s; {HINT}")


def _check_deployment(sv: Serving, r: ReplicaModel, replicas: int) -> None:
    if sv.balance is Balance.LEAST_OUTSTANDING_TOKENS and (sv.concurrency is not None or r.attention_dp > 1):
        raise SpecError("workload.serving.balance: least_outstanding_tokens balances open-loop arrivals over "
                        "replicas (not a closed loop with serving.concurrency, nor data-parallel attention "
                        "groups); use round_robin")
    if sv.scheduler_steps > 1 and r.attention_dp > 1:
        raise SpecError("workload.serving.scheduler_steps: multi-step scheduling (vLLM V0) is not simulated with "
                        "data-parallel attention groups (SGLang's); set it to 1")
    if sv.prefill_replicas >= replicas:
        raise SpecError(f"workload.serving.prefill_replicas: {sv.prefill_replicas} leaves no decode replica of "
                        f"{replicas}")


@dataclass
class _Requests:
    """What the replicas did with each request of the trace, recorded pool by pool."""

    sent: np.ndarray  # when the client sent it (closed loop: when a slot freed)
    first: np.ndarray
    finish: np.ndarray
    preempted: np.ndarray
    iterations: int = 0
    batched: int = 0
    eager_steps: int = 0

    @classmethod
    def of(cls, trace: Trace) -> _Requests:
        n = len(trace)
        return cls(trace.arrival_s.astype(float).copy(), np.full(n, np.nan), np.full(n, np.nan),
                   np.zeros(n, np.int64))

    def record(self, ids: np.ndarray, part: ReplicaRun, closed: bool) -> None:
        if closed:
            self.sent[ids] = part.times.arrival_s
        self.first[ids] = part.times.first_token_s
        self.finish[ids] = part.times.finish_s
        self.preempted[ids] += part.times.preemptions
        self.iterations += part.iterations
        self.batched += part.batched_sequences
        self.eager_steps += part.eager_steps


def _spread(done: _Requests, pool: int, order: np.ndarray, sub: Trace, cost: IterationCost,
            limits: SchedulerLimits, balance: Balance, **kind: bool) -> None:
    """`sub` (requests `order` of the trace) over a pool of replicas: to the least outstanding tokens, or
    round robin, a closed loop's concurrency shared out (its cap applies at the first pool only)."""
    if balance is Balance.LEAST_OUTSTANDING_TOKENS and pool > 1:
        for ids, part in serve_least_outstanding(sub, cost, limits, pool, **kind):
            done.record(order[ids], part, False)
        return
    c = None if kind.get("prefilled") else limits.concurrency
    if c is not None:  # a closed loop of c requests keeps at most c replicas (or attention groups) busy
        pool = min(pool, c)
    for k in range(pool):
        pick = np.arange(k, len(order), pool)
        mine = replace(limits, concurrency=None if c is None else max(1, c // pool + (k < c % pool)))
        done.record(order[pick], simulate_replica(sub.subset(pick), cost, mine, **kind), c is not None)


def _lock_step(done: _Requests, order: np.ndarray, sub: Trace, step: GroupStepCost, limits: SchedulerLimits,
               replicas: int, groups: int) -> None:
    """Colocated replicas with data-parallel attention: each replica's groups in lock step."""
    c = limits.concurrency
    units = replicas * groups if c is None else min(replicas * groups, c)
    for replica in range(replicas):
        mine = [k for k in range(units) if k % replicas == replica]
        picks = [np.arange(k, len(order), units) for k in mine]
        caps = [replace(limits, concurrency=None if c is None else max(1, c // units + (k < c % units)))
                for k in mine]
        for pick, part in zip(picks, simulate_groups([sub.subset(p) for p in picks], step, caps), strict=True):
            done.record(order[pick], part, c is not None)


def _decode_pool(done: _Requests, trace: Trace, r: ReplicaModel, cost: IterationCost, limits: SchedulerLimits,
                 balance: Balance, pool: int) -> None:
    """Disaggregation after the prefill pool: each prompt's cache moves to a decode replica over the scale-out
    link (each device its shard), and the decode pool takes the requests in the order they are ready; the
    time to first token stays the prefill pool's."""
    ttft = done.first.copy()
    ready = ttft + np.broadcast_to(kv_handover_time(r, trace.input_len.astype(float)), ttft.shape)
    served = np.isfinite(ready)
    order = np.flatnonzero(served)[np.argsort(ready[served], kind="stable")]
    decode_trace = Trace(ready[order], trace.input_len[order], trace.output_len[order])
    done.finish[:] = np.nan
    _spread(done, pool, order, decode_trace, cost, limits, balance, prefilled=True)
    done.first = ttft


def _metrics(times: RequestTimes, w: Inference, devices: int, replicas: int, blocks: int,
             done_by: _Requests) -> ServingResult:
    iterations, batched = done_by.iterations, done_by.batched
    sv = w.serving
    n = len(times.arrival_s)
    done = np.isfinite(times.finish_s)
    ttft, tpot, e2e = times.ttft_s, times.tpot_s, times.e2e_s
    start = float(times.arrival_s.min()) if n else 0.0
    makespan = float(np.nanmax(times.finish_s)) - start if done.any() else 0.0
    tokens = float(times.output_len[done].sum())
    good = done & (ttft <= sv.ttft_slo_s) & ~(tpot > sv.tpot_slo_s)
    span = float(times.arrival_s.max() - start) if n > 1 else 0.0
    return ServingResult(
        requests=n, completed=int(done.sum()), rejected=int((~np.isfinite(times.first_token_s)).sum()),
        offered_rate=(n - 1) / span if span > 0 else 0.0, makespan_s=makespan, ttft_s=Percentiles.of(ttft),
        tpot_s=Percentiles.of(tpot), e2e_s=Percentiles.of(e2e),
        output_tokens_per_s=tokens / makespan if makespan > 0 else 0.0,
        output_tokens_per_s_per_device=tokens / makespan / devices if makespan > 0 else 0.0,
        goodput_requests_per_s=float(good.sum()) / makespan if makespan > 0 else 0.0,
        slo_attainment=float(good.mean()) if n else 0.0, ttft_slo_s=sv.ttft_slo_s, tpot_slo_s=sv.tpot_slo_s,
        preemptions=int(times.preemptions.sum()), iterations=iterations, eager_steps=done_by.eager_steps,
        mean_batch=batched / iterations if iterations else 0.0, kv_blocks_per_device=blocks, replicas=replicas,
        prefill_replicas=sv.prefill_replicas, devices=devices, times=times)
