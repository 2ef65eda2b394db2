"""Compiled inner loops of the serving simulation: one iteration's time and a stretch of decode steps.

They evaluate no cost formula of their own: `simulate.IterationCost` reads the coefficients off the
analytical model once per replica (`ReplicaModel.attention` for the attention op's FLOPs and bytes,
`ReplicaModel.attention_time` for its kernel time, both checked against the model at far-apart points)
and tabulates the token- and sequence-dependent parts; these loops only combine them per sequence.

`fitted`: (FLOPs, bytes per new token, bytes per cached token) of a prefill step, then of a decode step
(one sequence of q new tokens over p cached: c_f q (2p + q) / 2 FLOPs, b_new q + b_past p bytes).
`roofline`: (s_flop, s_bytes, s_cached, fixed, s_tier2, overhead) of the attention of all layers: kernels
max(s_flop (F + overhead K), s_bytes B - s_cached P) + fixed and second-tier reads s_tier2 P for an
iteration of F FLOPs, B bytes over P cached tokens, K its FLOPs per key walked (c_f q per sequence:
`cost.compute.walked_flop`).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np


@numba.njit(cache=True)
def outside_graphs(longest: Any, sequences: Any, graph_context: float, graph_batch: float) -> Any:
    """Whether a decode step runs outside the engine's CUDA graphs: its `longest` sequence (the new token
    included) past `graph_context` (0: no graphs), or more than `graph_batch` `sequences` (arrays broadcast:
    one answer per step). The one predicate of the eager host time (`engine.Overheads`), its count
    (`scheduler.ReplicaState.count_eager`) and the decode stretches below."""
    return (longest > graph_context) | (sequences > graph_batch)


@numba.njit(cache=True, inline="always")
def _attention(flop: float, per_key: float, moved: float, cached: float, roofline: np.ndarray
               ) -> tuple[float, float]:
    core = max(roofline[0] * (flop + roofline[5] * per_key), roofline[1] * moved - roofline[2] * cached) + roofline[3]
    return core, roofline[4] * cached


@numba.njit(cache=True, inline="always")
def _column(new: np.ndarray, past: np.ndarray, fitted: np.ndarray, roofline: np.ndarray) -> tuple[float, float, int]:
    """(attention kernels, second-tier reads, new tokens) of one iteration over sequences of `new` tokens
    each over `past` cached ones: the attention of the summed op."""
    flop = per_key = moved = cached = 0.0
    tokens = 0
    for i in range(len(new)):
        q, p = float(new[i]), float(past[i])
        o = 3 if q <= 1 else 0  # decode steps (MLA's absorbed form)
        flop += fitted[o] * q * (2 * p + q) / 2
        per_key += fitted[o] * q  # over (2p + q) / 2 keys per query
        moved += fitted[o + 1] * q + fitted[o + 2] * p
        cached += p
        tokens += new[i]
    core, remote = _attention(flop, per_key, moved, cached, roofline)
    return core, remote, tokens


@numba.njit(cache=True)
def iteration_time(new: np.ndarray, past: np.ndarray, fitted: np.ndarray, roofline: np.ndarray, layers: float,
                   head: float) -> float:
    """One iteration: the layers' part and the head (given) plus the attention."""
    core, remote, _ = _column(new, past, fitted, roofline)
    return layers + core + remote + head


@numba.njit(cache=True)
def tabulated_time(new: np.ndarray, past: np.ndarray, emitting: int, fitted: np.ndarray, roofline: np.ndarray,
                   by_tokens: np.ndarray, by_sequences: np.ndarray) -> float:
    """`iteration_time` with the layers' part by new tokens (`by_tokens[tokens - 1]`) and the head by
    sampled sequences (`by_sequences[emitting]`) read off their tables; NaN past them."""
    core, remote, tokens = _column(new, past, fitted, roofline)
    if tokens > len(by_tokens) or emitting >= len(by_sequences):
        return np.nan
    return by_tokens[tokens - 1] + core + remote + by_sequences[emitting]


