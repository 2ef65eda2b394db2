"""A request-level discrete-event simulation of one serving replica: continuous batching (Orca, Yu et al.
2022), chunked prefill (Sarathi-Serve, Agrawal et al. 2024), a paged KV cache under a capacity policy
(`policy.Policy`: guaranteed-no-evict, max-utilization, recompute or swap; vLLM, Kwon et al. 2023), prefix
reuse at a hit rate, open- or closed-loop arrivals. Each iteration is costed by the analytical model
(`estimate.inference.ReplicaModel`) plus the engine's host overheads, so at low load a request's TTFT is
the analytical prefill time. The scheduler's steps live in `scheduler.ReplicaState`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from armillary.estimate.inference import ReplicaModel
from armillary.numerics import ratio_or_zero
from armillary.serving.engine import Overheads
from armillary.serving.kernels import decode_stretch, iteration_time, tabulated_time
from armillary.serving.scheduler import Cost, ReplicaState
from armillary.serving.trace import Trace
from armillary.specs.workload import Policy
from armillary.workload.ops import Op


@dataclass(frozen=True)
class SchedulerLimits:
    max_batch: int  # sequences per iteration
    max_batched_tokens: int  # new tokens per iteration
    chunked_prefill: bool
    kv_blocks: int  # pages of the KV cache on one device
    block_tokens: int
    policy: Policy = Policy.RECOMPUTE
    prefix_hit_rate: float = 0.0  # share of each prompt already cached (not computed)
    concurrency: int | None = None  # closed loop: requests outstanding at most
    swap_s_per_token: float = 0.0  # one token's cache over the second tier's link, one way
    request_overhead_s: float = 0.0  # from sending a request to its place in the queue
    watermark_blocks: int = 0  # pages that must stay free after admitting a prompt (vLLM V0: 1% of them)
    graph_context: float = np.inf  # the CUDA graphs' longest sequence and most sequences (engine.Overheads)
    graph_batch: float = np.inf
    scheduler_steps: int = 1  # decode iterations per scheduler pass (multi-step scheduling)


@dataclass(frozen=True)
class RequestTimes:
    """Per request (trace order): NaN where a request never got that far (rejected: its cache alone
    exceeds the KV capacity). `arrival_s` is when the client sent it (closed loop: when a slot freed)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    preemptions: np.ndarray

    @property
    def ttft_s(self) -> np.ndarray:
        """Time to first token of each request, from when it was sent."""
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> np.ndarray:
        """Time per output token after the first, (last - first token) / (output tokens - 1), as vLLM's
        benchmark client computes it (benchmarks/serve.py); NaN for a request of one output token."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.output_len > 1, (self.finish_s - self.first_token_s) / (self.output_len - 1),
                            np.nan)

    @property
    def e2e_s(self) -> np.ndarray:
        """End-to-end latency of each request: sent to last token."""
        return self.finish_s - self.arrival_s


@dataclass(frozen=True)
class ReplicaRun:
    times: RequestTimes
    iterations: int
    batched_sequences: int  # summed over iterations (mean batch = this / iterations)
    eager_steps: int = 0  # decode steps outside the CUDA graphs (kernels.outside_graphs)


class IterationCost:
    """Time of one iteration from its sequences' new and cached tokens, plus the engine's host overheads.
    The token-dependent part and the head are tabulated once (the same functions over every count); the
    attention's op and kernel time are read off the replica model as coefficients (`kernels`) when they
    have that form, else evaluated per iteration."""

    def __init__(self, replica: ReplicaModel, max_tokens: int, max_sequences: int,
                 overheads: Overheads | None = None) -> None:
        self.replica = replica
        self.overheads = overheads = overheads if overheads is not None else Overheads()
        self.by_tokens = np.asarray(replica.tokens_time(np.arange(1, max_tokens + 1, dtype=float)).total)
        sequences = np.arange(0, max_sequences + 1, dtype=float)
        self.by_sequences = np.concatenate(([0.0], replica.head_time(sequences[1:]))) + overheads(sequences)
        self.affine = _affine_attention(replica)
        self.head_dim = _replica_head_dim(replica)
        roofline = _roofline(replica) if self.affine is not None else None
        # the compiled path's inputs (None: every iteration evaluates the model's functions)
        self.fitted = np.array(self.affine[0] + self.affine[1]) if self.affine is not None else None
        self.roofline = roofline

    def layers_and_head(self, tokens: int, emitting: int) -> tuple[float, float]:
        """The token-dependent part of an iteration of `tokens` new tokens, and the head and host overheads
        of `emitting` sampled sequences (tabulated; evaluated past the tables)."""
        r = self.replica
        layers = (float(self.by_tokens[tokens - 1]) if tokens <= len(self.by_tokens)
                  else float(r.tokens_time(float(tokens)).total))
        head = (float(self.by_sequences[emitting]) if emitting < len(self.by_sequences)
                else float(r.head_time(float(emitting))) + self.overheads(emitting))
        return layers, head

    def attention_op(self, new: np.ndarray, past: np.ndarray) -> Op:
        """The attention op of each iteration (a column), summed over its sequences."""
        if self.affine is not None:
            prefill, decode = self.affine
            step = new <= 1  # decode steps (MLA's absorbed form)
            coefficients: tuple[Any, ...] = decode  # all decode steps: what `where` would pick, without copies
            if not step.all():
                coefficients = prefill if not step.any() else tuple(
                    np.where(step, d, p) for d, p in zip(decode, prefill, strict=True))
            flop, per_new, per_past = coefficients
            return summed_op(flop * new * (2 * past + new) / 2, flop * new, per_new * new + per_past * past,
                             self.head_dim)
        op = self.replica.attention(new, past)
        flop, per_key, moved = np.broadcast_arrays(op.flop, op.flop_per_key, op.bytes)
        return summed_op(flop, per_key, moved, _one_head_dim(op.head_dim))

    def __call__(self, new: np.ndarray, past: np.ndarray, emitting: int) -> np.ndarray:
        """Times of iterations over the same sequences: `new` and `past` are (sequences x iterations), or
        one column for one iteration."""
        if new.ndim == 1 and self.fitted is not None and self.roofline is not None:
            time = tabulated_time(new, past, emitting, self.fitted, self.roofline, self.by_tokens, self.by_sequences)
            if time != time:  # past the tables
                layers, head = self.layers_and_head(int(new.sum()), emitting)
                time = iteration_time(new, past, self.fitted, self.roofline, layers, head)
            return np.array([time + float(self.overheads.eager(new, past))])
        return self.evaluated(new, past, emitting)

    def evaluated(self, new: np.ndarray, past: np.ndarray, emitting: int) -> np.ndarray:
        """`__call__` through the model's own functions (no coefficients)."""
        new2 = (new[:, None] if new.ndim == 1 else new).astype(float, copy=False)
        past2 = (past[:, None] if past.ndim == 1 else past).astype(float, copy=False)
        layers, head = self.layers_and_head(int(new2[:, 0].sum()), emitting)
        core, remote = self.replica.attention_time(self.attention_op(new2, past2), past2.sum(axis=0))
        return np.asarray(layers + core + remote + head + self.overheads.eager(new2, past2))


