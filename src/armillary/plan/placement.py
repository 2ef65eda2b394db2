"""Where the ranks of each parallel group sit: inside one node (scale-up) or across nodes (scale-out).

Megatron orders ranks tensor-parallel first, then data-parallel, then pipeline-parallel, so TP groups
are contiguous inside a node and PP groups have the largest stride.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from armillary.numerics import Array, minimum, where
from armillary.plan.codes import RANK_ORDER_PP_INNER


@dataclass(frozen=True)
class Placement:
    """A group of `size` ranks with `per_node` of them in each node it touches."""

    size: Array
    per_node: Array

    @property
    def nodes(self) -> Array:
        return self.size / self.per_node


def _place(size: Array, stride: Array, devices_per_node: Array) -> Placement:
    # a group that does not fill its nodes evenly (e.g. 6 ranks as 4 + 2) is costed as its even
    # sub-layout (3 nodes of 2), whose inter-node step is the bottleneck of the uneven one
    if not any(isinstance(x, np.ndarray) for x in (size, stride, devices_per_node)):
        fit = min(max(math.floor(devices_per_node / stride), 1), size)
        return Placement(size=size, per_node=float(math.gcd(int(size), int(fit))))
    fit = np.clip(np.floor(devices_per_node / stride), 1, size)
    per_node = np.gcd(np.asarray(size, dtype=np.int64), np.asarray(fit, dtype=np.int64)).astype(float)
    return Placement(size=size, per_node=per_node)


class Groups(NamedTuple):
    """Where the ranks of each parallel group of a layer sit."""

    tp: Placement
    gradient: Placement  # the dp x cp ranks that hold the same parameters (gradient reduction, ZeRO)
    pp: Placement
    cp: Placement


def place_groups(tp: Array, dp: Array, pp: Array, devices_per_node: Array, cp: Array = 1.0,
                 rank_order: Array = 0.0) -> Groups:
    """Placements of the (tp, gradient, pp, cp) groups. Ranks are numbered tp -> cp -> dp -> pp
    (Megatron's order), or tp -> cp -> pp -> dp (`rank_order` coded as `plan.codes.RANK_ORDER`): a group's stride is the
    product of the degrees numbered before it. The gradient group is the dp x cp ranks that hold the
    same parameters: its ranks in one node are those of its cp part times those of its dp part."""
    tp_group = Placement(size=tp, per_node=minimum(tp, devices_per_node))
    cp_group = _place(cp, tp, devices_per_node)
    inner = _place(cp * dp, tp, devices_per_node)  # cp and dp adjacent: one group of stride tp
    split = cp_group.per_node * _place(dp, tp * cp * pp, devices_per_node).per_node  # pp between cp and dp
    pp_inner = rank_order == RANK_ORDER_PP_INNER
    gradient = Placement(size=cp * dp, per_node=where(pp_inner, split, inner.per_node))
    pp_group = _place(pp, where(pp_inner, tp * cp, tp * cp * dp), devices_per_node)
    return Groups(tp_group, gradient, pp_group, cp_group)


def place_expert_groups(etp: Array, ep: Array, edp: Array, devices_per_node: Array) -> tuple[Placement, ...]:
    """Placements of the (etp, ep, expert-dp) groups of the MoE layers, which regroup the tp x cp x dp ranks
    in the order etp -> ep -> edp (Megatron-Core's MoE parallel folding)."""
    return (_place(etp, 1.0, devices_per_node), _place(ep, etp, devices_per_node),
            _place(edp, etp * ep, devices_per_node))
