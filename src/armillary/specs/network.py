"""A system's network: an ordered list of dimensions, innermost first (e.g. NVLink inside a node, then the
InfiniBand rails between nodes, then a spine), and the library that composes collectives across them.

Every dimension is described as one device sees it: its injection bandwidth (all of the device's links on
that dimension, per direction), latency per hop, achievable efficiency, and how many positions it has
(`size`). The devices of the system are the product of the sizes: device coordinates are mixed-radix,
innermost dimension fastest, so ranks fill the innermost dimension first.
"""

from __future__ import annotations

import math
from enum import StrEnum

from pydantic import Field, PositiveInt, field_validator, model_validator

from armillary.specs.base import Spec
from armillary.specs.communication import NCCL_ALGORITHMS, Algorithm, Collective
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.quantity import BytesPerSecond, Fraction, Seconds


class NetworkKind(StrEnum):
    """How the devices along one dimension are connected."""

    SWITCH = "switch"  # non-blocking switch (NVSwitch, one InfiniBand switch): any pair at full rate
    FULLY_CONNECTED = "fully_connected"  # a direct link between every pair (AMD Infinity Fabric)
    FAT_TREE = "fat_tree"  # leaf switches of `leaf_size` ports joined by spines, oversubscribed above the leaves
    RAIL_OPTIMIZED = "rail_optimized"  # the same as fat_tree, with device i of every node on leaf (rail) i
    RING = "ring"  # each device links to two neighbours
    TORUS = "torus"  # `shape` gives the axes (2-D/3-D, wrap-around links)
    MESH = "mesh"  # like a torus without wrap-around links: a corner device has half the links


PROTOCOL_NAMES = ("LL", "LL128", "Simple")  # NCCL's protocols (comm/algorithms.py PROTOCOLS)
SWITCHED = (NetworkKind.SWITCH, NetworkKind.FULLY_CONNECTED, NetworkKind.FAT_TREE, NetworkKind.RAIL_OPTIMIZED)


class DirectAllReduce(StrEnum):
    """What `direct` means for an all-reduce on a dimension (both exchange with every peer at once).

    - one_shot: every rank sends its whole buffer to every peer and reduces the p buffers itself: 1 step,
      (p - 1) n bytes per rank (NCCL-side custom all-reduce, TensorRT-LLM ONESHOT).
    - two_shot: a reduce-scatter then an all-gather, each one step to all p - 1 peers at once: 2 steps,
      2 (p - 1) / p n bytes, (p - 1) / p n reduced (ASTRA-sim's `direct`, astra-sim
      system/astraccl/native_collectives/collective_algorithm/AllToAll.cc, a Ring with p - 1 parallel
      transfers; TensorRT-LLM TWOSHOT).
    """

    ONE_SHOT = "one_shot"
    TWO_SHOT = "two_shot"


class CollectiveLibrary(StrEnum):
    """How collectives that span several dimensions are run (docs/formulas.md §1.5).

    - nccl: NCCL's multi-node algorithms. Ring: one ring through every rank, its channels spread over
      the rails, so each dimension carries the ring's traffic in proportion to the ring's edges on it.
      Tree family (Tree, NVLS-Tree, CollNet): a phase per dimension, pipelined in chunks, whose outermost
      phase is a tree or an in-network reduction (NCCL has no ring that reduces per dimension).
    - hierarchical: ASTRA-sim's multi-dimensional collectives. A phase per dimension (reduce-scatter up
      the dimensions, all-reduce on the outermost, all-gather down), each phase with its dimension's
      fastest algorithm, pipelined in chunks across dimensions.
    """

    NCCL = "nccl"
    HIERARCHICAL = "hierarchical"


class LibraryProfile(Spec):
    """A communication library (backend) on one dimension with its own calibrated figures: MCR-DL (Anthony et
    al., IPDPS'23) dispatches each call to the fastest library; the collective model does the same
    (`comm/libraries.py`). Fitted from nccl-tests or `armillary commbench --backends` logs of each library
    (`comm.libraries.fit_library`). Not to be confused with `CollectiveLibrary`, which says how collectives
    spanning several dimensions are composed."""

    name: str = Field(description="e.g. nccl, gloo, mpi, shm")
    latency: Seconds = Field(description="per-step latency (alpha) of this library on the dimension")
    efficiency: Fraction = Field(description="achievable fraction of the dimension's bandwidth, large messages")
    size_efficiency: EfficiencyCurve | None = Field(None, description="bandwidth multiplier vs message bytes")
    algorithms: tuple[Algorithm, ...] | None = Field(None, min_length=1,
                                                     description="what it runs (default: the dimension's)")
    ops: tuple[Collective, ...] | None = Field(
        None, description="the operations these figures are for (default: all); a library may be listed once "
        "per operation, as its implementations differ (e.g. gloo's all-gather vs its all-reduce)")
    sources: dict[str, str] = Field(default_factory=dict)