@numba.njit(cache=True)
def decode_stretch(ids: np.ndarray, cached: np.ndarray, target: np.ndarray, generated: np.ndarray,
                   blocks: np.ndarray, n_out: np.ndarray, free: int, block_tokens: int, now: float, upcoming: float,
                   cap: int, fitted: np.ndarray, roofline: np.ndarray, layers: float, head: float,
                   times: np.ndarray, finished: np.ndarray, riders: np.ndarray, eager_s: float = 0.0,
                   graph_context: float = np.inf, graph_batch: float = np.inf) -> tuple[int, float, int, int]:
    """Decode steps of the sequences `ids` (one token each) until one finishes, a request arrives
    (`upcoming`: steps that start before it run) or their new pages no longer fit the `free` ones; at most
    `cap` steps. A step's time is `times[step]` when given (non-empty), else from the coefficients, plus
    `eager_s` when it runs outside the CUDA graphs (`outside_graphs`). `riders`: the cached tokens of
    finished sequences a multi-step run still steps (their attention costed, nothing else kept); `layers`
    and `head` (and `times`) are those of the whole batch.
    Updates the sequences' cached / generated tokens and pages in place, the sequences that finished to the
    start of `finished`; returns (steps, the time they end, pages taken, sequences finished). 0 steps
    (nothing changed) when one of them still has prompt tokens to (re)compute, fewer than two steps are
    left or the first step's pages do not fit (the step-by-step path then runs or preempts)."""
    steps = _steps_left(ids, cached, target, generated, n_out, cap)
    if steps < 2:
        return 0, now, 0, 0
    n = len(ids)
    held = np.empty(n, np.int64)
    for i in range(n):
        held[i] = blocks[ids[i]]
    longest = _longest(ids, cached, riders)
    batch = n + len(riders)
    taken, total, k = 0, 0.0, 0
    end = now
    while k < steps and (k == 0 or end < upcoming):
        add = _pages_added(ids, cached, held, k, block_tokens)
        if taken + add > free:
            break
        taken += add
        if len(times):
            step = times[k]
        else:
            step = _coefficient_step(ids, cached, riders, k, fitted, roofline, layers, head)
            if outside_graphs(longest + k + 1, batch, graph_context, graph_batch):
                step += eager_s
        total += step
        end = now + total
        k += 1
    if k == 0:
        return 0, now, 0, 0
    taken, m = _advance(ids, k, cached, generated, blocks, n_out, block_tokens, finished)
    return k, end, taken, m


@numba.njit(cache=True, inline="always")
def _steps_left(ids: np.ndarray, cached: np.ndarray, target: np.ndarray, generated: np.ndarray, n_out: np.ndarray,
                cap: int) -> int:
    """Decode steps every sequence of `ids` still has to take (at most `cap`); 0 when one of them still has
    prompt tokens to (re)compute."""
    steps = cap
    for i in range(len(ids)):
        if cached[ids[i]] < target[ids[i]]:
            return 0
        steps = min(steps, n_out[ids[i]] - generated[ids[i]])
    return steps


@numba.njit(cache=True, inline="always")
def _longest(ids: np.ndarray, cached: np.ndarray, riders: np.ndarray) -> int:
    """The cached tokens of the longest sequence, the `riders` included."""
    longest = 0
    for i in range(len(ids)):
        longest = max(longest, cached[ids[i]])
    for i in range(len(riders)):
        longest = max(longest, riders[i])
    return longest


