"""The work of one HLO instruction: matrix FLOPs and bytes moved through memory, or the collective it runs.

FLOPs count the dots and convolutions only (2 per multiply-add, as the estimator's GEMMs: docs/formulas.md
§12); element-wise arithmetic is memory-bound and costed by its bytes. Bytes are the operands read and the
result written, except for in-place and sliced accesses: a dynamic-update-slice writes only its update
(XLA updates the buffer in place), a (dynamic-)slice reads only what it returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from armillary.estimate.layer import FLASH_BACKWARD_FACTOR
from armillary.ingest.hlo_attrs import (
    ConvolutionDims,
    WindowDim,
    called,
    convolution_dims,
    custom_call_target,
    dimension_numbers,
    fmha_scores,
    gemm_dimension_numbers,
)
from armillary.ingest.hlo_parse import Computation, HloModule, Instruction
from armillary.ingest.hlo_shapes import Shape
from armillary.specs.communication import Collective
from armillary.workload.attention import keys_attended


class OpKind(StrEnum):
    """The kinds of a per-op breakdown (as a profiler groups kernels)."""

    DOT = "dot"  # dots, and fusions and library calls around one (GEMM kernels)
    ATTENTION = "attention"  # fused attention library calls (cuDNN flash attention, forward or backward)
    CONVOLUTION = "convolution"
    FUSION = "fusion"  # fused element-wise / reduction kernels
    ELEMENTWISE = "elementwise"  # unfused element-wise, reductions, copies, data movement
    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    COLLECTIVE_PERMUTE = "collective-permute"
    BROADCAST = "collective-broadcast"

    @property
    def communicates(self) -> bool:
        return self not in (OpKind.DOT, OpKind.ATTENTION, OpKind.CONVOLUTION, OpKind.FUSION, OpKind.ELEMENTWISE)


# opcode (sync, or the -start of an async pair) -> collective and its breakdown kind
COLLECTIVES = {
    "all-reduce": (Collective.ALL_REDUCE, OpKind.ALL_REDUCE),
    "all-gather": (Collective.ALL_GATHER, OpKind.ALL_GATHER),
    "reduce-scatter": (Collective.REDUCE_SCATTER, OpKind.REDUCE_SCATTER),
    "all-to-all": (Collective.ALL_TO_ALL, OpKind.ALL_TO_ALL),
    "collective-permute": (Collective.SEND_RECV, OpKind.COLLECTIVE_PERMUTE),
    "collective-broadcast": (Collective.BROADCAST, OpKind.BROADCAST),
}
# instructions that are no kernel: names, views, control and the -done half of async pairs
FREE = frozenset({
    "parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "partition-id", "replica-id",
    "opt-barrier", "add-dependency", "domain", "all-reduce-done", "all-gather-done", "collective-permute-done",
    "reduce-scatter-done", "all-to-all-done", "ragged-all-to-all-done", "collective-broadcast-done",
    "async-done", "async-update", "copy-done", "send-done", "recv-done", "get-dimension-size", "set-dimension-size",
})
CONTROL = frozenset({"while", "call", "conditional"})
_SLICES = frozenset({"dynamic-slice", "slice", "gather"})
_VIEWS = frozenset({"convert", "bitcast", "copy"})
_PARTIAL = _SLICES | {"dynamic-update-slice"}
_MATRIX = frozenset({"dot", "convolution", "custom-call", "fusion", "call"})


@dataclass(frozen=True, slots=True)
class Work:
    kind: OpKind
    flop: float
    bytes: float
    precision_dtype: str  # element type of the GEMM's inputs ("" when no GEMM)
    depth: float = 0.0  # fused attention: the keys each query walks (`workload.ops.Op.depth`)


def collective_of(inst: Instruction, module: HloModule) -> tuple[Collective, OpKind, Instruction] | None:
    """The collective an instruction starts (sync op, `-start`, or `async-start` wrapping one), with the
    instruction that describes it."""
    op = inst.opcode.removesuffix("-start")
    if op in COLLECTIVES:
        return (*COLLECTIVES[op], inst)
    if inst.opcode == "async-start":
        for name in called(inst):
            root = module.computations[name].root if name in module.computations else None
            if root is not None and root.opcode in COLLECTIVES:
                return (*COLLECTIVES[root.opcode], root)
    return None


def is_synchronous(inst: Instruction) -> bool:
    """Whether a collective runs in line with the kernels: a sync op, or a `-start` XLA's GPU backend marked
    `"is_sync":true` in its collective backend config (issued on the compute stream, no overlap: XLA's
    CollectiveBackendConfig)."""
    return not inst.opcode.endswith("-start") or '"is_sync":true' in inst.attributes


def message_bytes(op: Collective, inst: Instruction, operand_bytes: float) -> float:
    """Message size in the nccl-tests convention: the reduced buffer (all-reduce), the gathered result
    (all-gather), the input before scattering (reduce-scatter), the buffer each rank sends (all-to-all,
    permute). An async start's tuple result holds (inputs, outputs[, contexts]): its outputs count, every array
    of a combined collective's tuple; an all-reduce-start's result is its outputs alone."""
    shape = inst.shape
    paired = inst.opcode.endswith("-start") and inst.opcode != "all-reduce-start"
    result = shape.element(1).bytes if paired and shape.is_tuple and len(shape.elements_leaves) > 1 else shape.bytes
    return operand_bytes if op is Collective.REDUCE_SCATTER else float(result)


def instruction_work(inst: Instruction, comp: Computation, module: HloModule) -> Work:
    """FLOPs and bytes of a kernel (fusion, dot, convolution, library call or unfused op)."""
    operands = [comp.by_name[o].shape for o in inst.operands if o in comp.by_name]
    if inst.opcode == "fusion":
        fused = module.computations.get(next(iter(called(inst)), ""))
        if fused is not None:
            flop, dtype, conv = _fused_flop(module, fused.name)
            moved = _fused_bytes(module, fused.name, tuple(s.bytes for s in operands), inst.shape.bytes)
            kind = OpKind.CONVOLUTION if conv else OpKind.DOT if flop > 0 else OpKind.FUSION
            return Work(kind, flop, moved, dtype)
    if inst.opcode == "custom-call" and custom_call_target(inst).startswith("__cudnn$fmha"):
        attention = _attention_work(inst, operands)
        if attention is not None:
            return attention
    flop, dtype, conv = _own_flop(inst, comp)
    if inst.opcode == "dynamic-update-slice" and len(operands) > 1:
        moved = 2.0 * operands[1].bytes
    elif inst.opcode in _SLICES:
        moved = 2.0 * inst.shape.bytes
    elif inst.opcode == "custom-call" and flop > 0 and inst.shape.is_tuple:
        # a library GEMM's result is (output, workspace): the workspace is scratch, only the output is written
        moved = float(sum(s.bytes for s in operands) + inst.shape.leaves[0].bytes)
    else:
        moved = float(sum(s.bytes for s in operands) + inst.shape.bytes)
    kind = OpKind.CONVOLUTION if conv else OpKind.DOT if flop > 0 else OpKind.ELEMENTWISE
    return Work(kind, flop, moved, dtype)


def _attention_work(inst: Instruction, operands: list[Shape]) -> Work | None:
    """A cuDNN fused-attention call (operands Q, K, V first): 2 (d_qk + d_v) FLOPs per head, query and key
    attended, the causal mask halving the keys (`workload.attention.fused_attention_op`'s count); the
    backward FLASH_BACKWARD_FACTOR times that. Bytes: its operands and results, the byte workspace not."""
    dims, causal = fmha_scores(inst)
    if len(dims) != 4 or len(operands) < 3 or math.prod(dims) == 0:
        return None
    b, h, queries, keys = dims
    q, k, v = (s.leaves[0] for s in operands[:3])
    d_qk = q.elements / (b * h * queries)
    d_v = d_qk * v.elements / max(k.elements, 1)  # V's head size from K's (grouped-query K/V: same count)
    walked = float(keys_attended(keys, 0.0)) if causal else float(keys)
    flop = 2.0 * b * h * queries * walked * (d_qk + d_v)
    if custom_call_target(inst).endswith("Backward"):
        flop *= FLASH_BACKWARD_FACTOR
    written = sum(leaf.bytes for leaf in inst.shape.leaves if leaf.dtype not in ("u8", "s8"))
    return Work(OpKind.ATTENTION, float(flop), float(sum(s.bytes for s in operands) + written), q.dtype, walked)


def _own_flop(inst: Instruction, comp: Computation) -> tuple[float, str, bool]:
    """(FLOPs, input element type, is a convolution) of a dot, convolution or GEMM library call."""
    if inst.opcode not in ("dot", "convolution", "custom-call") or not inst.operands:
        return 0.0, "", False
    lhs = comp.by_name.get(inst.operands[0])
    rhs = comp.by_name.get(inst.operands[1]) if len(inst.operands) > 1 else None
    if lhs is None or rhs is None:
        return 0.0, "", False
    if inst.opcode == "convolution" or (inst.opcode == "custom-call"
                                        and custom_call_target(inst).startswith("__cudnn$conv")):
        window = convolution_dims(inst)
        out_shape = inst.shape.leaves[0].dims  # a cuDNN call's tuple result holds its workspace after it
        if window is not None:
            return convolution_flop(window, lhs.shape.array.dims, rhs.shape.array.dims, out_shape), \
                lhs.shape.array.dtype, True
        kernel = rhs.shape.array  # no labels: the last kernel dimension is the output features
        return (2.0 * math.prod(out_shape) * kernel.elements / max(kernel.dims[-1] if kernel.dims else 1, 1),
                lhs.shape.array.dtype, True)
    if inst.opcode == "custom-call":
        target = custom_call_target(inst).lower()
        if "gemm" not in target and "matmul" not in target:
            return 0.0, "", False
        contracting = gemm_dimension_numbers(inst).get("lhs_contracting_dimensions", ())
    else:
        contracting = dimension_numbers(inst).get("lhs_contracting_dims", ())
    dims = lhs.shape.array.dims
    k = math.prod(dims[d] for d in contracting if d < len(dims))
    out_elements = inst.shape.leaves[0].elements  # a GEMM call's tuple result holds its workspace after it
    return 2.0 * out_elements * k, lhs.shape.array.dtype, False


def convolution_flop(dims: ConvolutionDims, lhs: tuple[int, ...], rhs: tuple[int, ...],
                     out: tuple[int, ...]) -> float:
    """FLOPs of a convolution, 2 per multiply-add that touches an input element (XLA's HloCostAnalysis
    convention): 2 x (input features / feature groups) x output features x (batch / batch groups) x, per
    spatial dimension, the (output position, kernel tap) pairs whose tap lands on an input element rather
    than on padding or on a hole of an lhs dilation. Without padding or dilation this is 2 x output elements
    x kernel window x input features per group; a batched matmul XLA writes as an lhs-dilated convolution
    (window = batch, lhs_dilate = batch) counts one tap per output, not the window's."""
    def size(shape: tuple[int, ...], labels: str, label: str) -> int:
        at = labels.find(label)
        return shape[at] if 0 <= at < len(shape) else 1

    fma = (size(lhs, dims.lhs, "f") // dims.feature_groups) * size(out, dims.out, "f") \
        * (size(lhs, dims.lhs, "b") // dims.batch_groups)
    for d, window in enumerate(dims.window):
        label = str(d)
        fma *= valid_taps(window, size(lhs, dims.lhs, label), size(out, dims.out, label),
                          size(rhs, dims.rhs, label))
    return 2.0 * fma


def valid_taps(window: WindowDim, inputs: int, outputs: int, kernel: int) -> int:
    """(output position, kernel tap) pairs of one spatial dimension whose tap reads an input element: the
    tap's position in the padded, dilated input, o x stride - pad_low + k x rhs_dilate, falls on a multiple
    of lhs_dilate whose quotient indexes the input."""
    position = np.arange(outputs, dtype=np.int64) * window.stride - window.pad_low
    taps = 0
    for k in range(kernel):
        at = position + k * window.rhs_dilate
        hit = (at >= 0) & (at % window.lhs_dilate == 0) & (at // window.lhs_dilate < inputs)
        taps += int(np.count_nonzero(hit))
    return taps


def _fused_flop(module: HloModule, name: str) -> tuple[float, str, bool]:
    """FLOPs of the dots and convolutions inside a fused computation (nested fusions included)."""
    comp = module.computations[name]
    flop, dtype, conv = 0.0, "", False
    if comp.opcodes.isdisjoint(_MATRIX):
        return flop, dtype, conv
    for inst in comp.instructions:
        if inst.opcode == "fusion" or inst.opcode == "call":
            for inner in called(inst):
                if inner in module.computations:
                    f, d, c = _fused_flop(module, inner)
                    flop, dtype, conv = flop + f, dtype or d, conv or c
            continue
        f, d, c = _own_flop(inst, comp)
        flop, dtype, conv = flop + f, dtype or d, conv or c
    return flop, dtype, conv


def _fused_bytes(module: HloModule, name: str, operand_bytes: tuple[int, ...], result_bytes: int) -> float:
    """Bytes a fusion moves: each parameter read whole unless the fusion only slices it (then the slices)
    or updates it in place (then nothing); the result written, or only the update of an in-place root."""
    comp = module.computations[name]
    if comp.opcodes.isdisjoint(_PARTIAL):  # every parameter read whole, the result written whole
        return float(sum(operand_bytes) + result_bytes)
    params: dict[str, int] = {}
    for inst in comp.instructions:
        if inst.opcode == "parameter":
            params[inst.name] = int(inst.argument.strip() or 0)
    users: dict[str, list[Instruction]] = {p: [] for p in params}
    for inst in comp.instructions:
        for o in inst.operands:
            if o in users:
                users[o].append(inst)
    # in-place updates (XLA aliases a dynamic-update-slice's buffer with its result): the buffer is neither
    # read nor written whole, only the update is written
    # (the CPU backend wraps bf16 buffers in converts around the update: followed through)
    source = {i.name: i.operands[0] for i in comp.instructions
              if i.opcode in _VIEWS and i.operands and len(users.get(i.operands[0], [i])) == 1}
    updates = [i for i in comp.instructions if i.opcode == "dynamic-update-slice" and len(i.operands) > 1
               and source.get(i.operands[0], i.operands[0]) in params and i.operands[1] in comp.by_name]
    aliased = {source.get(u.operands[0], u.operands[0]) for u in updates}
    moved = 0.0
    for pname, number in params.items():
        full = operand_bytes[number] if number < len(operand_bytes) else 0
        uses = [u for u in users[pname] if not (pname in aliased and (u in updates or u.name in source))]
        if pname in aliased and not uses:
            continue
        if uses and all(u.opcode in _SLICES and u.operands[0] == pname for u in uses):
            moved += sum(u.shape.bytes for u in uses)
        else:
            moved += full
    written = result_bytes - sum(u.shape.bytes for u in updates) + sum(comp.by_name[u.operands[1]].shape.bytes
                                                                       for u in updates)
    return moved + max(written, 0)
