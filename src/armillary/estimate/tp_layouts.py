"""Tensor-parallel layouts beyond Megatron's 1-D split: 2-D SUMMA on a q x q grid (docs/tp-layouts.md).

Under `Strategy.tp_layout` '2d' the tp = q^2 ranks form a grid whose rows are consecutive ranks (rank
r sits at row r // q, column r mod q: Colossal-AI's PARALLEL_2D_ROW / _COL groups). Every linear layer's GEMM
C[m x n] = A[m x k] B[k x n] (A the m tokens' activations, B the weight) keeps A, B and C split in q x q
blocks and runs as SUMMA (van de Geijn & Watts 1997; Optimus, Xu et al. arXiv 2104.05343 §3): in each of
`steps` steps a panel of A (m/q x k/steps) is broadcast along the grid's rows and a panel of B (k/steps x
n/q) along its columns, and every rank multiplies the two, 2mnk / (q^2 steps) FLOPs. Per rank and product the
transfers sum to (mk + kn) / q elements. The backward runs two more SUMMA products (Optimus §3.2; Colossal-AI
Matmul_AB_2D.backward): dA = dC B^T broadcasts B panels along the columns and reduces dA panels along the
rows (Matmul_ABT_2D), dB = A^T dC broadcasts A panels along the rows and reduces dB panels along the columns
(Matmul_ATB_2D): the same elements on the same grid dimensions. Colossal-AI double-buffers the transfers
(a 2-slot circular buffer: step t + 1's broadcasts are issued before step t's GEMM), so each step's transfer
hides behind the previous step's GEMM and one step's stays exposed (the first broadcast, or ABT's last
reduce). Layer norms add two all-reduces of the row statistics per norm and pass along the grid's rows
(Colossal-AI LayerNorm2D / _Layernorm_2D.backward), which nothing hides.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from armillary.comm.collectives import CommCost, all_reduce, collective, needed
from armillary.cost.compute import kernel_times
from armillary.estimate.kernels import LayerKernels
from armillary.estimate.result import DIM_SP, DIM_TP, CommCall
from armillary.numerics import Array, any_true, maximum, where
from armillary.plan.arrays import StrategyArrays
from armillary.plan.placement import Placement, place
from armillary.plan.rules import grid_side
from armillary.specs.communication import ALL_REDUCE, BROADCAST, REDUCE, Collective
from armillary.specs.device import Device
from armillary.specs.system import System
from armillary.workload.ops import Op
from armillary.workload.transformer import LayerForward

# fp32 row statistics of LayerNorm2D (custom_fwd(cast_inputs=torch.float32)): 4 bytes per token and statistic
NORM_STAT_BYTES = 4.0
# all-reduces per norm and pass: E[x] and Var[x] forward, sum(dy) and sum(dy x) backward (Colossal-AI
# parallel_2d LayerNorm2D.forward, _Layernorm_2D.backward)
NORM_ALL_REDUCES = 2
# 16-bit panels: Colossal-AI's Matmul_AB_2D multiplies fp16 blocks (custom_fwd(cast_inputs=torch.float16))
PANEL_BYTES = 2.0



def two_d(st: StrategyArrays) -> Array:
    """1 where the strategy uses the 2-D layout."""
    return st.tp_layout > 0


def grid(tp: Array, sizes: tuple[int, ...]) -> tuple[Placement, Placement]:
    """(row, column) groups of the q x q grid of a tp group that starts a block of consecutive ranks (Megatron's
    rank order puts TP innermost, `plan.placement`): a row is q consecutive ranks, a column q ranks q apart,
    so a column reaches the next network tier first."""
    q = grid_side(tp)
    return place(q, 1.0, sizes), place(q, q, sizes)


@dataclass(frozen=True)
class GemmShape:
    """One linear layer's GEMM over the whole tp group: m tokens, depth k, width n (not split)."""

    m: Array
    k: Array
    n: Array

    def summa_elements(self, q: Array) -> Array:
        """Elements each rank receives (or reduces) in one SUMMA product: q panels of (mk + kn) / q^2, i.e.
        (mk + kn) / q (Colossal-AI 2D_tensor_parallel.md; research note §3.2)."""
        return (self.m * self.k + self.k * self.n) / q


