"""Attributes of HLO instructions, read from their text on demand: called computations, dot dimensions,
while-loop trip counts, replica groups and source-target pairs.

Replica groups come in three printed forms: explicit `{{0,1},{2,3}}`, iota `[2,4]<=[8]` (optionally
transposed, `[4,2]<=[2,4]T(1,0)`: XLA's IotaReplicaGroupList / IotaTileAssignment) and the mesh-axes form
`mesh['x'=2,'y'=4] {'y'}` (the devices of a row-major mesh that differ only along the named axes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from armillary.errors import SpecError
from armillary.ingest.hlo_parse import Computation, HloModule, Instruction

_CALLED = re.compile(r"\b(calls|to_apply|condition|body|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_DIMS = re.compile(r"\b(lhs_contracting_dims|rhs_contracting_dims|lhs_batch_dims|rhs_batch_dims)=\{([\d,]*)\}")
_TRIP = re.compile(r'known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)')
_EXPLICIT_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")
_PAIRS = re.compile(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}")
_WINDOW = re.compile(r"window=\{([^}]*)\}")
_DIM_LABELS = re.compile(r"dim_labels=(\w+)_(\w+)->(\w+)")
_GROUP_COUNT = re.compile(r"\b(feature_group_count|batch_group_count)=(\d+)")
_CUSTOM_TARGET = re.compile(r'custom_call_target="([^"]+)"')
_GEMM_DIMS = re.compile(r'"(lhs_contracting_dimensions|lhs_batch_dimensions)"\s*:\s*\[([^\]]*)\]')
_FMHA_SCORES = re.compile(r'"intermediate_tensor_shape"\s*:\s*\{[^{}]*?"dimensions"\s*:\s*\[([^\]]*)\]')
_FMHA_CAUSAL = re.compile(r'"mask_type"\s*:\s*"(?:PADDING_)?CAUSAL"')


def called(inst: Instruction) -> tuple[str, ...]:
    """Names of the computations the instruction calls (fusion, call, while body/condition, branches...)."""
    if "=" not in inst.attributes:
        return ()
    names = [m.group(2) for m in _CALLED.finditer(inst.attributes)]
    branches = _BRANCHES.search(inst.attributes)
    if branches:
        names += [b.strip().lstrip("%") for b in branches.group(1).split(",") if b.strip()]
    return tuple(names)


def loop_parts(inst: Instruction) -> tuple[str, str]:
    """(condition, body) computation names of a while loop."""
    names = {m.group(1): m.group(2) for m in _CALLED.finditer(inst.attributes)}
    return names.get("condition", ""), names.get("body", "")


def dimension_numbers(inst: Instruction) -> dict[str, tuple[int, ...]]:
    """Contracting and batch dimensions of a dot (`lhs_contracting_dims={1}` ...)."""
    return {m.group(1): tuple(int(x) for x in m.group(2).split(",") if x) for m in _DIMS.finditer(inst.attributes)}


def gemm_dimension_numbers(inst: Instruction) -> dict[str, tuple[int, ...]]:
    """The same from a library GEMM custom-call's backend config (`"lhs_contracting_dimensions":["1"]`)."""
    return {m.group(1): tuple(int(x.strip(' "')) for x in m.group(2).split(",") if x.strip(' "'))
            for m in _GEMM_DIMS.finditer(inst.attributes)}


def fmha_scores(inst: Instruction) -> tuple[tuple[int, ...], bool]:
    """The score matrix's dimensions (batch, heads, queries, keys) of a cuDNN fused-attention call, from its
    backend config's `intermediate_tensor_shape`, and whether its mask is causal (`mask_type`)."""
    match = _FMHA_SCORES.search(inst.attributes)
    dims = tuple(int(x.strip(' "')) for x in match.group(1).split(",") if x.strip(' "')) if match else ()
    return dims, _FMHA_CAUSAL.search(inst.attributes) is not None


@dataclass(frozen=True, slots=True)
class WindowDim:
    """One spatial dimension of a convolution's window (XLA's WindowDimension)."""

    size: int
    stride: int = 1
    pad_low: int = 0
    pad_high: int = 0
    lhs_dilate: int = 1  # base dilation: holes between input elements (transposed convolutions)
    rhs_dilate: int = 1  # window dilation: holes between kernel taps (atrous convolutions)


@dataclass(frozen=True, slots=True)
class ConvolutionDims:
    """A convolution's window per spatial dimension, its dimension labels (`b01f_01io->b01f`: the position
    of the batch, feature and each spatial dimension in the input, kernel and output) and group counts."""

    window: tuple[WindowDim, ...]
    lhs: str
    rhs: str
    out: str
    feature_groups: int = 1
    batch_groups: int = 1