Coefficients = tuple[float, float, float]


def _affine_attention(r: ReplicaModel) -> tuple[Coefficients, Coefficients] | None:
    """Coefficients (c_f, b_new, b_past) of prefill and of decode steps with which one sequence's attention
    op is c_f q (2p + q) / 2 FLOPs and b_new q + b_past p bytes (q new tokens over p cached: a causal mask
    without a window), read off `ReplicaModel.attention` itself and checked against it at far-apart points;
    None when it is not of that form (sliding windows), and every call then evaluates the op per sequence."""
    q = np.array([1.0, 1.0, 2.0, 7.0, 1.0, 5.0])
    p = np.array([0.0, 1.0, 0.0, 100.0, 1e6, 3e5])
    fitted = []
    for decode in (False, True):
        op = r.attention(q, p, decode=decode)
        flops, moved = np.asarray(op.flop, dtype=float), np.asarray(op.bytes, dtype=float)
        flop, per_new = 2 * float(flops[0]), float(moved[0])
        per_past = float(moved[1]) - per_new
        if not (np.allclose(flops, flop * q * (2 * p + q) / 2, rtol=1e-9, atol=0)
                and np.allclose(moved, per_new * q + per_past * p, rtol=1e-9, atol=0)):
            return None
        fitted.append((flop, per_new, per_past))
    return fitted[0], fitted[1]


def summed_op(flop: np.ndarray, per_key: np.ndarray, moved: np.ndarray, head_dim: Any = 0.0) -> Op:
    """One batched attention call over sequences (axis 0): their FLOPs and bytes summed, its depth the keys
    per query for which the summed FLOPs per key are theirs (`walked_flop` stays the sum of theirs), its head
    dimension the model's (`Op.head_dim`)."""
    f, k = np.sum(flop, axis=0), np.sum(per_key, axis=0)
    return Op(f, np.sum(moved, axis=0), depth=ratio_or_zero(f, k), head_dim=head_dim)


