"""Closed choices of collective communication: the operations and the algorithms that run them."""

from __future__ import annotations

from enum import StrEnum


class Collective(StrEnum):
    ALL_REDUCE = "all_reduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_GATHER = "all_gather"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND_RECV = "send_recv"

    @property
    def reduces(self) -> bool:
        return self in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.REDUCE)


# Collective's members as module names, for hot paths to import: on CPython 3.11 each `Collective.X` read goes
# through EnumType.__getattr__ (~0.15 us), a module global ~0.02 us, and one estimate reads dozens of them.
ALL_REDUCE = Collective.ALL_REDUCE
REDUCE_SCATTER = Collective.REDUCE_SCATTER
ALL_GATHER = Collective.ALL_GATHER
ALL_TO_ALL = Collective.ALL_TO_ALL
BROADCAST = Collective.BROADCAST
REDUCE = Collective.REDUCE
SEND_RECV = Collective.SEND_RECV

class Algorithm(StrEnum):
    AUTO = "auto"
    RING = "ring"
    TREE = "tree"  # pipelined double binary tree (NCCL Tree)
    HALVING_DOUBLING = "halving_doubling"  # recursive halving / doubling (Rabenseifner; MPI)
    DIRECT = "direct"  # one-shot: every rank exchanges with every other at once (custom all-reduce)
    IN_NETWORK = "in_network"  # the switch reduces (NVLink SHARP, InfiniBand SHARP)
    SYNTHESIZED = "synthesized"  # a schedule synthesized for the dimension's topology (comm/synthesis.py)


# Algorithm's members as module names, read once for the hot paths (as Collective's, above)
ALG_AUTO = Algorithm.AUTO
ALG_RING = Algorithm.RING
ALG_TREE = Algorithm.TREE
ALG_HALVING_DOUBLING = Algorithm.HALVING_DOUBLING
ALG_DIRECT = Algorithm.DIRECT
ALG_IN_NETWORK = Algorithm.IN_NETWORK
ALG_SYNTHESIZED = Algorithm.SYNTHESIZED

# what NCCL offers on a tier: ring, tree and, where the switch reduces, NVLS / CollNet
NCCL_ALGORITHMS = (Algorithm.RING, Algorithm.TREE, Algorithm.IN_NETWORK)


class Composition(StrEnum):
    """How a collective over a group that spans several network dimensions is put together
    (docs/formulas.md §1.5). `auto` takes the fastest that the system's library offers."""

    AUTO = "auto"
    FLAT_RING = "flat_ring"  # one ring through every rank, its channels over the rails (NCCL Ring)
    PIPELINED = "pipelined"  # a phase per dimension, chunks pipelined across them (ASTRA-sim; NCCL Tree family)
    SEQUENTIAL = "sequential"  # a phase per dimension, one after another


# Composition's members as module names (as Collective's, above)
ANY_COMPOSITION = Composition.AUTO
FLAT_RING = Composition.FLAT_RING
PIPELINED = Composition.PIPELINED
