"""The state of one serving replica and the named steps of an iteration: arrivals (open or closed loop),
the running sequences' share of the token budget (preempting under the policy when pages run out), the
admission of waiting requests, and the iteration itself. `simulate.simulate_replica` drives it.

Policies (`policy.Policy`): guaranteed-no-evict reserves a request's prompt and whole output at admission
and never preempts; max-utilization and recompute free the newest sequence's pages and recompute it;
swap copies them to the second memory tier and back (Kwon et al. 2023, section 4.5).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from armillary.estimate.inference_memory import kv_pages
from armillary.serving.batch import Running, Schedule
from armillary.serving.kernels import advance, outside_graphs, progress, release, running_fit, scheduled
from armillary.serving.trace import Trace
from armillary.specs.workload import Policy

if TYPE_CHECKING:
    from armillary.serving.simulate import SchedulerLimits

Cost = Callable[[np.ndarray, np.ndarray, int], np.ndarray]


class ReplicaState:
    """Per-request arrays (trace order), the waiting queue and the running list of one replica."""

    def __init__(self, trace: Trace, limits: SchedulerLimits, prefilled: bool, prefill_only: bool) -> None:
        n = len(trace)
        self.n, self.limits, self.prefilled, self.prefill_only = n, limits, prefilled, prefill_only
        self.arrival_s: list[float] = trace.arrival_s.astype(float).tolist()
        self.n_in = trace.input_len.astype(np.int64)
        self.n_out = np.ones(n, np.int64) if prefill_only else trace.output_len.astype(np.int64)
        self.sent = trace.arrival_s.astype(float).copy()  # when the client sends (closed loop: a slot frees)
        self.first, self.finish = np.full(n, np.nan), np.full(n, np.nan)
        self.preempted = np.zeros(n, np.int64)
        self.hit = np.minimum((limits.prefix_hit_rate * self.n_in).astype(np.int64), self.n_in - 1)
        self.cached = np.zeros(n, np.int64)  # tokens in the KV cache (HBM or, swapped out, the second tier)
        self.target = self.n_in.copy()  # tokens the (re)computed prompt must reach before the next sample
        self.generated = np.zeros(n, np.int64)
        self.blocks = np.zeros(n, np.int64)  # HBM pages held (reserved, under no-evict)
        self.shared = np.zeros(n, np.int64)  # of which the prefix cache's, shared with other requests
        self.swapped = np.zeros(n, bool)
        self.free = limits.kv_blocks
        self.waiting: deque[int] = deque()
        self.running = Running(limits.max_batch)
        self._schedule, self._scratch = Schedule(limits.max_batch), np.empty(max(limits.max_batch, 1), np.int64)
        self.now = 0.0
        self.sent_n = self.queued_n = self.done = self.iterations = self.batched = self.eager_steps = 0
        self.slot_open = -np.inf  # closed loop: when the last slot freed
        self.extra_s = 0.0  # swap traffic of the iteration being scheduled
        self.run_left = 0  # decode steps left in the current multi-step run (0: the scheduler may admit)
        # cached tokens of the sequences that finished within the current run and still ride along in its
        # batch (`stepped`); those that finished in the last iteration, not yet riding
        self.riders, self._finishing = np.zeros(0, np.int64), np.zeros(0, np.int64)
        self.horizon = np.inf  # no event past it is known yet (a balancer may still send requests here)
        # the tokens the unfinished requests had to compute when sent (`outstanding_tokens` takes off the
        # progress of those running or paused)
        self.initial = self.initial_work(np.arange(n))
        self.work = int(self.initial.sum())
        self.paused: set[int] = set()

    @classmethod
    def empty(cls, capacity: int, limits: SchedulerLimits, prefilled: bool, prefill_only: bool) -> ReplicaState:
        """A replica with room for `capacity` requests and none yet: a balancer sends them (`add`)."""
        zeros = np.zeros(capacity, np.int64)
        s = cls(Trace(np.full(capacity, np.inf), zeros, zeros), limits, prefilled, prefill_only)
        s.n = s.work = 0
        return s

    def add(self, arrival_s: float, input_len: int, output_len: int) -> None:
        """A request sent to this replica (after those it has, at or after their arrivals)."""
        i = self.n
        self.arrival_s[i] = self.sent[i] = arrival_s
        self.n_in[i] = self.target[i] = input_len
        self.n_out[i] = 1 if self.prefill_only else output_len
        self.hit[i] = min(int(self.limits.prefix_hit_rate * input_len), input_len - 1)
        self.initial[i] = self.initial_work(np.array([i]))[0]
        self.n += 1
        self.work += int(self.initial[i])

    def initial_work(self, ids: np.ndarray) -> np.ndarray:
        """Tokens to compute of requests not yet started: the prompt past the prefix hit and the output
        (a prefilled request arrives with its first token)."""
        if self.prefilled:
            return np.maximum(self.n_out[ids] - 1, 0)
        return self.n_in[ids] - self.hit[ids] + self.n_out[ids]

    def outstanding_tokens(self) -> int:
        """Tokens still to compute of the requests sent here and not finished: prompt tokens not yet in the
        cache (recomputation included) and output tokens not yet generated."""
        done = self._progress(self.running.ids())
        if self.paused:
            done += self._progress(np.fromiter(self.paused, np.int64, len(self.paused)))
        return self.work - done

    def _progress(self, ids: np.ndarray) -> int:
        return int(progress(ids, self.initial, self.n_out, self.target, self.cached, self.generated))

    # ---- arrivals -------------------------------------------------------------------------------------
    def _gate_open(self) -> bool:
        c = self.limits.concurrency
        return c is None or self.sent_n - self.done < c

    def next_event(self) -> float:
        """The next time a request is sent or queued (inf: none until something finishes)."""
        upcoming = np.inf
        if self.sent_n < self.n and self._gate_open():
            upcoming = max(self.arrival_s[self.sent_n], self.slot_open)
        if self.queued_n < self.sent_n:
            upcoming = min(upcoming, float(self.sent[self.queued_n]) + self.limits.request_overhead_s)
        return min(upcoming, self.horizon)

    def arrive(self) -> None:
        """Send what the client may send by now, and queue what the server has received by now."""
        now, delay = self.now, self.limits.request_overhead_s
        while True:
            if self.sent_n < self.n and self._gate_open():
                t = max(self.arrival_s[self.sent_n], self.slot_open)
                if t <= now:
                    self.sent[self.sent_n] = t
                    self.sent_n += 1
                    continue
            if self.queued_n < self.sent_n and self.sent[self.queued_n] + delay <= now:
                self.queued_n += 1
                self._enqueue(self.queued_n - 1)
                continue
            return

    def _enqueue(self, idx: int) -> None:
        lim = self.limits
        if kv_pages(int(self.n_in[idx] + self.n_out[idx]), lim.block_tokens) > lim.kv_blocks:
            self.work -= int(self.initial[idx])
            self._done(1)  # can never fit: rejected
            return
        self.cached[idx] = self.hit[idx]
        # the whole pages of its prefix hit are the cache's (vLLM automatic prefix caching, SGLang's radix
        # cache), shared with the requests that hit them, not taken from the pool; the shared prefixes
        # themselves are taken to be few next to the pool
        self.shared[idx] = self.blocks[idx] = self.hit[idx] // self.limits.block_tokens
        if self.prefilled:
            self.cached[idx] = self.target[idx] = self.n_in[idx]
            self.generated[idx] = 1
            self.first[idx] = self.sent[idx]
            if self.n_out[idx] <= 1:
                self.finish[idx] = self.sent[idx]
                self._done(1)  # nothing left to compute (`work` counted none)
                return
        self.waiting.append(idx)

    def _done(self, count: int) -> None:
        if count and not self._gate_open():
            self.slot_open = self.now
        self.done += count

    # ---- pages and preemption -------------------------------------------------------------------------
    def need(self, idx: int, want: int) -> int:
        """Pages sequence `idx` must add to run `want` more tokens (no-evict: its whole reservation)."""
        lim = self.limits
        tokens = int(self.cached[idx] + want)
        if lim.policy is Policy.GUARANTEED_NO_EVICT:
            tokens = max(tokens, int(self.n_in[idx] + self.n_out[idx]))
        return max(0, int(kv_pages(tokens, lim.block_tokens)) - int(self.blocks[idx]))

    def take(self, idx: int, pages: int) -> None:
        self.free -= pages
        self.blocks[idx] += pages
        if self.swapped[idx]:  # its cache comes back from the second tier first
            self.swapped[idx] = False
            self.extra_s += float(self.cached[idx]) * self.limits.swap_s_per_token

    def preempt(self, idx: int) -> None:
        """Send a sequence back to the queue head, its pages freed: recomputed from its prompt and output
        so far, or (swap) copied out to the second tier to come back as they were."""
        self.free += int(self.blocks[idx] - self.shared[idx])
        self.blocks[idx] = self.shared[idx]
        if self.limits.policy is Policy.SWAP:
            self.swapped[idx] = True
            self.extra_s += float(self.cached[idx]) * self.limits.swap_s_per_token
        else:
            self.cached[idx] = self.hit[idx]
            self.target[idx] = self.n_in[idx] + self.generated[idx]
        self.preempted[idx] += 1
        self.waiting.appendleft(idx)
        self.paused.add(idx)

    def want(self, idx: int, budget: int) -> int:
        """New tokens of sequence `idx` this iteration: a decode token, or a chunk of its prompt."""
        left = int(self.target[idx] - self.cached[idx])
        return 1 if left <= 0 else min(left, budget)

    # ---- one iteration --------------------------------------------------------------------------------
    def plan(self, admitting: bool = True) -> tuple[Schedule, bool]:
        """The next iteration's schedule, and whether it prefills whole prompts (`prefill_phase`): the running
        sequences as far as the token budget goes (none in a prefill phase), then, `admitting`, waiting
        requests (a multi-step run admits nobody until it ends)."""
        schedule = self.schedule()
        prefill_phase = admitting and self.prefill_phase()
        budget = self.limits.max_batched_tokens
        if not prefill_phase:
            budget = self.schedule_running(schedule, budget)
        if admitting:
            self.admit(schedule, budget, prefill_phase)
        return schedule, prefill_phase

    def schedule_running(self, schedule: Schedule, budget: int) -> int:
        """Running sequences in admission order as far as the token budget goes; when pages run out the
        newest sequence is preempted. Returns the budget left."""
        running = self.running
        if running and self._all_running_fit(schedule):
            return budget - schedule.tokens()
        i = 0
        while i < len(running) and budget > 0:
            idx = running[i]
            want = self.want(idx, budget)
            need = self.need(idx, want)
            while need > self.free and running[-1] != idx:  # preempt the newest sequence
                victim = running.pop()
                self.preempt(victim)
                schedule.pop(victim)
            if need > self.free:  # not even this one fits: it waits
                running.pop(i)
                self.preempt(idx)
                continue
            self.take(idx, need)
            schedule[idx] = want
            budget -= want
            i += 1
        return budget

    def _all_running_fit(self, schedule: Schedule) -> bool:
        """Schedule the running sequences that the budget reaches at once when their pages all fit (the
        budget is then spent or every running sequence scheduled)."""
        lim = self.limits
        schedule.clear(len(self.running))
        taken, m, tokens = running_fit(self.running.ids(), self.target, self.cached, self.n_in, self.n_out,
                                       self.blocks, self.swapped, lim.max_batched_tokens, lim.block_tokens,
                                       lim.policy is Policy.GUARANTEED_NO_EVICT, self.free, schedule.ids,
                                       schedule.want)
        if taken < 0:
            return False
        self.free -= taken
        schedule.n, schedule.total = m, tokens
        return True

    def admit(self, schedule: Schedule, budget: int, prefill_phase: bool) -> None:
        """Admit waiting requests, in order, while sequences, tokens and pages allow."""
        lim = self.limits
        while (self.waiting and len(self.running) < lim.max_batch and budget > 0
               and (prefill_phase or lim.chunked_prefill or not schedule)):
            idx = self.waiting[0]
            remaining = int(self.target[idx] - self.cached[idx])
            if lim.chunked_prefill or remaining <= 0:
                want = self.want(idx, budget)
            elif remaining <= budget or not schedule:
                want = remaining  # a whole prompt (one may exceed the budget on its own)
            else:
                break
            need = self.need(idx, want)
            if need > self.free - self.watermark(need):
                break
            self.waiting.popleft()
            self.paused.discard(idx)
            self.running.append(idx)
            self.take(idx, need)
            schedule[idx] = want
            budget -= want

    def prefill_phase(self) -> bool:
        """Without chunking an iteration either prefills whole prompts or decodes (vLLM's scheduler before
        chunked prefill): prompts go first when the next one fits."""
        lim = self.limits
        if lim.chunked_prefill or not self.waiting or len(self.running) >= lim.max_batch:
            return False
        head = self.waiting[0]
        need = self.need(head, max(int(self.target[head] - self.cached[head]), 1))
        return need <= self.free - self.watermark(need)

    def watermark(self, need: int) -> int:
        """Pages to leave free when admitting a sequence that takes `need` pages: the limits' watermark, but
        never so many that it could not be admitted into an empty cache (it would wait forever)."""
        return min(self.limits.watermark_blocks, self.limits.kv_blocks - need)

    def schedule(self) -> Schedule:
        """An empty schedule for the next iteration (this replica's buffers)."""
        return self._schedule.clear(self.limits.max_batch)

    def scratch(self, n: int) -> np.ndarray:
        """A work buffer for `n` sequences (its contents valid until the next call)."""
        if len(self._scratch) < n:
            self._scratch = np.empty(n, np.int64)
        return self._scratch[:n]

    def may_run_eagerly(self, sequences: int) -> bool:
        """Whether a decode step of `sequences` sequences can fall outside the CUDA graphs at all."""
        return self.limits.graph_context < np.inf or sequences > self.limits.graph_batch

    def count_eager(self, longest: np.ndarray, sequences: int) -> None:
        """Count the decode steps of `sequences` sequences, the longest `longest` tokens at each (the new one
        included), that run outside the CUDA graphs (`kernels.outside_graphs`)."""
        lim = self.limits
        self.eager_steps += int(np.count_nonzero(outside_graphs(longest, sequences, lim.graph_context,
                                                                lim.graph_batch)))

    def stepped(self, k: int) -> None:
        """`k` iterations of multi-step runs done (0: a prompt-only iteration, outside any run): a run starts
        when one ends (vLLM V0 schedules a decode batch for `scheduler_steps` iterations at once:
        SequenceGroup.init_multi_step, cb3b2b9b). A run's batch is fixed: a sequence that finishes within it
        has its output and pages released at once, yet its slot is stepped until the run ends (the model
        runner advances one frozen input of `num_seqs` sequences, vllm/worker/multi_step_model_runner.py,
        and the engine reschedules only when the cached batch has no steps left, llm_engine.py
        _has_remaining_steps, cb3b2b9b): it rides along, its cache growing a token a step."""
        self.run_left = (self.run_left - k) % self.limits.scheduler_steps
        if self.run_left == 0:
            self.end_run()
        else:
            self.riders = np.concatenate((self.riders + k, self._finishing))
            self._finishing = self._finishing[:0]

    def end_run(self) -> None:
        """The multi-step run is over (or nothing runs): the next batch starts one, without riders."""
        self.run_left = 0
        self.riders, self._finishing = self.riders[:0], self._finishing[:0]

    def with_riders(self, new: np.ndarray, past: np.ndarray, emitting: int) -> tuple[np.ndarray, np.ndarray, int]:
        """An iteration's sequences (`new` tokens over `past` cached, `emitting` sampling) with the run's
        riders appended, each a decode token over its cache."""
        if not len(self.riders):
            return new, past, emitting
        return (np.concatenate((new, np.ones(len(self.riders), new.dtype))),
                np.concatenate((past, self.riders.astype(past.dtype))), emitting + len(self.riders))

    def run_iteration(self, schedule: Schedule, cost: Cost) -> None:
        ids, new = schedule.arrays()
        past = self.scratch(len(ids))
        emitting = scheduled(ids, new, self.cached, self.target, past)
        batch_new, batch_past, batch_emitting = self.with_riders(new, past, emitting)  # what the GPU steps
        if len(batch_new) and self.may_run_eagerly(len(batch_new)) and int(batch_new.max()) <= 1:  # a decode step
            self.count_eager(np.array([int((batch_past + batch_new).max())]), len(batch_new))
        self.now += float(cost(batch_new, batch_past, batch_emitting)[0]) + self.extra_s
        self.extra_s = 0.0
        self.iterations += 1
        self.batched += len(batch_new)
        done = advance(ids, new, self.cached, self.target, self.generated, self.first, self.n_out, self.now, past)
        self.finish_sequences(past[:done])

    def finish_sequences(self, finished: np.ndarray) -> None:
        """Record the finished sequences, drop them from `running`, free their pages."""
        if not len(finished):
            return
        self.work -= self._progress(finished)  # all of their work
        self.free += release(finished, self.blocks, self.shared, self.finish, self.now)
        if self.limits.scheduler_steps > 1:  # they ride along if the run goes on (`stepped`)
            self._finishing = np.concatenate((self._finishing, self.cached[finished]))
        self.running.remove(finished)
        self._done(len(finished))