def layer_gemm_shapes(fw: LayerForward, tp: Array) -> tuple[GemmShape, GemmShape, GemmShape, GemmShape]:
    """The whole-group shapes of the QKV, output projection, MLP-in and MLP-out GEMMs, recovered from their
    per-rank ops of `workload.transformer.layer_forward` (gemm(M, N, K): 2MNK FLOPs, depth K): QKV and MLP-in
    are column-parallel there (depth k, width n / tp), the output projection and MLP-out row-parallel (depth
    k / tp, width n = h). Tokens m = (m h) / h with m h from the output projection and h the QKV's depth."""
    m = tokens_hidden(fw) / maximum(fw.qkv.depth, 1e-30)

    def column(op: Op) -> GemmShape:
        return GemmShape(m, op.depth, op.flop * tp / (2 * maximum(m * op.depth, 1e-30)))

    def row(op: Op) -> GemmShape:
        return GemmShape(m, op.depth * tp, op.flop / (2 * maximum(m * op.depth, 1e-30)))

    return column(fw.qkv), row(fw.out_proj), column(fw.mlp_in), row(fw.mlp_out)


def summa_exposed(step_comm: Array, gemm: Array, steps: Array, overlap: Array) -> Array:
    """Seconds a SUMMA product of `steps` steps adds beyond its GEMM time `gemm`, each step's transfer taking
    `step_comm`. Double-buffered (overlap 1): the first transfer alone, then each of the other steps' transfer
    beside the previous step's GEMM g = gemm / steps, then the last GEMM: c + (steps - 1) max(g, c) + g, so the
    exposed time is c + (steps - 1) max(0, c - g) (Colossal-AI Matmul_AB_2D; Calculon's LinearOverlapped
    'pipe' has the same form). Blocking (overlap 0): every transfer, steps x c."""
    g = gemm / steps
    return where(overlap > 0, step_comm + (steps - 1) * maximum(0.0, step_comm - g), steps * step_comm)


@dataclass(frozen=True)
class SummaLayer:
    """One layer's 2-D TP communication, one micro-batch: exposed and link (before overlap) seconds of the
    forward and the backward, and the calls of one forward and one backward."""

    forward_s: Array
    backward_s: Array
    link_forward_s: Array
    link_backward_s: Array
    forward_calls: tuple[CommCall, ...]
    backward_calls: tuple[CommCall, ...]

    @property
    def hidden_share(self) -> Array:
        """The share of the layer's TP link time that compute hides (forward and backward)."""
        link = self.link_forward_s + self.link_backward_s
        return 1.0 - (self.forward_s + self.backward_s) / maximum(link, 1e-30)


def _together(row: CommCost, column: CommCost, row_group: Placement, column_group: Placement) -> Array:
    """Seconds of a step's row and column transfers issued together: they share the device's link where
    both groups' outermost tier is the same (their times add), else each runs on its own tier (the slower)."""
    shared = row_group.outermost == column_group.outermost
    return where(shared, row.time + column.time, maximum(row.time, column.time))


def tokens_hidden(fw: LayerForward) -> Array:
    """m h, the tokens times the hidden size of one layer's GEMMs, from the output projection's op (2 m h k'
    FLOPs at depth k')."""
    return fw.out_proj.flop / (2 * maximum(fw.out_proj.depth, 1e-30))


def summa_layer(fw: LayerForward, kt: LayerKernels, st: StrategyArrays, system: System,
                tp_bytes: Array) -> SummaLayer:
    """The 2-D layout's communication of one layer and micro-batch: three SUMMA products per linear layer
    (forward AB, input gradient ABT, weight gradient ATB), each transfer costed on the grid's row or column
    group by the network model (a pipelined broadcast or reduce of one panel), overlapped step by step with
    the product's GEMM (`summa_exposed`); the norms' row all-reduces exposed. `tp_bytes`: the 1-D layout's
    message, m h elements at the activation precision, which fixes the bytes per transferred element."""
    used = two_d(st)
    element_bytes = tp_bytes / maximum(tokens_hidden(fw), 1e-30)
    q = where(used, grid_side(st.tp), 2.0)
    steps = where(st.summa_steps > 0, st.summa_steps, q)
    row_group, column_group = grid(where(used, st.tp, 4.0), system.sizes)
    overlap = st.overlap_tp
    gemm_times = (kt.qkv, kt.out_proj, kt.mlp_in, kt.mlp_out)
    forward_s: Array = 0.0
    backward_s: Array = 0.0
    link_f: Array = 0.0
    link_b: Array = 0.0
    f_calls: list[CommCall] = []
    b_calls: list[CommCall] = []

    def moved(op: Collective, n_bytes: Array, group: Placement) -> CommCost:
        return needed(lambda: collective(op, n_bytes, group, system).cost, used)

    for shape, gemm in zip(layer_gemm_shapes(fw, st.tp), gemm_times, strict=True):
        row_bytes = element_bytes * shape.m * shape.k / (q * steps)  # an A (or dA) panel
        column_bytes = element_bytes * shape.k * shape.n / (q * steps)  # a B (or dB) panel
        a_cast, b_cast = moved(BROADCAST, row_bytes, row_group), moved(BROADCAST, column_bytes,
                                                                                column_group)
        a_reduce, b_reduce = moved(REDUCE, row_bytes, row_group), moved(REDUCE, column_bytes,
                                                                                 column_group)
        products = ((a_cast, b_cast, True), (a_reduce, b_cast, False), (a_cast, b_reduce, False))  # AB, ABT, ATB
        for row, column, forward in products:
            step = _together(row, column, row_group, column_group)
            exposed, link = summa_exposed(step, gemm, steps, overlap), steps * step
            calls = (CommCall.of(DIM_TP, BROADCAST if row is a_cast else REDUCE,
                                 steps * used, row_bytes, row),
                     CommCall.of(DIM_TP, BROADCAST if column is b_cast else REDUCE,
                                 steps * used, column_bytes, column))
            if forward:
                forward_s, link_f = forward_s + exposed, link_f + link
                f_calls += calls
            else:
                backward_s, link_b = backward_s + exposed, link_b + link
                b_calls += calls
    shape = layer_gemm_shapes(fw, st.tp)[0]
    stat_bytes = NORM_STAT_BYTES * shape.m / q
    stats = needed(lambda: all_reduce(stat_bytes, row_group, system), used)
    norms = 2 * NORM_ALL_REDUCES * stats.time  # two norms per layer
    norm_call = CommCall.of(DIM_TP, ALL_REDUCE, 2 * NORM_ALL_REDUCES * used, stat_bytes,
                            stats)
    return SummaLayer(forward_s + norms, backward_s + norms, link_f + norms, link_b + norms,
                      (*f_calls, norm_call), (*b_calls, norm_call))


