"""Kernels as the cost model sees them: FLOPs and HBM bytes per device (docs/formulas.md §12)."""

from __future__ import annotations

from dataclasses import dataclass

from armillary.memo import quick_init
from armillary.numerics import Array, ratio_or_zero


@quick_init  # 20 Ops an estimate: a quicker frozen construction (memo.quick_init)
@dataclass(frozen=True)
class Op:
    """One kernel (or one group of identical kernels): FLOPs and HBM bytes, per device. `group` > 1 marks a
    grouped GEMM of that many independent problems (MoE experts), whose efficiency follows the size of
    one problem; batched attention GEMMs are one problem, as the efficiency curves were calibrated.
    `kernels` and `depth` (the summed reduction length K of its GEMMs) give the latency floor of small-M
    GEMMs where a device lists one (`Device.fp8_gemm_latency`); 0 depth: no floor. For a fused attention
    kernel `depth` is the keys each query walks in one call, over which a query block's fixed work
    amortizes (`cost.compute.fused_attention_time`), and `head_dim` its MMA work per score element in
    head-dimension units ((d_qk + d_v) / 2; 0: unknown), by which the kernel's rate varies
    (`cost.compute.head_dim_factor`)."""

    flop: Array
    bytes: Array
    group: Array = 1.0
    kernels: Array = 1.0
    depth: Array = 0.0
    head_dim: Array = 0.0

    @property
    def flop_per_key(self) -> Array:
        """A fused attention op's FLOPs per key each query walks (`depth`); 0 without a depth."""
        return ratio_or_zero(self.flop, self.depth)


def gemm(M: Array, N: Array, K: Array, batch: Array, element_bytes: Array, input_bytes: Array | None = None,
         weight_bytes: Array | None = None) -> Op:
    """Batched GEMM (M x K)(K x N): 2MKN FLOPs per batch entry; reads both operands, writes the result.
    The input (M x K) and weight (K x N) may be narrower than the result (ternary / int8 kernels)."""
    e_in = element_bytes if input_bytes is None else input_bytes
    e_w = element_bytes if weight_bytes is None else weight_bytes
    # positional (flop, bytes, group 1, kernels 1, depth K): a keyword call costs more on the scalar path; one
    # batch entry's bytes as they are (x 1 is exact: a sweep's whole-array multiply saved)
    moved = M * K * e_in + K * N * e_w + M * N * element_bytes
    one = (type(batch) is int or type(batch) is float) and batch == 1
    return Op(2 * batch * M * N * K, moved if one else batch * moved, 1.0, 1.0, K)


def grouped(op: Op, problems: Array) -> Op:
    return Op(op.flop, op.bytes, problems, op.kernels, op.depth, op.head_dim)  # one launch walks one problem's K


def stream(bytes_moved: Array) -> Op:
    """A memory-bound element-wise kernel: no matrix FLOPs, only traffic."""
    return Op(0.0 * bytes_moved, bytes_moved)  # (flop, bytes)
