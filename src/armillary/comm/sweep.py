"""A collective over a range of sizes, reported with the nccl-tests conventions.

nccl-tests (doc/PERFORMANCE.md; docs/formulas.md §1.4): algbw = S / t and busbw = algbw x f, with S the bytes
of the operation (all-reduce: one rank's buffer; reduce-scatter, all-gather, all-to-all: the whole
buffer across ranks) and f = 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter, all-gather and
all-to-all, 1 otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from armillary.comm.algorithm_steps import bus_factor
from armillary.comm.collectives import collective
from armillary.comm.composed import COMPOSITIONS
from armillary.comm.cost_types import ALGORITHMS, PROTOCOLS, DimensionCost
from armillary.display import Displayed, Headline, number, seconds
from armillary.errors import SpecError
from armillary.numerics import Array
from armillary.plan.placement import Placement, place
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.system import System
from armillary.units import GIB, KIB, MIB

_SUFFIX = {"": 1, "B": 1, "K": KIB, "M": MIB, "G": GIB}


def parse_size(text: str) -> float:
    """'64K' -> 65536 (binary prefixes, as nccl-tests' -b/-e)."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMG]?)B?\s*", text.upper())
    if not match:
        raise ValueError(f"size {text!r}: expected a number with an optional K, M or G suffix, e.g. 64K")
    return float(match.group(1)) * _SUFFIX[match.group(2)]


def parse_sizes(text: str) -> np.ndarray:
    """'1K:16G' (doubling, like nccl-tests -f 2), 'START:END:FACTOR', or a comma list '8M,1G'."""
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise ValueError(f"sizes {text!r}: expected START:END or START:END:FACTOR")
        start, end = parse_size(parts[0]), parse_size(parts[1])
        factor = float(parts[2]) if len(parts) == 3 else 2.0
        if start <= 0 or end < start or factor <= 1:
            raise ValueError(f"sizes {text!r}: need 0 < START <= END and FACTOR > 1")
        count = int(np.floor(np.log(end / start) / np.log(factor) + 1e-9)) + 1
        return start * factor ** np.arange(count)
    return np.array([parse_size(t) for t in text.split(",")])


@dataclass(frozen=True, repr=False)
class SweepRow(Displayed):
    size_bytes: float
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    composition: str  # how the dimensions were put together (flat_ring, pipelined, sequential)
    dimensions: tuple[str, ...]  # per dimension, the algorithm/protocol of its phase ("-" where not spanned)

    def headline(self) -> Headline:
        return [("size", number(self.size_bytes) + " B"), ("time", seconds(self.time_s)),
                ("busbw", number(self.busbw_bytes_per_s / 1e9) + " GB/s"), ("composition", self.composition)]


def group_of(system: System, gpus: int) -> Placement:
    """All `gpus` devices of the system as one group, inner dimensions filled first."""
    return place(float(gpus), 1.0, system.with_devices(gpus).sizes)


def collective_sweep(op: Collective, sizes: np.ndarray, group: Placement, system: System,
                     algorithm: Algorithm = Algorithm.AUTO,
                     composition: Composition = Composition.AUTO) -> list[SweepRow]:
    """The nccl-tests table of `op` over `group` for each size (one vectorized evaluation)."""
    if group.size < 2:
        raise SpecError(f"a collective needs a group of at least 2 GPUs, not {group.size:g}")
    if not (np.all(np.isfinite(sizes)) and np.all(np.asarray(sizes) > 0)):
        raise SpecError(f"size_bytes: message sizes must be positive, finite numbers of bytes, got {sizes}")
    result = collective(op, np.asarray(sizes, dtype=float), group, system, algorithm, composition=composition)
    time = np.broadcast_to(result.cost.time, np.shape(sizes))
    algbw = sizes / time
    busbw = algbw * bus_factor(op, group.size)

    def at(values: Array, i: int) -> int:
        return int(np.ravel(values)[min(i, np.size(values) - 1)])

    def label(span: Array, dim: DimensionCost, i: int) -> str:
        if float(span) <= 1:
            return "-"
        return f"{ALGORITHMS[at(dim.algorithm, i)].value}/{PROTOCOLS[at(dim.protocol, i)].name}"

    return [SweepRow(float(s), float(t), float(a), float(b), COMPOSITIONS[at(result.composition, i)].value,
                     tuple(label(span, dim, i) for span, dim in zip(group.spans, result.dimensions, strict=True)))
            for i, (s, t, a, b) in enumerate(zip(sizes, time, algbw, busbw, strict=True))]
