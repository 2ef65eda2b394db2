"""The phases of inference on one replica, costed with its `ReplicaModel` (`estimate.inference`): the prompt
pass of a static batch (`prefill_pass`), its decode steps summed (`decode_phase`) or step by step
(`decode_steps`, for the pipeline simulation), and the KV cache handed from a prefill replica to a decode
replica in disaggregated serving (`kv_handover_time`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from armillary.comm.collectives import send_recv
from armillary.estimate.inference import ReplicaModel
from armillary.estimate.inference_result import PassTime
from armillary.numerics import Array
from armillary.plan.placement import pair_across
from armillary.specs.workload import Inference


def kv_handover_time(r: ReplicaModel, tokens: Array) -> Array:
    """Disaggregated serving: moving the cache of `tokens` prompt tokens from a prefill replica to a decode
    replica, each device sending its shard point to point over the outermost network dimension (DistServe,
    Zhong et al. 2024 §4.3; Splitwise, Patel et al. 2024 §4.2). Broadcasts over `tokens`."""
    dims = len(r.system.network)
    return send_recv(tokens * r.cache_bytes_per_token, pair_across(dims - 1, dims), r.system).time


def prefill_pass(r: ReplicaModel, w: Inference, batch: Array | None = None) -> PassTime:
    """The prompt pass of a static batch: all batch x input_len tokens through the model (the time to
    first token). `batch` (default the workload's) may be an array: one pass per element."""
    b = w.batch if batch is None else batch
    p = r.pass_time(r.tokens_time(b * w.input_len / r.cp), b, r.attention(w.input_len, 0.0, b, decode=False), 0.0)
    return replace(p, cp=r.ring_kv_time(b, w.input_len, p.attention))


def decode_phase(r: ReplicaModel, w: Inference, batch: Array) -> PassTime:
    """All output_len - 1 decode steps of a static batch of `batch` sequences (an array: one phase per
    element), each a pass of ceil(batch / pp) sequences whose attention reads input_len + k - 1 cached
    tokens at step k (see `decode_steps`)."""
    micro = np.ceil(np.asarray(batch, dtype=float) / float(r.st.pp))
    steps = w.output_len - 1
    past = w.input_len + np.arange(steps, dtype=float)
    core, remote = _decode_attention(r, past, micro)
    t = r.tokens_time(micro)
    return PassTime(layers=steps * t.layers, attention=core, tp=steps * t.tp, ep=steps * t.ep, pp=steps * t.pp,
                    ends=steps * (t.ends + r.head_time(micro)), tier2=remote, cp=steps * r.merge_time(micro))


def _decode_attention(r: ReplicaModel, past: np.ndarray, micro: np.ndarray) -> tuple[Array, Array]:
    """(attention kernels, second-tier reads) summed over the decode steps (`past` cached tokens each) for
    each micro-batch size. A step's time is convex in the micro-batch (the roofline's max of two terms
    affine in the sequences), so when it is collinear at the smallest, next and largest size it is affine
    on all of them: the sum is then read off those three columns (exact) instead of a steps x sizes grid."""
    def summed(mu: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        col = past.reshape(-1, *([1] * mu.ndim))
        core, remote = r.attention_time(r.attention(1.0, col, mu), mu * col)
        shape = col.shape[:1] + mu.shape
        return np.broadcast_to(core, shape), np.broadcast_to(remote, shape)

    low, high = (float(micro.min()), float(micro.max())) if micro.size else (1.0, 1.0)
    if micro.size < 4 or high - low < 2:
        core, remote = summed(micro)
        return np.sum(core, axis=0), np.sum(remote, axis=0)
    probe = np.array([low, low + 1, high])
    core, remote = summed(probe)
    affine = True
    for grid in (core, remote):
        slope = grid[:, 1] - grid[:, 0]
        affine = affine and bool(np.allclose(grid[:, 2], grid[:, 0] + slope * (high - low), rtol=1e-9, atol=0))
    if not affine:
        core, remote = summed(micro)
        return np.sum(core, axis=0), np.sum(remote, axis=0)
    totals = [(g[:, 0].sum(), (g[:, 1] - g[:, 0]).sum()) for g in (core, remote)]
    return tuple(base + slope * (micro - low) for base, slope in totals)  # type: ignore[return-value]


@dataclass(frozen=True)
class DecodeSteps:
    """The output_len - 1 decode steps of a static batch, each one pass of a micro-batch of ceil(batch / pp)
    sequences (pp micro-batches in flight keep every stage busy)."""

    micro: int  # sequences per micro-batch
    tokens: PassTime  # what depends only on the micro-batch's new tokens (every step alike)
    attention: np.ndarray  # per step: attention kernels over input_len + k - 1 cached tokens
    tier2: np.ndarray  # per step: KV-cache reads from the second memory tier
    head: Array  # LM head and sampling of the micro-batch, per step


def decode_steps(r: ReplicaModel, w: Inference) -> DecodeSteps:
    micro = math.ceil(w.batch / float(r.st.pp))
    past = w.input_len + np.arange(w.output_len - 1, dtype=float)  # cached tokens before each decode step
    core, remote = r.attention_time(r.attention(1.0, past, micro), micro * past)
    tokens = replace(r.tokens_time(float(micro)), cp=r.merge_time(float(micro)))
    return DecodeSteps(micro, tokens, np.broadcast_to(core, past.shape),
                       np.broadcast_to(remote, past.shape), r.head_time(float(micro)))