def convolution_dims(inst: Instruction) -> ConvolutionDims | None:
    """The window and dimension labels of a convolution (or a cuDNN convolution call); None if unprinted."""
    labels = _DIM_LABELS.search(inst.attributes)
    if labels is None:
        return None
    lhs, rhs, out = labels.groups()
    spatial = sum(ch.isdigit() for ch in lhs)
    window_text = _WINDOW.search(inst.attributes)
    fields: dict[str, list[str]] = {}
    for item in (window_text.group(1).split() if window_text else ()):
        key, _, value = item.partition("=")
        fields[key] = value.split("x")
    if "size" not in fields:  # no window: a 1x1 convolution in every spatial dimension (a matmul)
        fields["size"] = ["1"] * spatial
    dims: list[WindowDim] = []
    for d, size in enumerate(fields["size"]):
        pad = fields.get("pad", [])
        low, _, high = (pad[d] if d < len(pad) else "0_0").partition("_")
        dims.append(WindowDim(int(size), _at(fields, "stride", d), int(low), int(high or 0),
                              _at(fields, "lhs_dilate", d), _at(fields, "rhs_dilate", d)))
    counts = {m.group(1): int(m.group(2)) for m in _GROUP_COUNT.finditer(inst.attributes)}
    return ConvolutionDims(tuple(dims), lhs, rhs, out, max(counts.get("feature_group_count", 1), 1),
                           max(counts.get("batch_group_count", 1), 1))


def _at(fields: dict[str, list[str]], key: str, d: int) -> int:
    values = fields.get(key, [])
    return int(values[d]) if d < len(values) else 1


def custom_call_target(inst: Instruction) -> str:
    match = _CUSTOM_TARGET.search(inst.attributes)
    return match.group(1) if match else ""


def trip_count(inst: Instruction, module: HloModule) -> int:
    """Iterations of a while loop: the backend config's known_trip_count, else read off the condition
    (induction variable compared with a constant: `i < N` with i starting at 0, as JAX's scan and
    fori_loop lower), else 1 (a loop whose count only the run knows)."""
    match = _TRIP.search(inst.attributes)
    if match:
        return int(match.group(1))
    condition = module.computations.get(loop_parts(inst)[0])
    bound = _compare_bound(condition, module) if condition is not None else None
    return bound if bound is not None else 1


def _compare_bound(condition: Computation, module: HloModule) -> int | None:
    """N of a loop condition `compare(i, N), direction=LT` (directly or inside a fusion)."""
    for comp in (condition, *(module.computations[c] for i in condition.instructions for c in called(i)
                              if c in module.computations)):
        constants = {i.name: i.argument for i in comp.instructions if i.opcode == "constant"}
        for inst in comp.instructions:
            if inst.opcode == "compare" and "direction=LT" in inst.attributes:
                bound = inst.operands[1] if len(inst.operands) > 1 else ""
                text = constants.get(bound) or next((i.argument for c in (condition,) for i in c.instructions
                                                     if i.opcode == "constant" and i.name == bound), None)
                if text is None:  # the bound arrives as a fusion parameter: take the condition's own constant
                    values = [v for v in (i.argument for i in condition.instructions if i.opcode == "constant")
                              if v.strip().lstrip("-").isdigit()]
                    text = values[0] if len(values) == 1 else None
                if text is not None and text.strip().lstrip("-").isdigit():
                    return max(int(text), 0)
    return None


def replica_groups(inst: Instruction, devices: int) -> tuple[tuple[int, ...], ...]:
    """The groups of a collective; one group of all `devices` when none are printed (XLA's default)."""
    attrs = inst.attributes
    iota = _IOTA_GROUPS.search(attrs)
    if iota:
        shape = [int(x) for x in iota.group(1).split(",")]
        reshape = [int(x) for x in iota.group(2).split(",")]
        ids = np.arange(int(np.prod(reshape))).reshape(reshape)
        if iota.group(3):
            ids = ids.transpose([int(x) for x in iota.group(3).split(",")])
        return tuple(tuple(int(x) for x in row) for row in ids.reshape(shape[0], -1))
    mesh = _MESH_GROUPS.search(attrs)
    if mesh:
        return _mesh_groups(mesh.group(1), mesh.group(2), inst)
    explicit = _EXPLICIT_GROUPS.search(attrs)
    if explicit and explicit.group(1).strip():
        return tuple(tuple(int(x) for x in g.split(",") if x.strip())
                     for g in re.findall(r"\{([\d,\s]*)\}", explicit.group(1)))
    return (tuple(range(devices)),)


def _mesh_groups(axes_text: str, chosen_text: str, inst: Instruction) -> tuple[tuple[int, ...], ...]:
    axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", axes_text)
    chosen = re.findall(r"'([^']+)'", chosen_text)
    names = [a for a, _ in axes]
    if not axes or any(c not in names for c in chosen):
        raise SpecError(f"{inst.name}: replica_groups mesh[{axes_text}] {{{chosen_text}}}: expected named axes "
                        f"'a'=size and a subset of {names}")
    sizes = [int(s) for _, s in axes]
    ids = np.arange(int(np.prod(sizes))).reshape(sizes)  # devices number row-major over the mesh
    inside = [names.index(c) for c in chosen]
    outside = [i for i in range(len(sizes)) if i not in inside]
    grouped = ids.transpose(outside + inside).reshape(-1, int(np.prod([sizes[i] for i in inside])))
    return tuple(tuple(int(x) for x in row) for row in grouped)


def source_target_pairs(inst: Instruction) -> tuple[tuple[int, int], ...]:
    match = _PAIRS.search(inst.attributes)
    if not match:
        return ()
    return tuple((int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", match.group(1)))
