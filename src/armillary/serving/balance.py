"""Load-aware balancing over a pool of replicas: each request goes, when it arrives, to the replica with
the fewest tokens still to compute (`ReplicaState.outstanding_tokens`: prompt tokens not yet in the cache
and output tokens not yet generated), the least-outstanding-requests idea of load-aware LLM routers (llm-d's
load scorer, vLLM production-stack's router) measured in tokens, so one long prompt weighs as much as the
many short ones it costs. The replicas run side by side, each up to the arrival, so the choice sees their
state at that moment (an iteration in flight counts as done: its results are known when it ends).
"""

from __future__ import annotations

import numpy as np

from armillary.serving.scheduler import Cost, ReplicaState
from armillary.serving.simulate import ReplicaRun, SchedulerLimits, replica_run, run_until
from armillary.serving.trace import Trace


def serve_least_outstanding(trace: Trace, cost: Cost, limits: SchedulerLimits, replicas: int, prefilled: bool = False,
                            prefill_only: bool = False) -> list[tuple[np.ndarray, ReplicaRun]]:
    """Each replica's requests (indices into `trace`, which is in arrival order) and what it did with them.
    Ties go to the lowest-numbered replica."""
    n = len(trace)
    states = [ReplicaState.empty(n, limits, prefilled, prefill_only) for _ in range(replicas)]
    owner = np.empty(n, np.int64)
    for i in range(n):
        arrival = float(trace.arrival_s[i])
        for s in states:
            run_until(s, cost, arrival)
        k = min(range(replicas), key=lambda j: states[j].outstanding_tokens())
        owner[i] = k
        states[k].add(arrival, int(trace.input_len[i]), int(trace.output_len[i]))
    parts = []
    for k, s in enumerate(states):
        run_until(s, cost)
        mine = np.flatnonzero(owner == k)
        parts.append((mine, replica_run(s, trace.subset(mine))))
    return parts
