"""Where the ranks of each parallel group sit on the network's dimensions.

Devices number mixed-radix over the dimensions, innermost first; Megatron orders ranks tensor-parallel
first, then context, data and pipeline parallel, so TP groups are contiguous inside a node and PP groups
have the largest stride. A group of `size` ranks with stride `stride` spans, on each dimension, as many
positions as its ranks take there.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from armillary.numerics import Array, where
from armillary.plan.codes import RANK_ORDER_PP_INNER


@dataclass(frozen=True)
class Placement:
    """A group's ranks per dimension: `spans[i]` positions along dimension i (their product is the size)."""

    spans: tuple[Array, ...]

    @property
    def size(self) -> Array:
        return math.prod(self.spans[1:], start=self.spans[0])

    @property
    def per_node(self) -> Array:
        """Ranks inside one scale-up domain (the innermost dimension)."""
        return self.spans[0]

    @property
    def nodes(self) -> Array:
        """Scale-up domains the group touches."""
        return self.size / self.per_node

    @property
    def outermost(self) -> Array:
        """Index of the outermost dimension the group spans (0 for a group inside one node)."""
        index: Array = 0.0
        for i, span in enumerate(self.spans[1:], start=1):
            index = where(span > 1, float(i), index)
        return index

    def inner(self, dim: int) -> Array:
        """Ranks of the group inside one block of the dimensions below `dim`."""
        return math.prod(self.spans[:dim], start=1.0)


def place(size: Array, stride: Array, sizes: tuple[int, ...]) -> Placement:
    """The spans of a group of `size` ranks, `stride` apart, on dimensions of `sizes` positions. The ranks
    inside the first k dimensions are those that fit there, floor(prod(sizes[:k]) / stride), kept a divisor
    of the size: a group that does not fill its blocks evenly (6 ranks as 4 + 2) is costed as its even
    sub-layout (3 blocks of 2), whose outer step is the bottleneck of the uneven one."""
    scalar = not any(isinstance(x, np.ndarray) for x in (size, stride))
    within: list[Array] = []
    capacity = 1
    for k in sizes[:-1]:
        capacity *= k
        if scalar:
            fit = min(max(math.floor(capacity / stride), 1), size)
            within.append(float(max(math.gcd(int(size), int(fit)), 1)))  # at least one (degrees that do not divide)
        else:
            fit = np.clip(np.floor(capacity / np.asarray(stride)), 1, size)
            fit = np.gcd(np.asarray(size, dtype=np.int64), np.asarray(fit, dtype=np.int64))
            within.append(np.maximum(fit, 1).astype(float))
    within.append(size)
    spans = [within[0]] + [within[i] / within[i - 1] for i in range(1, len(within))]
    return Placement(tuple(spans))


def pair_across(dim: int, dims: int) -> Placement:
    """Two ranks that differ on dimension `dim` only (e.g. a prefill and a decode replica in two nodes)."""
    return Placement(tuple(2.0 if i == dim else 1.0 for i in range(dims)))


def placement_of(ranks: tuple[int, ...], sizes: tuple[int, ...]) -> Placement:
    """The spans of an explicit set of ranks (e.g. a trace's communicator): inside each block of the first
    k dimensions, the most ranks any block holds, kept a divisor of the next level's (the even
    sub-layout, as `place`)."""
    within = [float(len(ranks))]
    capacity = math.prod(sizes[:-1])
    for k in range(len(sizes) - 1, 0, -1):
        most = max(Counter(r // capacity for r in ranks).values())
        within.insert(0, float(math.gcd(int(within[0]), most)))
        capacity //= sizes[k - 1]
    return Placement(tuple([within[0]] + [within[i] / within[i - 1] for i in range(1, len(within))]))


class Groups(NamedTuple):
    """Where the ranks of each parallel group of a layer sit."""

    tp: Placement
    gradient: Placement  # the dp x cp ranks that hold the same parameters (gradient reduction, ZeRO)
    pp: Placement
    cp: Placement


def place_groups(tp: Array, dp: Array, pp: Array, sizes: tuple[int, ...], cp: Array = 1.0,
                 rank_order: Array = 0.0) -> Groups:
    """Placements of the (tp, gradient, pp, cp) groups. Ranks are numbered tp -> cp -> dp -> pp
    (Megatron's order), or tp -> cp -> pp -> dp (`rank_order` coded as `plan.codes.RANK_ORDER`): a group's
    stride is the product of the degrees numbered before it. The gradient group is the dp x cp ranks that
    hold the same parameters: its ranks per dimension block are those of its cp part times those of its
    dp part."""
    cp_group = place(cp, tp, sizes)
    inner = place(cp * dp, tp, sizes)  # cp and dp adjacent: one group of stride tp
    pp_inner = rank_order == RANK_ORDER_PP_INNER
    if isinstance(pp_inner, np.ndarray) or pp_inner:
        dp_part = place(dp, tp * cp * pp, sizes)  # pp between cp and dp
        split = tuple(c * d for c, d in zip(cp_group.spans, dp_part.spans, strict=True))
        gradient = Placement(tuple(where(pp_inner, s, i) for s, i in zip(split, inner.spans, strict=True)))
    else:
        gradient = inner
    pp_group = place(pp, where(pp_inner, tp * cp, tp * cp * dp), sizes)
    return Groups(place(tp, 1.0, sizes), gradient, pp_group, cp_group)


def place_expert_groups(etp: Array, ep: Array, edp: Array, sizes: tuple[int, ...]) -> tuple[Placement, ...]:
    """Placements of the (etp, ep, expert-dp) groups of the MoE layers, which regroup the tp x cp x dp ranks
    in the order etp -> ep -> edp (Megatron-Core's MoE parallel folding)."""
    return place(etp, 1.0, sizes), place(ep, etp, sizes), place(edp, etp * ep, sizes)
