"""One MoE layer's token exchange over its expert-parallel group: the dispatch before the experts and the
combine after them, per micro-batch and pass (docs/formulas.md §7.2). Training (`estimate/layer.py`) and
wide-EP serving (`estimate/dp_attention.py`) both price it here.

Two ways to move the tokens:
- one copy per routed expert through an all-to-all of the rank's buffer (GShard; Megatron-Core's alltoall
  dispatcher over NCCL): `T k h b` bytes per rank, of which the share bound for other ranks leaves it;
- deduplicated (DeepEP's normal kernels, Megatron-Core's flex dispatcher with DeepEP or HybridEP;
  `Routing.dispatch_dedup`): a token crosses the scale-out network once to each other node that holds some
  of its experts, to the device at its own position there, which forwards it over the scale-up network
  once to each device of the node holding them. Both networks work at once (DeepEP's asymmetric-domain
  forwarding), so the slower of the two phases sets the time [derived]. Group-limited routing
  (DeepSeek-V3 §2.1.2: each token to at most 4 nodes) bounds the nodes a token reaches
  (`workload.experts.holders_hit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.comm.collectives import CommCost, collective, needed
from armillary.numerics import Array, maximum
from armillary.plan.arrays import ModelArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import ALL_TO_ALL
from armillary.specs.system import System
from armillary.workload.experts import holders_hit


@dataclass(frozen=True)
class Fanout:
    """How many nodes and devices of an EP group one token's top_k experts sit on, in expectation."""

    top_k: Array
    nodes: Array
    devices: Array

    @classmethod
    def of(cls, m: ModelArrays, group: Placement) -> Fanout:
        return cls(m.top_k, holders_hit(m, group.nodes), holders_hit(m, group.size))


def token_exchange(copies_bytes: Array, fanout: Fanout, group: Placement, system: System,
                   dedup: Array) -> CommCost:
    """One dispatch (or combine) over the EP `group` of a rank's buffer of `copies_bytes`: one copy per
    routed expert of each of its tokens (`ExpertsForward.dispatch_bytes` / `combine_bytes`). `dedup` 0/1:
    all-to-all of the copies, or the deduplicated exchange (module docstring)."""
    plain = needed(lambda: collective(ALL_TO_ALL, copies_bytes, group, system).cost, dedup == 0)
    return plain + needed(lambda: deduplicated(copies_bytes, fanout, group, system), dedup > 0)


def deduplicated(copies_bytes: Array, fanout: Fanout, group: Placement, system: System) -> CommCost:
    """The deduplicated exchange: per token, one copy to each node of the group that holds some of its
    experts (an all-to-all among the devices at the same position of each node, whose buffer holds those
    copies; the one for the own node stays put), and one copy to each device holding some (an all-to-all
    inside each node); the slower phase sets the time, the bytes of both are sent."""
    per_copy = copies_bytes / fanout.top_k  # bytes of one token (with the busiest rank's load factor)
    outer = Placement((1.0, *group.spans[1:]))
    nodes = needed(lambda: collective(ALL_TO_ALL, per_copy * fanout.nodes, outer, system).cost,
                   group.nodes > 1)
    inner = Placement((group.per_node, *(1.0 for _ in group.spans[1:])))
    ranks = needed(lambda: collective(ALL_TO_ALL, per_copy * fanout.devices, inner, system).cost,
                   group.per_node > 1)
    return CommCost(maximum(nodes.time, ranks.time), nodes.scale_up_bytes + ranks.scale_up_bytes,
                    nodes.scale_out_bytes + ranks.scale_out_bytes)
