"""A request-level discrete-event simulation of one serving replica: continuous batching (Orca, Yu et al.
2022), chunked prefill (Sarathi-Serve, Agrawal et al. 2024), a paged KV cache with preemption by
recomputation (vLLM, Kwon et al. 2023). Each iteration is costed by the analytical model
(`estimate.inference.ReplicaModel`), so at low load a request's TTFT is the analytical prefill time.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from armillary.estimate.inference import ReplicaModel, kv_pages
from armillary.serving.trace import Trace
from armillary.workload.ops import Op


@dataclass(frozen=True)
class SchedulerLimits:
    max_batch: int  # sequences per iteration
    max_batched_tokens: int  # new tokens per iteration
    chunked_prefill: bool
    kv_blocks: int  # pages of the KV cache on one device
    block_tokens: int


@dataclass(frozen=True)
class RequestTimes:
    """Per request (trace order): NaN where a request never got that far (rejected: its cache alone
    exceeds the KV capacity)."""

    arrival_s: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    preemptions: np.ndarray


@dataclass(frozen=True)
class ReplicaRun:
    times: RequestTimes
    iterations: int
    batched_sequences: int  # summed over iterations (mean batch = this / iterations)


class IterationCost:
    """Time of one iteration from its sequences' new and cached tokens. The token-dependent part and the
    head are tabulated once (the same functions, evaluated over every count at once)."""

    def __init__(self, replica: ReplicaModel, max_tokens: int, max_sequences: int) -> None:
        self.replica = replica
        self.by_tokens = np.asarray(replica.tokens_time(np.arange(1, max_tokens + 1, dtype=float)).total)
        self.by_sequences = np.concatenate(([0.0], replica.head_time(np.arange(1, max_sequences + 1, dtype=float))))

    def __call__(self, new: np.ndarray, past: np.ndarray, emitting: int) -> np.ndarray:
        """Times of iterations over the same sequences: `new` and `past` are (sequences x iterations), or
        one column for one iteration."""
        r = self.replica
        new2, past2 = np.atleast_2d(new.T).T.astype(float), np.atleast_2d(past.T).T.astype(float)
        tokens = int(new2[:, 0].sum())
        layers = (self.by_tokens[tokens - 1] if tokens <= len(self.by_tokens)
                  else float(r.tokens_time(float(tokens)).total))
        op = r.attention(new2, past2)
        summed = Op(np.sum(op.flop, axis=0), np.sum(op.bytes, axis=0))
        core, remote = r.attention_time(summed, past2.sum(axis=0))
        return np.asarray(layers + core + remote + self.by_sequences[min(emitting, len(self.by_sequences) - 1)])


def simulate_replica(trace: Trace, cost: IterationCost, limits: SchedulerLimits, prefilled: bool = False,
                     prefill_only: bool = False) -> ReplicaRun:
    """Run the trace through one replica. `prefilled`: requests arrive with their prompt's cache (the
    decode pool of a disaggregated deployment); `prefill_only`: requests leave after their first token
    (the prefill pool)."""
    n = len(trace)
    arrival, n_in = trace.arrival_s, trace.input_len.astype(np.int64)
    n_out = np.ones(n, np.int64) if prefill_only else trace.output_len.astype(np.int64)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    preempted = np.zeros(n, np.int64)
    cached = np.zeros(n, np.int64)  # tokens in the KV cache
    target = n_in.copy()  # tokens the (re)computed prompt must reach before the next token is sampled
    generated = np.zeros(n, np.int64)
    blocks = np.zeros(n, np.int64)
    B = limits.block_tokens
    free = limits.kv_blocks
    waiting: deque[int] = deque()
    running: list[int] = []
    now, arrived, done, iterations, batched = 0.0, 0, 0, 0, 0

    def pages(tokens: int) -> int:
        return kv_pages(tokens, B)

    def preempt(idx: int) -> int:
        """Send a sequence back to the queue head to recompute its prompt and output so far; its pages
        are freed (returned)."""
        freed = int(blocks[idx])
        blocks[idx], cached[idx] = 0, 0
        target[idx] = n_in[idx] + generated[idx]
        preempted[idx] += 1
        waiting.appendleft(idx)
        return freed

    while done < n:
        while arrived < n and arrival[arrived] <= now:
            idx = arrived
            arrived += 1
            if pages(int(n_in[idx] + n_out[idx])) > limits.kv_blocks:  # can never fit: rejected
                done += 1
                continue
            if prefilled:
                cached[idx] = target[idx] = n_in[idx]
                generated[idx] = 1
                first[idx] = arrival[idx]
                if n_out[idx] <= 1:
                    finish[idx] = arrival[idx]
                    done += 1
                    continue
            waiting.append(idx)
        if not running and not waiting:
            if arrived < n:
                now = max(now, float(arrival[arrived]))
            continue
        if not waiting and running and bool((cached[running] >= target[running]).all()):
            steps = _decode_stretch(running, cached, n_out, generated, blocks, free, B, cost, now,
                                    float(arrival[arrived]) if arrived < n else np.inf)
            if steps is not None:  # several decode steps of an unchanged batch at once
                k, end, added = steps
                ids = np.array(running)
                cached[ids] += k
                generated[ids] += k
                blocks[ids] += added
                free -= int(added.sum())
                now = end
                iterations += k
                batched += k * len(ids)
                finished = ids[generated[ids] >= n_out[ids]]
                free += _finish(finished, now, finish, blocks, running)
                done += len(finished)
                continue
        schedule: dict[int, int] = {}
        budget = limits.max_batched_tokens
        # without chunking an iteration either prefills whole prompts or decodes (vLLM's default scheduler
        # before chunked prefill): prompts go first when the next one fits
        head = waiting[0] if waiting else -1
        prefill_phase = (not limits.chunked_prefill and head >= 0 and len(running) < limits.max_batch
                         and pages(int(target[head])) - blocks[head] <= free)
        # running sequences first (decodes and unfinished chunked prompts), in admission order, as far as
        # the token budget goes; when their pages fit, all at once
        i = 0
        if running and not prefill_phase:
            ids = np.array(running, np.int64)
            want = np.maximum(target[ids] - cached[ids], 1)
            before = np.cumsum(want) - want
            m = int(np.searchsorted(before, budget, side="left"))
            ids, want = ids[:m], np.minimum(want[:m], budget - before[:m])
            need = kv_pages(cached[ids] + want, B) - blocks[ids]
            if need.sum() <= free:
                free -= int(need.sum())
                blocks[ids] += need
                schedule.update(zip(ids.tolist(), want.tolist(), strict=True))
                budget -= int(want.sum())
                i = len(running)  # done: the step-by-step loop below has nothing left
        while i < len(running) and not prefill_phase:
            idx = running[i]
            want = 1 if cached[idx] >= target[idx] else min(int(target[idx] - cached[idx]), budget)
            if want <= 0 or budget <= 0:
                break
            need = pages(int(cached[idx] + want)) - blocks[idx]
            while need > free and running[-1] != idx:  # preempt the newest sequence (vLLM recompute)
                victim = running.pop()
                free += preempt(victim)
                schedule.pop(victim, None)
            if need > free:  # not even this one fits: it waits
                running.pop(i)
                free += preempt(idx)
                continue
            free -= need
            blocks[idx] += need
            schedule[idx] = want
            budget -= want
            i += 1
        # admit waiting requests while sequences, tokens and pages allow
        while waiting and len(running) < limits.max_batch and budget > 0 and (prefill_phase or limits.chunked_prefill
                                                                                or not schedule):
            idx = waiting[0]
            remaining = int(target[idx] - cached[idx])
            if limits.chunked_prefill:
                want = min(remaining, budget)
            elif remaining <= budget or not schedule:
                want = remaining  # a whole prompt (one may exceed the budget on its own)
            else:
                break
            need = pages(int(cached[idx] + want)) - blocks[idx]
            if need > free:
                break
            waiting.popleft()
            running.append(idx)
            free -= need
            blocks[idx] += need
            schedule[idx] = want
            budget -= want
        if not schedule:  # nothing fits until something finishes or arrives
            if arrived < n:
                now = max(now, float(arrival[arrived]))
                continue
            raise RuntimeError("serving simulation stalled: no request can be scheduled")
        ids = np.fromiter(schedule.keys(), np.int64, len(schedule))
        new = np.fromiter(schedule.values(), np.int64, len(schedule))
        past = cached[ids]
        emits = cached[ids] + new >= target[ids]
        now += float(cost(new, past, int(emits.sum()))[0])
        iterations += 1
        batched += len(ids)
        cached[ids] += new
        sampled = ids[emits]
        generated[sampled] += 1
        first[sampled[np.isnan(first[sampled])]] = now
        finished = sampled[generated[sampled] >= n_out[sampled]]
        free += _finish(finished, now, finish, blocks, running)
        done += len(finished)
    times = RequestTimes(arrival, first, finish, trace.input_len, trace.output_len, preempted)
    return ReplicaRun(times, iterations, batched)


def _finish(finished: np.ndarray, now: float, finish: np.ndarray, blocks: np.ndarray, running: list[int]) -> int:
    """Record the finished sequences, drop them from `running`, and return the pages they free."""
    if not len(finished):
        return 0
    finish[finished] = now
    freed = int(blocks[finished].sum())
    blocks[finished] = 0
    gone = set(finished.tolist())
    running[:] = [i for i in running if i not in gone]
    return freed


def _decode_stretch(running: list[int], cached: np.ndarray, n_out: np.ndarray, generated: np.ndarray,
                    blocks: np.ndarray, free: int, block_tokens: int, cost: IterationCost, now: float,
                    next_arrival: float) -> tuple[int, float, np.ndarray] | None:
    """Decode steps of the running batch until a sequence finishes or a request arrives, costed at once:
    (steps, end time, pages added per sequence); None when their pages do not all fit (the step-by-step
    path then preempts)."""
    ids = np.array(running)
    k_max = int(min(4096, (n_out[ids] - generated[ids]).min()))
    if k_max < 2:
        return None
    past = cached[ids][:, None] + np.arange(k_max)[None, :]
    times = cost(np.ones_like(past), past, len(ids))
    ends = now + np.cumsum(times)
    k = 1 + int(np.searchsorted(ends[:-1], next_arrival, side="left"))  # steps that start before the arrival
    added = kv_pages(cached[ids] + k, block_tokens) - blocks[ids]
    if added.sum() > free:
        return None
    return k, float(ends[k - 1]), added