def _one_head_dim(head_dim: Any) -> Any:
    """The head dimension of a batched call whose sequences' ops give `head_dim` (per sequence where MLA's
    prefill and absorbed decode differ: the smallest over the sequences, axis 0)."""
    return np.min(head_dim, axis=0) if isinstance(head_dim, np.ndarray) and head_dim.ndim else head_dim


def _replica_head_dim(r: ReplicaModel) -> float:
    """The head dimension of the replica's prefill attention op (`Op.head_dim`)."""
    return float(np.min(r.attention(np.array([2.0]), np.array([0.0])).head_dim))


def _roofline(r: ReplicaModel) -> np.ndarray | None:
    """Coefficients (s_flop, s_bytes, s_cached, fixed, s_tier2, overhead) with which
    `ReplicaModel.attention_time` of an op of F FLOPs, K FLOPs per key walked and B bytes over P cached tokens
    is max(s_flop (F + overhead K), s_bytes B - s_cached P) + fixed (kernels: a roofline with the fixed work
    per query block, the second tier's share of the cache not streamed from HBM) and s_tier2 P (the second
    tier's reads), read off the function itself and checked against it at the ops of far-apart prefill and
    decode iterations (relative 1e-12); None when it is not of that form."""
    head_dim = _replica_head_dim(r)

    def at(flop: Any, moved: Any, cached: Any, per_key: Any = 0.0) -> tuple[np.ndarray, np.ndarray]:
        f, b, c, k = np.broadcast_arrays(*(np.atleast_1d(np.asarray(v, dtype=float))
                                           for v in (flop, moved, cached, per_key)))
        core, remote = r.attention_time(summed_op(f[None], k[None], b[None], head_dim), c)
        return np.broadcast_to(core, f.shape).astype(float), np.broadcast_to(remote, f.shape).astype(float)

    big = 1e20
    fixed, on_flop, on_bytes, on_keys = at([0.0, big, 0.0, big], [0.0, 0.0, big, 0.0], 0.0, [0.0, 0.0, 0.0, big])[0]
    tier2 = at(0.0, 0.0, 1.0)[1][0]
    s_flop, s_bytes = (on_flop - fixed) / big, (on_bytes - fixed) / big
    overhead = (on_keys - on_flop) / (s_flop * big) if s_flop > 0 else 0.0
    s_cached = 0.0
    if s_bytes > 0:  # the cache's second-tier share leaves the HBM stream: probe where it is half of it
        rough = (on_bytes - at(0.0, big, big * 1e-8)[0][0]) / (big * 1e-8)
        if rough > 0:
            cached = big / 2 / (rough / s_bytes)
            s_cached = (on_bytes - at(0.0, big, cached)[0][0]) / cached
    coefficients = np.array([s_flop, s_bytes, s_cached, fixed, float(tier2), overhead])
    # checked at the ops of single sequences and batches, prefill and decode, short and long caches
    q = np.array([1.0, 1.0, 1.0, 64.0, 2048.0, 512.0, 1.0, 8192.0])
    p = np.array([0.0, 1000.0, 1e5, 4096.0, 0.0, 3e4, 2e6, 1e5])
    n = np.array([1.0, 256.0, 64.0, 1.0, 4.0, 8.0, 2.0, 1.0])
    op = r.attention(q, p, n)
    flop, moved = np.broadcast_to(op.flop, q.shape), np.broadcast_to(op.bytes, q.shape)
    per_key = np.broadcast_to(op.flop_per_key, q.shape)
    core, remote = at(flop, moved, n * p, per_key)
    s = coefficients
    if not (np.allclose(core, np.maximum(s[0] * (flop + s[5] * per_key), s[1] * moved - s[2] * n * p) + s[3],
                        rtol=1e-12, atol=0)
            and np.allclose(remote, s[4] * n * p, rtol=1e-12, atol=0)):
        return None
    return coefficients


def simulate_replica(trace: Trace, cost: Cost, limits: SchedulerLimits, prefilled: bool = False,
                     prefill_only: bool = False) -> ReplicaRun:
    """Run the trace through one replica. `prefilled`: requests arrive with their prompt's cache (the
    decode pool of a disaggregated deployment); `prefill_only`: requests leave after their first token
    (the prefill pool)."""
    s = ReplicaState(trace, limits, prefilled, prefill_only)
    run_until(s, cost)
    return replica_run(s, trace)