@numba.njit(cache=True, inline="always")
def _pages_added(ids: np.ndarray, cached: np.ndarray, held: np.ndarray, k: int, block_tokens: int) -> int:
    """Pages the batch adds to hold decode step `k`'s token (`held`, each sequence's pages, updated)."""
    add = 0
    for i in range(len(ids)):
        pages = -(-(cached[ids[i]] + k + 1) // block_tokens)
        if pages > held[i]:
            add += pages - held[i]
            held[i] = pages
    return add


@numba.njit(cache=True, inline="always")
def _coefficient_step(ids: np.ndarray, cached: np.ndarray, riders: np.ndarray, k: int, fitted: np.ndarray,
                      roofline: np.ndarray, layers: float, head: float) -> float:
    """Decode step `k`'s time from the coefficients: the layers' part and the head (given) plus the attention
    over every sequence's cached tokens, the `riders`' included."""
    n = len(ids)
    flop = moved = past = 0.0
    batch = n + len(riders)
    for i in range(batch):
        p = float((cached[ids[i]] if i < n else riders[i - n]) + k)
        flop += fitted[3] * 1.0 * (2 * p + 1.0) / 2
        moved += fitted[4] * 1.0 + fitted[5] * p
        past += p
    core, remote = _attention(flop, fitted[3] * batch, moved, past, roofline)
    return layers + core + remote + head


@numba.njit(cache=True, inline="always")
def _advance(ids: np.ndarray, k: int, cached: np.ndarray, generated: np.ndarray, blocks: np.ndarray,
             n_out: np.ndarray, block_tokens: int, finished: np.ndarray) -> tuple[int, int]:
    """The sequences `ids` `k` tokens on (cached, generated, pages in place; those done to the start of
    `finished`): (pages taken, sequences finished)."""
    taken, m = 0, 0
    for i in range(len(ids)):
        j = ids[i]
        cached[j] += k
        generated[j] += k
        pages = max(-(-cached[j] // block_tokens), blocks[j])
        taken += pages - blocks[j]
        blocks[j] = pages
        if generated[j] >= n_out[j]:
            finished[m] = j
            m += 1
    return taken, m


@numba.njit(cache=True)
def running_fit(ids: np.ndarray, target: np.ndarray, cached: np.ndarray, n_in: np.ndarray, n_out: np.ndarray,
                blocks: np.ndarray, swapped: np.ndarray, budget: int, block_tokens: int, reserve_whole: bool,
                free: int, scheduled: np.ndarray, want: np.ndarray) -> tuple[int, int, int]:
    """The running sequences `ids` (admission order) that the token `budget` reaches, each its prompt's
    remaining tokens (up to what the budget has left) or a decode token, when the pages they add all fit
    the `free` ones and none is swapped out: written to `scheduled` and their new tokens to `want`, the
    pages added to `blocks`; returns (pages taken, sequences, tokens). (-1, 0, 0) otherwise (`blocks`
    unchanged). `reserve_whole`: a sequence holds pages for its prompt and whole output (no-evict)."""
    n = len(ids)
    need = np.empty(n, np.int64)
    before = taken = m = tokens = 0
    while m < n and before < budget:
        j = ids[m]
        if swapped[j]:
            return -1, 0, 0
        full = max(target[j] - cached[j], 1)
        want[m] = min(full, budget - before)
        held = cached[j] + want[m]
        if reserve_whole:
            held = max(held, n_in[j] + n_out[j])
        need[m] = max(-(-held // block_tokens) - blocks[j], 0)
        taken += need[m]
        tokens += want[m]
        before += full
        m += 1
    if taken > free:
        return -1, 0, 0
    for i in range(m):
        scheduled[i] = ids[i]
        blocks[ids[i]] += need[i]
    return taken, m, tokens


@numba.njit(cache=True)
def scheduled(ids: np.ndarray, new: np.ndarray, cached: np.ndarray, target: np.ndarray, past: np.ndarray) -> int:
    """The cached tokens of the scheduled sequences (into `past`); returns how many of them sample a token
    this iteration (their (re)computed prompt complete)."""
    emitting = 0
    for i in range(len(ids)):
        past[i] = cached[ids[i]]
        if past[i] + new[i] >= target[ids[i]]:
            emitting += 1
    return emitting


@numba.njit(cache=True)
def advance(ids: np.ndarray, new: np.ndarray, cached: np.ndarray, target: np.ndarray, generated: np.ndarray,
            first: np.ndarray, n_out: np.ndarray, now: float, finished: np.ndarray) -> int:
    """The state after an iteration ending at `now`: each sequence's cache grows by its new tokens; those
    whose prompt is then complete sample a token (the first one's time recorded). The sequences that
    finished go to the start of `finished`; returns how many."""
    m = 0
    for i in range(len(ids)):
        j = ids[i]
        emits = cached[j] + new[i] >= target[j]
        cached[j] += new[i]
        if emits:
            generated[j] += 1
            if np.isnan(first[j]):
                first[j] = now
            if generated[j] >= n_out[j]:
                finished[m] = j
                m += 1
    return m


@numba.njit(cache=True)
def release(finished: np.ndarray, blocks: np.ndarray, shared: np.ndarray, finish: np.ndarray, now: float) -> int:
    """Record the sequences' finish at `now` and free their pages, but for those `shared` with the prefix
    cache; returns the pages freed."""
    freed = 0
    for j in finished:
        finish[j] = now
        freed += blocks[j] - shared[j]
        blocks[j] = 0
    return freed


@numba.njit(cache=True)
def drop(buffer: np.ndarray, n: int, gone: np.ndarray) -> int:
    """Remove the sequences `gone` from the first `n` of `buffer`, the others kept in order; returns how
    many are left."""
    kept = 0
    for i in range(n):
        idx = buffer[i]
        keep = True
        for j in gone:
            if j == idx:
                keep = False
                break
        if keep:
            buffer[kept] = idx
            kept += 1
    return kept


@numba.njit(cache=True)
def progress(ids: np.ndarray, initial: np.ndarray, n_out: np.ndarray, target: np.ndarray, cached: np.ndarray,
             generated: np.ndarray) -> int:
    """Tokens computed so far by sequences `ids`, counted against their `initial` work when sent
    (`ReplicaState.initial_work`). What is left of a sequence is its prompt not yet in the cache
    (recomputation included; decode writes past `target`) and its output not yet generated."""
    total = 0
    for i in ids:
        total += initial[i] - max(target[i] - cached[i], 0) - (n_out[i] - generated[i])
    return total
