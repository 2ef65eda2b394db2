"""The kernels a compute calibration measures, and how the cost model prices each of them.

GEMM shapes come from the workload itself (`workload.transformer`, `workload.experts`): the QKV, output
projection, MLP up/down and LM head GEMMs of one layer on one TP rank, and the grouped expert GEMMs of an MoE
layer, for the given model presets, TP degrees and token counts. Attention runs as the standard separate
kernels (scores, softmax, attention over V) and as the fused kernel; memory-bound kernels (copy, layernorm,
softmax, the optimizer step) and an empty launch price the bandwidth and the per-kernel overhead. Every
kernel is priced with `cost.compute` on the ops the workload builds, so a fit reproduces the estimator.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np

from armillary.cost.compute import fused_attention_time, kernel_times, stream_time
from armillary.estimate.memory import OPTIMIZER_STEP_BYTES
from armillary.numerics import Array
from armillary.plan.arrays import ModelArrays
from armillary.plan.codes import PRECISION
from armillary.specs.device import Device, Precision
from armillary.specs.loading import load_model
from armillary.specs.strategy import TrainingPrecision
from armillary.workload.ops import Op, gemm, grouped, stream
from armillary.workload.transformer import layer_forward


class KernelKind(StrEnum):
    GEMM = "gemm"  # one GEMM of the workload (batch > 1: a grouped expert GEMM)
    ATTENTION = "attention"  # standard attention: scores GEMM, softmax, GEMM with V (separate kernels)
    FUSED_ATTENTION = "fused_attention"  # the device's fused kernel (torch SDPA: flash / memory-efficient)
    COPY = "copy"
    LAYERNORM = "layernorm"
    SOFTMAX = "softmax"
    OPTIMIZER = "optimizer"  # one AdamW step over `m` parameters
    LAUNCH = "launch"  # an empty-sized kernel: the per-kernel overhead

    @property
    def streams(self) -> bool:
        return self in _STREAMS


_STREAMS = frozenset({KernelKind.COPY, KernelKind.LAYERNORM, KernelKind.SOFTMAX, KernelKind.OPTIMIZER,
                      KernelKind.LAUNCH})
# the training recipe whose GEMMs run at each precision (cost.compute: fp32 recipes map to TF32, which falls
# back to the fp32 peak where a device lists none)
_RECIPE = {Precision.FP32: TrainingPrecision.FP32, Precision.TF32: TrainingPrecision.FP32,
           Precision.BF16: TrainingPrecision.BF16, Precision.FP16: TrainingPrecision.FP16,
           Precision.FP8: TrainingPrecision.FP8}


@dataclass(frozen=True)
class Kernel:
    """One measured kernel. GEMM: (m x k)(k x n), `batch` problems. Attention: `batch` heads of `m` queries
    and keys (causal) with head dimension `n`. Streams: `m` elements (parameters for the optimizer)."""

    kind: KernelKind
    precision: Precision
    m: int
    n: int = 1
    k: int = 1
    batch: int = 1
    label: str = ""
    held_out: bool = False  # measured, but kept out of the fit (to test the fitted device)

    @property
    def code(self) -> float:
        return PRECISION.code(_RECIPE[self.precision])

    @property
    def flop(self) -> float:
        return float(sum(op.flop for op in self.ops()))

    def ops(self) -> tuple[Op, ...]:
        """The kernel as the workload builds it (`workload.transformer`, `workload.ops`)."""
        e = self.precision.bytes
        if self.kind is KernelKind.GEMM:
            op = gemm(self.m, self.n, self.k, self.batch, e)
            return (grouped(op, self.batch) if self.batch > 1 else op,)
        if self.kind in (KernelKind.ATTENTION, KernelKind.FUSED_ATTENTION):
            fw = layer_forward(_heads(self.batch, self.n), 1, self.m, 1, 0, e)
            if self.kind is KernelKind.FUSED_ATTENTION:
                return (fw.flash_attention,)
            return (*fw.core_gemms, fw.softmax)
        if self.kind is KernelKind.OPTIMIZER:
            return (stream(self.m * OPTIMIZER_STEP_BYTES[int(self.code)]),)
        reads = 2 if self.kind is KernelKind.LAUNCH else 1  # [derived] launch: x + y; others read x, write y
        return (stream((reads + 1) * self.m * e),)

    def predict(self, device: Device) -> float:
        """Seconds the cost model gives this kernel on `device`."""
        ops = self.ops()
        if self.kind is KernelKind.FUSED_ATTENTION:
            return float(fused_attention_time(ops[0], device, self.code))
        if self.kind.streams:  # no FLOPs: the roofline's memory side and the launch (needs no matrix peak)
            return float(stream_time(ops[0].bytes, device) + device.kernel_overhead)
        sixteen_bit = self.kind is KernelKind.ATTENTION  # the attention core stays at 16 bits in fp8 recipes
        return float(np.sum(kernel_times(ops, device, self.code, sixteen_bit)))


def _heads(heads: int, head_dim: int) -> ModelArrays:
    """A model of one attention layer: `heads` heads of `head_dim`, causal over the whole sequence."""
    h = heads * head_dim
    return ModelArrays(layers=1, hidden=h, heads=heads, kv_heads=heads, head_dim=head_dim, ffn=4 * h,
                       mlp_matrices=2, vocab=1, dropout=0.0, rotary=0.0, norm_params=2, linear_bias=0.0,
                       learned_positions=0.0, max_seq_len=1, tied_embeddings=0.0, window=0, window_layers=1.0,
                       value_dim=head_dim)


def workload_gemms(model: str, tp: int, tokens: int, precision: Precision) -> tuple[Kernel, ...]:
    """The GEMMs one layer (and the LM head) of `model` issues on one of `tp` ranks for `tokens` tokens,
    as `workload.transformer.layer_forward` / `ends_forward` and `workload.experts` build them: (M, N, K)
    = (T, qkv/t, h), (T, h, a dv/t), (T, (mlp matrices - 1) f/t, h), (T, h, f/t), (T, V/t, h); routed
    experts (one rank holding them all, load 1): E problems of (T k / E, (matrices - 1) f_e, h) and
    (T k / E, h, f_e)."""
    spec = load_model(model)
    m = ModelArrays.of(spec)
    h, f, gated = int(m.hidden), int(m.ffn), int(m.mlp_matrices) - 1

    def part(name: str, n: Array, k: Array, rows: float = tokens, batch: int = 1) -> Kernel:
        return Kernel(KernelKind.GEMM, precision, int(rows), max(int(float(n)), 1), max(int(float(k)), 1), batch,
                      f"{model} tp{tp} T{tokens} {name}")

    gemms = [part("qkv", m.qkv_width / tp, h), part("proj", h, m.heads * m.value_dim / tp),
             part("head", m.vocab / tp, h)]
    if spec.moe is None or spec.moe.dense_layers > 0:
        gemms += [part("mlp_up", gated * f / tp, h), part("mlp_down", h, f / tp)]
    if spec.moe is not None:
        experts, per_expert = int(m.experts), max(tokens * int(m.top_k) // int(m.experts), 1)
        fe = int(m.expert_ffn)
        gemms += [part("experts_up", gated * fe, h, per_expert, experts),
                  part("experts_down", h, fe, per_expert, experts)]
    return tuple(gemms)


def held_out(kernels: tuple[Kernel, ...]) -> tuple[Kernel, ...]:
    return tuple(replace(k, held_out=True) for k in kernels)


@dataclass(frozen=True)
class Sweep:
    """What a calibration measures: the workload GEMMs of `models` x `tp` x `tokens` per precision (those
    of `held_out_models` kept out of the fit), attention over `seq_lens` x `head_dims`, streams over
    `stream_elements`, the optimizer over `optimizer_params`."""

    precisions: tuple[Precision, ...]
    models: tuple[str, ...]
    tp: tuple[int, ...]
    tokens: tuple[int, ...]
    held_out_models: tuple[str, ...] = ()
    held_out_tokens: tuple[int, ...] = ()
    seq_lens: tuple[int, ...] = (128, 256, 512, 1024)
    head_dims: tuple[int, ...] = (64, 128)
    heads: int = 8
    stream_elements: tuple[int, ...] = (1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24)
    optimizer_params: tuple[int, ...] = (1 << 18, 1 << 20, 1 << 22)
    launches: int = 3
    round_s: float = 0.05  # seconds per timing round (`compute_bench.measure`)

    def kernels(self) -> tuple[Kernel, ...]:
        out: list[Kernel] = []
        for p in self.precisions:
            fitted = {g.label: g for m in self.models for t in self.tp for n in self.tokens
                      for g in workload_gemms(m, t, n, p)}
            out += fitted.values()
            kept = {g.label: g for m in self.held_out_models for t in self.tp
                    for n in self.held_out_tokens or self.tokens for g in workload_gemms(m, t, n, p)}
            out += held_out(tuple(g for g in kept.values() if g.label not in fitted))
            out += [Kernel(kind, p, s, d, 1, self.heads, f"{kind.value} s{s} d{d}")
                    for kind in (KernelKind.ATTENTION, KernelKind.FUSED_ATTENTION)
                    for s in self.seq_lens for d in self.head_dims]
            out += [Kernel(kind, p, n, label=f"{kind.value} {n}") for kind in (
                KernelKind.COPY, KernelKind.LAYERNORM, KernelKind.SOFTMAX) for n in self.stream_elements]
        # the optimizer step and launches run in fp32 whatever the GEMM precision (master weights)
        out += [Kernel(KernelKind.OPTIMIZER, Precision.FP32, n, label=f"adamw {n}") for n in self.optimizer_params]
        out += [Kernel(KernelKind.LAUNCH, Precision.FP32, 1, label=f"launch {i}") for i in range(self.launches)]
        return tuple(out)


def default_sweep(precisions: tuple[Precision, ...], accelerator: bool, quick: bool,
                  models: tuple[str, ...] = (), tp: tuple[int, ...] = ()) -> Sweep:
    """The sweep `calibrate-compute` runs: a CPU's under 5 minutes, `quick` in seconds (tests)."""
    if quick:
        return Sweep(precisions, models or ("mpt-125m",), tp or (1,), (32, 64), ("mpt-350m",), (48,),
                     seq_lens=(128, 256), head_dims=(64,), heads=4, stream_elements=(1 << 14, 1 << 18, 1 << 20),
                     optimizer_params=(1 << 16, 1 << 18), launches=2, round_s=0.01)
    if accelerator:
        return Sweep(precisions, models or ("mpt-125m", "mpt-1b", "llama3-8b", "mixtral-8x7b"), tp or (1, 2, 4, 8),
                     (1024, 4096, 16384), ("mpt-760m", "llama2-13b"), (2048, 8192),
                     seq_lens=(512, 1024, 2048, 4096, 8192), head_dims=(64, 128), heads=32,
                     stream_elements=(1 << 20, 1 << 22, 1 << 24, 1 << 26, 1 << 28), optimizer_params=(1 << 22, 1 << 26))
    # a CPU's streams stop at 4M elements (16 MiB in fp32), the size of the swept workload's activations:
    # beyond glibc's largest mmap threshold (32 MiB) every output is freshly mapped and page-faulted
    return Sweep(precisions, models or ("mpt-125m", "mpt-350m"), tp or (1, 2), (128, 512), ("mpt-760m",), (256,),
                 stream_elements=(1 << 16, 1 << 18, 1 << 20, 1 << 22))