def summa_step_ops(fw: LayerForward, st: StrategyArrays) -> tuple[Op, Op, Op, Op]:
    """One SUMMA step's local GEMM of each linear layer on one rank: (m/q x k/steps)(k/steps x n/q), 2mnk /
    (q^2 steps) FLOPs; it reads both panels and reads and writes its q-th of C (Colossal-AI's torch.addmm
    accumulates into C)."""
    q = grid_side(st.tp)
    steps = where(st.summa_steps > 0, st.summa_steps, q)

    def step(g: GemmShape) -> Op:
        m, k, n = g.m / q, g.k / steps, g.n / q
        return Op(2 * m * n * k, PANEL_BYTES * (m * k + k * n + 2 * m * n), depth=k)

    qkv, out_proj, mlp_in, mlp_out = layer_gemm_shapes(fw, st.tp)
    return step(qkv), step(out_proj), step(mlp_in), step(mlp_out)


def two_d_kernels(kt: LayerKernels, fw: LayerForward, st: StrategyArrays, device: Device) -> LayerKernels:
    """The layer's kernels under the 2-D layout. Each linear layer's GEMM runs as `steps` smaller GEMMs (one
    per SUMMA step): its time is the 1-D kernel's scaled by steps x t(one step) / t(whole GEMM), both through
    the device's roofline, so a shallower step pays its lower efficiency and its own launch. The GEMMs' per-rank
    FLOPs are the 1-D layout's (2mnk / q^2). The norms and residual adds see 1/tp of the activations (the grid
    splits them q x q, Optimus §3.1: activation memory and element-wise work O(1/q^2)) instead of all of them
    on every 1-D rank; these streams are memory-bound, so their time scales with their bytes [derived]."""
    used = two_d(st)
    if not any_true(used):
        return kt
    q = grid_side(st.tp)
    steps = where(st.summa_steps > 0, st.summa_steps, q)
    whole = kernel_times(fw.dense_gemms, device, st.precision, sixteen_bit=True)
    stepped = kernel_times(summa_step_ops(fw, st), device, st.precision, sixteen_bit=True)
    qkv, out_proj, mlp_in, mlp_out = (
        t * where(used, steps * part / np.maximum(full, 1e-30), 1.0)
        for t, part, full in zip((kt.qkv, kt.out_proj, kt.mlp_in, kt.mlp_out), stepped, whole, strict=True))
    share = where(used, 1.0 / st.tp, 1.0)
    return replace(kt, qkv=qkv, out_proj=out_proj, mlp_in=mlp_in, mlp_out=mlp_out, norms=kt.norms * share,
                   residuals=kt.residuals * share)


def tp_hidden_share(tp_exposed: Array, calls: tuple[CommCall, ...]) -> Array:
    """The share of a step's tensor-parallel communication (the TP and SP calls' link time, before overlap)
    that compute hides: 1 - exposed / link, with `tp_exposed` the step's `TimeBreakdown.tp_exposed`. The
    exposed time is the critical stage's and the calls the busiest stage's: with even stages both are a
    middle stage's plus the embedding's or LM head's all-reduces."""
    link = sum((c.time_s for c in calls if c.dimension in (DIM_TP, DIM_SP)),
               start=np.float64(0.0))
    return 1.0 - tp_exposed / maximum(link, 1e-30)