def replica_run(s: ReplicaState, trace: Trace) -> ReplicaRun:
    """What a replica did with the requests of `trace` (in its order)."""
    n = len(trace)
    times = RequestTimes(s.sent[:n], s.first[:n], s.finish[:n], trace.input_len, trace.output_len, s.preempted[:n])
    return ReplicaRun(times, s.iterations, s.batched, s.eager_steps)


def run_until(s: ReplicaState, cost: Cost, horizon: float = np.inf) -> None:
    """Run the replica's iterations that start before `horizon` (every one: until its requests are done).
    Events past the horizon are not known yet: a balancer may send requests at it (`balance.py`)."""
    s.horizon = horizon
    while s.done < s.n and s.now < horizon:
        s.arrive()
        if not s.running and not s.waiting:
            s.now = max(s.now, s.next_event())
            continue
        if not s.running:
            s.end_run()  # nothing running: the next batch starts a run
        in_run = s.run_left > 0  # multi-step: the scheduler admits nobody until the run ends
        if (in_run or not s.waiting) and _decode_stretch(s, cost):
            continue
        schedule, prefill_phase = s.plan(admitting=not in_run)
        if not schedule:  # nothing fits until something finishes or arrives
            upcoming = s.next_event()
            if np.isfinite(upcoming):
                s.now = max(s.now, upcoming)
                continue
            raise RuntimeError("serving simulation stalled: no request can be scheduled")
        s.run_iteration(schedule, cost)
        s.stepped(0 if prefill_phase else 1)  # a prompt-only iteration runs one step, outside multi-step runs


def _decode_stretch(s: ReplicaState, cost: Cost) -> bool:
    """Decode steps of the running batch until a sequence finishes or a request arrives (within a
    multi-step run: until the run ends), costed at once; False when one of them is not decoding or their
    pages do not all fit (the step-by-step path then runs, or preempts). The steps run in
    `kernels.decode_stretch`, costed there from the coefficients, or beforehand by `cost` itself."""
    ids = s.running.ids()  # unchanged until the stretch's finished sequences leave
    n, upcoming, cap = len(ids), s.next_event(), 4096
    riders = s.riders  # finished within the multi-step run, still stepped (`ReplicaState.stepped`)
    batch = n + len(riders)
    if s.run_left > 0:  # arrivals wait for the run's end (a balancer's, for the horizon)
        upcoming, cap = s.horizon, s.run_left
    if isinstance(cost, IterationCost) and cost.fitted is not None and cost.roofline is not None:
        layers, head = cost.layers_and_head(batch, batch)
        fitted, roofline, times = cost.fitted, cost.roofline, np.zeros(0)
    else:  # each step's cost is its own column: the first `span` steps, doubled until the stretch ends
        k_max = int(min(cap, (s.n_out[ids] - s.generated[ids]).min()))
        if k_max < 2 or bool((s.cached[ids] < s.target[ids]).any()):
            return False
        span, cached = min(k_max, 512), np.concatenate((s.cached[ids], riders))[:, None]
        while True:
            past = cached + np.arange(span, dtype=float)[None, :]  # whole numbers: exact in float
            times = np.asarray(cost(np.ones_like(past), past, batch), dtype=float)
            if span == k_max or s.now + np.cumsum(times)[-1] >= upcoming:
                break
            span = min(2 * span, k_max)
        fitted, roofline, layers, head, cap = np.zeros(6), np.zeros(5), 0.0, 0.0, span
    finished = s.scratch(n)
    eager = cost.overheads if isinstance(cost, IterationCost) else Overheads()
    longest = int(max(s.cached[ids].max(), riders.max(initial=0))) if s.may_run_eagerly(batch) else 0
    k, end, taken, done = decode_stretch(ids, s.cached, s.target, s.generated, s.blocks, s.n_out, s.free,
                                         s.limits.block_tokens, s.now, upcoming, cap, fitted, roofline, layers, head,
                                         times, finished, riders, eager.eager_s, eager.graph_context,
                                         eager.graph_batch)
    if k == 0:
        return False
    s.free -= taken
    s.now = end
    s.iterations += k
    s.batched += k * batch
    if s.may_run_eagerly(batch):
        s.count_eager(longest + 1 + np.arange(k), batch)
    s.finish_sequences(finished[:done])
    s.stepped(k)  # after the finished sequences: within the run they ride along from the next step
    return True