class NetworkDimension(Spec):
    """One dimension of the network as seen by one device: injection bandwidth, latency and efficiency.

    `bandwidth` is per device and per direction, over all of the device's links on this dimension (NVLink4:
    450 GB/s; one 400 Gb/s NIC per GPU: 50 GB/s; where NICs are shared, set `shared_by`; a torus of 50 GB/s
    links in 3 axes: 6 x 50 = 300 GB/s).
    """

    name: str
    kind: NetworkKind = NetworkKind.SWITCH
    size: PositiveInt = Field(1, description="positions along this dimension (devices per node for the "
                              "innermost; the outermost grows with the system)")
    bandwidth: BytesPerSecond
    latency: Seconds = Field(description="per-step (per hop) latency, alpha, of the Simple protocol")
    efficiency: Fraction = Field(description="achievable fraction of `bandwidth` for large messages")
    in_network_reduction: bool = Field(False, description="the switch reduces (NVLink SHARP, IB SHARP)")
    in_network_efficiency: Fraction = Field(
        0.6, description="achievable fraction of `bandwidth` for in-network-reduction collectives")
    tree_efficiency: Fraction | None = Field(
        None, description="achievable fraction of `bandwidth` for the (double binary) tree, where it differs "
        "from the ring's: NCCL's tree reaches less of its ideal rate than its ring (per-channel tree bandwidth "
        "cap, NCCL tuning.cc); fitted by `armillary calibrate-network` on a sweep that runs the tree (default: "
        "`efficiency`)")
    size_efficiency: EfficiencyCurve | None = Field(
        None, description="bandwidth multiplier vs message bytes (ramp-up of mid-size messages), fitted from "
        "nccl-tests sweeps by `armillary calibrate-network`")
    tree_size_efficiency: EfficiencyCurve | None = Field(
        None, description="the tree's own size-efficiency curve, where a sweep that ran the tree fitted it and "
        "a pinned-ring sweep fitted `size_efficiency` (NCCL corrects its model by message size for trees only: "
        "treeCorrectionFactor, tuning.cc); default: `size_efficiency`")
    channels: PositiveInt | None = Field(
        None, description="ring channels (one CTA each) NCCL runs by default for a ring that crosses this "
        "dimension: its ring search finds one per NIC, then doubles them (search.cc, connect.cc); e.g. 16 on an "
        "8-NIC H100 node. NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS raise it, NCCL_MAX_NCHANNELS / NCCL_MAX_CTAS "
        "lower it (comm/channels.py)")
    channel_bandwidth: BytesPerSecond | None = Field(
        None, description="what one ring channel moves across this dimension (Simple protocol; LL128 and LL "
        "take their protocol's share): a ring's bus bandwidth here is at most channels x channel_bandwidth. "
        "Calibrated on sweeps whose plateau sits below the NICs' rate (default: no per-channel limit)")
    protocol_latency: dict[str, Seconds] = Field(
        default_factory=dict, description="per-hop latency of a protocol (LL, LL128, Simple) where it is not "
        "NCCL's ratio to `latency` (tuning.cc hwLat: NVLink ring 0.6 / 1.9 / 3.4 us): a fit on a sweep that runs "
        "that protocol")
    ring_busbw: dict[str, BytesPerSecond] = Field(
        default_factory=dict, description="the most bus bandwidth a flat ring crossing this dimension reaches under "
        "a protocol (LL, LL128, Simple): NCCL caps LL at llMaxBws and LL128 at nChannels x perChMaxRingLL128Bws "
        "(tuning.cc); a fit on a sweep that runs that protocol")
    oversubscription: float = Field(1.0, ge=1.0, description="fat-tree: bandwidth above the leaves is divided")
    leaf_size: PositiveInt | None = Field(
        None, description="fat-tree: positions under one leaf switch; a group inside one leaf is not "
        "oversubscribed (default: none is, the whole dimension hangs off oversubscribed spines)")
    links: PositiveInt | None = Field(
        None, description="fully connected: direct links per device (devices - 1), sharing `bandwidth` evenly; "
        "a group of p ranks uses p - 1 of them")
    shared_by: PositiveInt = Field(
        1, description="devices sharing each link of `bandwidth` (e.g. 2 when 4 NICs serve 8 GPUs)")
    shape: tuple[PositiveInt, ...] | None = Field(None, description="torus / mesh axes, e.g. [4, 4, 4]")
    direct: DirectAllReduce = Field(
        DirectAllReduce.ONE_SHOT, description="the all-reduce `direct` runs here: one_shot (every buffer to "
        "every peer, reduced locally) or two_shot (reduce-scatter then all-gather, each to all peers at once: "
        "ASTRA-sim's direct)")
    algorithms: tuple[Algorithm, ...] = Field(
        NCCL_ALGORITHMS, min_length=1,
        description="algorithms the communication library offers on this dimension (auto picks)")
    protocols: tuple[str, ...] = Field(
        PROTOCOL_NAMES, min_length=1,
        description="protocols the communication library offers on this dimension (LL, LL128, Simple: NCCL's "
        "names), where a job's settings restrict them (NCCL_PROTO, read per communicator: NCCL src/graph/tuning.cc "
        "disables the others for every algorithm); a collective crossing the dimension, or a ring through it, "
        "runs one of these (default: all three)")
    libraries: tuple[LibraryProfile, ...] = Field(
        (), description="communication libraries with their own latency and efficiency: each call uses the "
        "fastest (none: the dimension's own figures)")
    component: str | None = Field(
        None, description="component class pricing this dimension's bandwidth ($ and W per GB/s per device) for "
        "network-optimize, one of presets/network/components.yaml (e.g. infiniband-ndr, libra-inner-link)")
    sources: dict[str, str] = Field(default_factory=dict)

    @field_validator("component")
    @classmethod
    def _known_component(cls, name: str | None) -> str | None:
        if name is not None:
            from armillary.specs.network_components import component_class

            component_class(name)  # raises, listing the known classes
        return name

    @model_validator(mode="before")
    @classmethod
    def _size_of_shape(cls, data: object) -> object:
        """A torus or mesh given by its shape has as many positions as the shape holds."""
        if isinstance(data, dict) and data.get("shape") and "size" not in data:
            return {**data, "size": math.prod(int(k) for k in data["shape"])}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> NetworkDimension:
        if self.shape is not None:
            if self.kind not in (NetworkKind.TORUS, NetworkKind.MESH):
                raise ValueError(f"shape is for kind torus or mesh, not {self.kind.value}")
            if math.prod(self.shape) != self.size:
                raise ValueError(f"shape {list(self.shape)} holds {math.prod(self.shape)} devices, size is {self.size}")
        if (self.channels is None) != (self.channel_bandwidth is None):
            raise ValueError("channels and channel_bandwidth go together: the per-channel limit needs both")
        unknown = [name for name in self.protocols if name not in PROTOCOL_NAMES]
        if unknown or len(set(self.protocols)) != len(self.protocols):
            raise ValueError(f"protocols {list(self.protocols)} of dimension {self.name!r}: each once, one of "
                             f"{', '.join(PROTOCOL_NAMES)} (NCCL's names)"
                             + (f"; unknown: {unknown}" if unknown else ""))
        for name in (*self.protocol_latency, *self.ring_busbw):
            if name not in PROTOCOL_NAMES:
                raise ValueError(f"protocol {name!r} in protocol_latency / ring_busbw: one of "
                                 f"{', '.join(PROTOCOL_NAMES)}")
        if self.in_network_reduction and self.kind not in SWITCHED:
            raise ValueError(f"in_network_reduction needs a switch; kind is {self.kind.value}")
        return self

    def sized(self, size: int) -> NetworkDimension:
        """This dimension with `size` positions; a torus or mesh keeps its shape only when full."""
        shape = self.shape if self.shape is not None and math.prod(self.shape) == size else None
        if self.shape is not None and shape is None and size > 1:
            raise ValueError(f"dimension {self.name!r} is a {'x'.join(map(str, self.shape))} {self.kind.value}: "
                             f"{size} positions would use part of it")
        return self.model_copy(update={"size": size, "shape": shape})
