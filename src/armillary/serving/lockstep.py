"""Data-parallel attention groups served in lock step (SGLang --enable-dp-attention: "each DP worker
independently handles different types of batches (prefill, decode, idle), which are then synchronized before
and after processing through the MoE layer", SGLang docs, DeepSeek optimizations).

Each group schedules its own requests over its own KV cache (`scheduler.ReplicaState`), but every layer's MLP
joins all groups, so an iteration of the replica lasts as long as the slowest group's own part (attention,
its projections, head and host overheads) plus the part over the tokens of all groups (the experts and their
exchange: `estimate.dp_attention.dp_attention_parts`). A group with nothing to run joins with an idle batch;
a prompt chunk in one group stretches every group's decode step.
"""

from __future__ import annotations

import numpy as np

from armillary.estimate.dp_attention import dp_attention_parts
from armillary.estimate.inference import ReplicaModel
from armillary.serving.batch import Schedule
from armillary.serving.engine import Overheads
from armillary.serving.kernels import iteration_time
from armillary.serving.scheduler import ReplicaState
from armillary.serving.simulate import IterationCost, ReplicaRun, RequestTimes, SchedulerLimits
from armillary.serving.trace import Trace


class GroupStepCost:
    """Tables of a group's own part by its new tokens and of the shared part by all groups' new tokens."""

    def __init__(self, replica: ReplicaModel, max_tokens: int, max_sequences: int,
                 overheads: Overheads | None = None, pad_groups: bool = False) -> None:
        self.iteration = IterationCost(replica, max_tokens, max_sequences, overheads)
        self.replica, groups = replica, replica.attention_dp
        self.pad_groups = pad_groups
        own = np.arange(0, max_tokens + 1, dtype=float)
        self.own = np.where(own > 0, np.asarray(dp_attention_parts(replica, own, groups * own)[0].total), 0.0)
        # the shared part at the mean group's tokens (their all-to-all buffers taken alike)
        gathered = np.arange(0, int(groups) * max_tokens + 1, dtype=float)
        shared = dp_attention_parts(replica, gathered / groups, gathered)[1].total
        self.shared = np.where(gathered > 0, np.asarray(shared), 0.0)

    def group(self, new: np.ndarray, past: np.ndarray, emitting: int) -> float:
        """A group's own part of an iteration over its scheduled sequences."""
        c, r = self.iteration, self.replica
        tokens = int(new.sum())
        own = self.own[tokens] if tokens < len(self.own) else float(dp_attention_parts(
            r, float(tokens), r.attention_dp * float(tokens))[0].total)
        head = (c.by_sequences[emitting] if emitting < len(c.by_sequences)
                else float(r.head_time(float(emitting))) + c.overheads(emitting))
        eager = float(c.overheads.eager(new, past))
        if c.fitted is not None and c.roofline is not None:  # the attention from its coefficients
            return iteration_time(new, past, c.fitted, c.roofline, float(own), float(head)) + eager
        new2, past2 = new.reshape(-1, 1).astype(float), past.reshape(-1, 1).astype(float)
        core, remote = r.attention_time(c.attention_op(new2, past2), past2.sum(axis=0))
        return float(own + np.sum(core) + np.sum(remote) + head) + eager

    def joint(self, tokens: int, largest: int = 0, decoding: bool = False) -> float:
        """The part over all groups' `tokens`; a padded decode step (`pad_groups`) computes the `largest`
        group's tokens in every group, the idle ones included."""
        r = self.replica
        if self.pad_groups and decoding:
            tokens = int(r.attention_dp) * largest
        if tokens < len(self.shared):
            return float(self.shared[tokens])
        return float(dp_attention_parts(r, tokens / r.attention_dp, float(tokens))[1].total)


def _plan(s: ReplicaState) -> Schedule:
    """The group's next iteration, as `simulate.simulate_replica` schedules it."""
    if not s.running and not s.waiting:
        return s.schedule()
    return s.plan()[0]


def simulate_groups(traces: list[Trace], cost: GroupStepCost, limits: list[SchedulerLimits]) -> list[ReplicaRun]:
    """Run each group's trace, the groups in lock step."""
    states = [ReplicaState(t, lim, False, False) for t, lim in zip(traces, limits, strict=True)]
    now = 0.0
    while any(s.done < s.n for s in states):
        plans = []
        for s in states:
            s.now = now
            s.arrive()
            plans.append(_plan(s))
        if not any(plans):
            upcoming = min((s.next_event() for s in states if s.done < s.n), default=np.inf)
            if not np.isfinite(upcoming):
                raise RuntimeError("serving simulation stalled: no request can be scheduled")
            now = max(now, upcoming)
            continue
        own, tokens, largest, decoding = [], 0, 0, True
        for s, schedule in zip(states, plans, strict=True):
            if schedule:
                ids, new = schedule.arrays()
                emitting = int((s.cached[ids] + new >= s.target[ids]).sum())
                own.append(cost.group(new, s.cached[ids], emitting) + s.extra_s)
                tokens += int(new.sum())
                largest = max(largest, int(new.sum()))
                decoding = decoding and emitting == len(ids) == int(new.sum())  # one token each: a decode step
        step = max(own) + cost.joint(tokens, largest, decoding)
        for s, schedule in zip(states, plans, strict=True):
            if schedule:
                rest = step - s.extra_s
                s.run_iteration(schedule, lambda *_: np.array([rest]))  # noqa: B023 (called at once)
            s.now = now + step
        now += step
    return [ReplicaRun(RequestTimes(s.sent, s.first, s.finish, t.input_len, t.output_len, s.preempted), s.iterations,
                       s.batched, s.eager_steps) for s, t in zip(states, traces, strict=True)]
