"""Compiled inner loops of the serving simulation: one iteration's time and a stretch of decode steps.

They evaluate no cost formula of their own: `simulate.IterationCost` reads the coefficients off the
analytical model once per replica (`ReplicaModel.attention` for the attention op's FLOPs and bytes,
`ReplicaModel.attention_time` for its kernel time, both checked against the model at far-apart points)
and tabulates the token- and sequence-dependent parts; these loops only combine them per sequence.

`fitted`: (FLOPs, bytes per new token, bytes per cached token) of a prefill step, then of a decode step
(one sequence of q new tokens over p cached: c_f q (2p + q) / 2 FLOPs, b_new q + b_past p bytes).
`roofline`: (s_flop, s_bytes, s_cached, fixed, s_tier2) of the attention of all layers: kernels
max(s_flop F, s_bytes B - s_cached P) + fixed and second-tier reads s_tier2 P for an iteration of F FLOPs,
B bytes over P cached tokens.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _attention(flop: float, moved: float, cached: float, roofline: np.ndarray) -> tuple[float, float]:
    core = max(roofline[0] * flop, roofline[1] * moved - roofline[2] * cached) + roofline[3]
    return core, roofline[4] * cached


@numba.njit(cache=True)
def iteration_time(new: np.ndarray, past: np.ndarray, fitted: np.ndarray, roofline: np.ndarray, layers: float,
                   head: float) -> float:
    """One iteration over sequences of `new` tokens each over `past` cached ones: the layers' part and
    the head (tabulated, given) plus the attention of the summed op."""
    flop = moved = cached = 0.0
    for i in range(len(new)):
        q, p = float(new[i]), float(past[i])
        o = 3 if q <= 1 else 0  # decode steps (MLA's absorbed form)
        flop += fitted[o] * q * (2 * p + q) / 2
        moved += fitted[o + 1] * q + fitted[o + 2] * p
        cached += p
    core, remote = _attention(flop, moved, cached, roofline)
    return layers + core + remote + head


@numba.njit(cache=True)
def decode_stretch(ids: np.ndarray, cached: np.ndarray, generated: np.ndarray, blocks: np.ndarray,
                   n_out: np.ndarray, free: int, block_tokens: int, now: float, upcoming: float, cap: int,
                   fitted: np.ndarray, roofline: np.ndarray, layers: float, head: float,
                   times: np.ndarray) -> tuple[int, float, int]:
    """Decode steps of the sequences `ids` (one token each) until one finishes, a request arrives
    (`upcoming`: steps that start before it run) or their new pages no longer fit the `free` ones; at most
    `cap` steps. A step's time is `times[step]` when given (non-empty), else from the coefficients.
    Updates the sequences' cached / generated tokens and pages in place; returns (steps, the time they
    end, pages taken). 0 steps (nothing changed) when fewer than two steps are left or the first step's
    pages do not fit (the step-by-step path then runs or preempts)."""
    n = len(ids)
    steps = cap
    for i in range(n):
        steps = min(steps, n_out[ids[i]] - generated[ids[i]])
    if steps < 2:
        return 0, now, 0
    held = np.empty(n, np.int64)
    for i in range(n):
        held[i] = blocks[ids[i]]
    taken, total, k = 0, 0.0, 0
    end = now
    while k < steps and (k == 0 or end < upcoming):
        add = 0
        for i in range(n):  # pages the batch adds to hold step k's token
            pages = -(-(cached[ids[i]] + k + 1) // block_tokens)
            if pages > held[i]:
                add += pages - held[i]
                held[i] = pages
        if taken + add > free:
            break
        taken += add
        if len(times):
            step = times[k]
        else:
            flop = moved = past = 0.0
            for i in range(n):
                p = float(cached[ids[i]] + k)
                flop += fitted[3] * 1.0 * (2 * p + 1.0) / 2
                moved += fitted[4] * 1.0 + fitted[5] * p
                past += p
            core, remote = _attention(flop, moved, past, roofline)
            step = layers + core + remote + head
        total += step
        end = now + total
        k += 1
    if k == 0:
        return 0, now, 0
    taken = 0
    for i in range(n):
        j = ids[i]
        cached[j] += k
        generated[j] += k
        pages = max(-(-cached[j] // block_tokens), blocks[j])
        taken += pages - blocks[j]
        blocks[j] = pages
    return k, end, taken


@numba.njit(cache=True)
def running_fit(ids: np.ndarray, target: np.ndarray, cached: np.ndarray, n_in: np.ndarray, n_out: np.ndarray,
                blocks: np.ndarray, swapped: np.ndarray, budget: int, block_tokens: int, reserve_whole: bool,
                free: int) -> tuple[int, np.ndarray]:
    """The running sequences `ids` (admission order) that the token `budget` reaches, each its prompt's
    remaining tokens (up to what the budget has left) or a decode token, when the pages they add all fit
    the `free` ones and none is swapped out: (pages taken, new tokens of each), the pages added to `blocks`
    in place. (-1, none) otherwise (nothing changed). `reserve_whole`: a sequence holds pages for its
    prompt and whole output (guaranteed-no-evict)."""
    n = len(ids)
    want, need = np.empty(n, np.int64), np.empty(n, np.int64)
    before = taken = m = 0
    while m < n and before < budget:
        j = ids[m]
        if swapped[j]:
            return -1, want[:0]
        full = max(target[j] - cached[j], 1)
        want[m] = min(full, budget - before)
        tokens = cached[j] + want[m]
        if reserve_whole:
            tokens = max(tokens, n_in[j] + n_out[j])
        need[m] = max(-(-tokens // block_tokens) - blocks[j], 0)
        taken += need[m]
        before += full
        m += 1
    if taken > free:
        return -1, want[:0]
    for i in range(m):
        blocks[ids[i]] += need[i]
    return taken, want[:m]
