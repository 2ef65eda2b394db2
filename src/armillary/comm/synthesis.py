"""Topology-aware collective synthesis (the role of TACOS, Won et al., MICRO'24): a schedule of chunk
transfers, link by link, for all-gather, reduce-scatter and all-reduce on any topology.

- all-gather: greedy link-chunk matching on the time-expanded network (`comm/greedy.py`).
- reduce-scatter: the time-reversed all-gather on the reversed links (TACOS §IV-D): where the all-gather
  sends chunk c from u to v at [s, e], the reduce-scatter sends v's partial sum of c to u at [T - e, T - s],
  each transfer also paying the reduction of the chunk it receives.
- all-reduce: reduce-scatter, then all-gather.
- all-to-all: one chunk per (source, destination) routed over shortest paths by the same greedy
  (`comm/all_to_all.py`, with its own lower bounds).

The lower bound is set by the busiest node's incoming links (TACOS §III): the bytes a node must receive
over the sum of its incoming bandwidths, maximised over nodes (latencies left out).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import networkx as nx
import numpy as np

from armillary.arguments import number, whole
from armillary.comm.greedy import greedy_all_gather
from armillary.errors import SpecError
from armillary.specs.communication import Collective

SYNTHESIZED_OPS = (Collective.ALL_GATHER, Collective.REDUCE_SCATTER, Collective.ALL_REDUCE, Collective.ALL_TO_ALL)
# bytes moved through HBM per byte reduced: read two operands, write one (comm/algorithms.py)
REDUCE_TRAFFIC = 3.0
# candidates a link compares (by how many other in-neighbours of the destination hold them) before it takes
# the best: four find the published optima of small tori (4x4: 5002 us, 4x4x4: 3443 us; one does not); beyond
# LOOK_NODES devices the oldest candidate alone reaches the bound's round count at half the cost (32x32, 48x48)
LOOK, LOOK_NODES = 4, 1024


@dataclass(frozen=True)
class LinkGraph:
    """Directed point-to-point links between `nodes` devices: bandwidth (bytes/s) and latency (s) each;
    `cut`, where known (meshes, tori, rings), a bisection of the devices (True: one half)."""

    nodes: int
    src: np.ndarray
    dst: np.ndarray
    bandwidth: np.ndarray
    latency: np.ndarray
    names: tuple[str, ...] = ()
    cut: np.ndarray | None = None

    def reversed(self) -> LinkGraph:
        return LinkGraph(self.nodes, self.dst, self.src, self.bandwidth, self.latency, self.names, self.cut)

    def incoming_bandwidth(self) -> np.ndarray:
        return np.bincount(self.dst, weights=self.bandwidth, minlength=self.nodes)


def grid(shape: tuple[int, ...], periodic: bool, bandwidth: float, latency: float) -> LinkGraph:
    """A mesh (or torus, `periodic`) of `shape`, every link `bandwidth` bytes/s per direction."""
    g = nx.grid_graph(dim=list(shape), periodic=periodic)
    coords = np.array(sorted(g.nodes, key=str)).reshape(g.number_of_nodes(), -1)  # from_graph's device order
    extent = coords.max(axis=0) + 1
    axis = int(np.argmax(extent))  # the bisection across the longest dimension
    links = from_graph(g, bandwidth=bandwidth, latency=latency)
    return dataclasses.replace(links, cut=coords[:, axis] < extent[axis] / 2)


def ring(n: int, bandwidth: float, latency: float) -> LinkGraph:
    """A bidirectional ring of n devices."""
    links = from_graph(nx.cycle_graph(n), bandwidth=bandwidth, latency=latency)
    return dataclasses.replace(links, cut=np.array([int(name) < n / 2 for name in links.names]))


def from_graph(g: nx.Graph, bandwidth: float | None = None, latency: float | None = None) -> LinkGraph:
    """The directed links of a topology graph (`comm.topology.topology_graph`, or any networkx graph whose
    edges carry `bandwidth` and `latency`, or take the defaults given). Switches (nodes with kind "switch")
    are unwound into direct links between the devices they join (`_unwind`)."""
    devices = sorted((n for n, d in g.nodes(data=True) if d.get("kind", "device") != "switch"), key=str)
    index = {n: i for i, n in enumerate(devices)}
    src: list[int] = []
    dst: list[int] = []
    bws: list[float] = []
    lats: list[float] = []

    def add(a: int, b: int, bw: float, lat: float) -> None:
        src.extend((a, b))
        dst.extend((b, a))
        bws.extend((bw, bw))
        lats.extend((lat, lat))

    for a, b, data in g.edges(data=True):
        if a in index and b in index and a != b:  # a loop (the wrap-around of a torus axis of one) moves nothing
            add(index[a], index[b], float(data.get("bandwidth", bandwidth)), float(data.get("latency", latency)))
    for a, b, bw, lat in _unwind(g, index):
        add(a, b, bw, lat)
    return LinkGraph(len(devices), np.asarray(src, np.int64), np.asarray(dst, np.int64), np.asarray(bws, float),
                     np.asarray(lats, float), tuple(str(n) for n in devices))


def _unwind(g: nx.Graph, index: dict[object, int]) -> list[tuple[int, int, float, float]]:
    """Direct links (device, device, bandwidth, latency) for the devices hanging off each switched network
    (switches joined to one another: one switch, or leaves and spines of a fat-tree), as TACOS unwinds a
    switch into point-to-point links: between every two of its n devices one link per direction, latency the
    sum of the hops of the switch path between them (the fewest switches), bandwidth each physical link's
    share over the device pairs routed through it: a device's port over its n - 1 peers, and a link between
    switches over the pairs whose path crosses it (|devices below one end| x |below the other|, so a leaf's
    oversubscribed uplink is divided among its devices' remote peers); the smallest share on the path. A
    static split: the links a schedule leaves idle do not lend their share (as on one switch)."""
    switches = [n for n, d in g.nodes(data=True) if d.get("kind") == "switch"]
    fabric = g.subgraph(switches)
    out: list[tuple[int, int, float, float]] = []
    seen: set[object] = set()
    for s in switches:
        if s in seen:
            continue
        component = nx.node_connected_component(fabric, s)
        part = [n for n in switches if n in component]  # in the graph's order
        seen.update(part)
        ports = [(n, w) for w in part for n in g.neighbors(w) if n in index]  # (device, its switch)
        if len({n for n, _ in ports}) < len(ports):
            raise ValueError(f"a device hangs off two switches of the switched network of {s!r}: not unwound")
        n = len(ports)
        below = {w: sum(1 for _, x in ports if x == w) for w in part}
        path = dict(nx.all_pairs_shortest_path(fabric.subgraph(part)))
        uses: dict[tuple[object, object], int] = {}
        for w in part:
            for x in part:
                for hop in zip(path[w][x], path[w][x][1:], strict=False):
                    uses[hop] = uses.get(hop, 0) + below[w] * below[x]
        share, hops = {}, {}
        for w in part:
            for x in part:
                edges = list(zip(path[w][x], path[w][x][1:], strict=False))
                share[w, x] = min((float(g.edges[e]["bandwidth"]) / uses[e] for e in edges), default=math.inf)
                hops[w, x] = sum(float(g.edges[e]["latency"]) for e in edges)
        for i, (a, w) in enumerate(ports):
            for b, x in ports[i + 1:]:
                port = min(float(g.edges[w, a]["bandwidth"]), float(g.edges[x, b]["bandwidth"])) / (n - 1)
                out.append((index[a], index[b], min(port, share[w, x]),
                            float(g.edges[w, a]["latency"]) + hops[w, x] + float(g.edges[x, b]["latency"])))
    return out


@dataclass(frozen=True)
class Schedule:
    """A synthesized collective: transfers (link index, chunk, start, end; ordered by start), its time, the
    busiest-node lower bound and each link's utilization (busy time / collective time)."""

    op: Collective
    links: LinkGraph
    chunks: int
    chunk_bytes: float
    owner: np.ndarray  # node where each chunk starts (all-gather) or ends (reduce-scatter)
    link: np.ndarray
    chunk: np.ndarray
    start: np.ndarray
    end: np.ndarray
    time: float
    bound: float
    utilization: np.ndarray
    seed: int
    reducing: np.ndarray  # per transfer: whether it carries a partial sum the receiver reduces
    reduce_s: float = 0.0  # seconds to reduce one received chunk
    target: np.ndarray | None = None  # all-to-all: the node each chunk goes to
    batch: int = 1  # most chunks per transfer: chunks of one transfer share its link, start and end

    @property
    def src(self) -> np.ndarray:
        return self.links.src[self.link]

    @property
    def dst(self) -> np.ndarray:
        return self.links.dst[self.link]


def lower_bound(op: Collective, links: LinkGraph, total_bytes: float) -> float:
    """max over nodes of bytes received / incoming bandwidth (TACOS §III); an all-reduce moves twice the
    (p - 1)/p of its buffer. `total_bytes`: the all-gather's output, the reduce-scatter's input, the
    all-reduce's buffer."""
    p = links.nodes
    factor = 2.0 if op is Collective.ALL_REDUCE else 1.0
    return float(factor * (p - 1) / p * total_bytes / links.incoming_bandwidth().min())


MAX_TRANSFERS = 2**24  # transfers of one recorded synthesis: about 2 GB and 10 s (a 64 x 64 torus all-gather)
# unrecorded (record=False: the time and link use only): the log of nodes x chunks, 512 MB and about 35 s of
# CPU for a 128 x 128 torus all-gather (16,384 x 16,383 transfers, within 2**28)
MAX_UNRECORDED = 2**28
MAX_SEEDS = 1000
MAX_WORK = 2**28  # transfers over all seeds: one 16,384-NPU synthesis, about a minute of CPU
MAX_BATCH = 64


def check_synthesis(op: Collective, devices: int, total_bytes: float, chunks_per_npu: int = 1,
                    seeds: int = 1, batch: int = 1, record: bool = True) -> None:
    """The options of a synthesis, checked before any topology is built: a known collective over 2 or more
    devices, a finite size >= 0, 1 or more chunks and seeds, 1 to `MAX_BATCH` chunks per transfer, and at
    most `MAX_TRANSFERS` transfers per recorded synthesis (`MAX_UNRECORDED` unrecorded; devices x (devices -
    1) x chunks, twice for an all-reduce) and `MAX_WORK` over all seeds. Else a `SpecError` naming the option."""
    if op not in SYNTHESIZED_OPS:
        raise SpecError(f"op {op.value!r}: synthesis supports {', '.join(o.value for o in SYNTHESIZED_OPS)}")
    whole("devices (synthesis needs two or more)", devices, 2)
    number("size (bytes)", total_bytes)
    whole("chunks (per device)", chunks_per_npu, 1)
    whole("seeds", seeds, 1, MAX_SEEDS)
    whole("batch (chunks per transfer)", batch, 1, MAX_BATCH)
    if op is Collective.ALL_TO_ALL and batch != 1:
        raise SpecError("batch (chunks per transfer): all_to_all synthesis moves one chunk per transfer (batch 1)")
    transfers = (2 if op is Collective.ALL_REDUCE else 1) * devices * (devices - 1) * chunks_per_npu
    most = MAX_TRANSFERS if record else MAX_UNRECORDED
    if transfers > most or transfers * seeds > MAX_WORK:
        raise SpecError(f"devices x (devices - 1) x chunks = {transfers:.3g} transfers x {seeds} seeds: at most "
                        f"{most:,} transfers per {'recorded ' if record else ''}synthesis and {MAX_WORK:,} over all "
                        "seeds (fewer devices, chunks or seeds)")


def synthesize(op: Collective, links: LinkGraph, total_bytes: float, chunks_per_npu: int = 1, seed: int = 0,
               reduce_bytes_per_s: float = math.inf, record: bool = True, batch: int = 1) -> Schedule:
    """Synthesize `op` over `links` for a buffer of `total_bytes` (as in `lower_bound`; all-to-all: each
    device's buffer, `chunks_per_npu` chunks for each other device). `batch` > 1: a link may carry up to that
    many chunks in one transfer, paying its latency once (`comm/greedy.py`); 1 is TACOS's one chunk per
    link and step."""
    check_synthesis(op, links.nodes, total_bytes, chunks_per_npu, 1, batch, record)
    if op is Collective.ALL_TO_ALL:
        from armillary.comm.all_to_all import synthesize_all_to_all  # it builds on this module's types

        return synthesize_all_to_all(links, total_bytes, chunks_per_npu, seed)
    chunk_bytes = total_bytes / (links.nodes * chunks_per_npu)
    owner = np.repeat(np.arange(links.nodes), chunks_per_npu)
    if op is Collective.ALL_GATHER:
        return _all_gather(op, links, owner, chunk_bytes, 0.0, seed, record, total_bytes, batch)
    reduce_s = chunk_bytes * REDUCE_TRAFFIC / reduce_bytes_per_s
    rs = _reduce_scatter(links, owner, chunk_bytes, reduce_s, seed, record, total_bytes, batch)
    if op is Collective.REDUCE_SCATTER:
        return rs
    ag = _all_gather(Collective.ALL_GATHER, links, owner, chunk_bytes, 0.0, seed, record, total_bytes, batch)
    time = rs.time + ag.time
    util = (rs.utilization * rs.time + ag.utilization * ag.time) / time if time > 0 else rs.utilization
    return Schedule(op, links, rs.chunks, chunk_bytes, owner, np.concatenate([rs.link, ag.link]),
                    np.concatenate([rs.chunk, ag.chunk]), np.concatenate([rs.start, ag.start + rs.time]),
                    np.concatenate([rs.end, ag.end + rs.time]), time, lower_bound(op, links, total_bytes),
                    util, seed, np.concatenate([rs.reducing, ag.reducing]), reduce_s, batch=batch)


def synthesize_best(op: Collective, links: LinkGraph, total_bytes: float, chunks_per_npu: int = 1,
                    seeds: int = 8, reduce_bytes_per_s: float = math.inf, record: bool = True,
                    batch: int = 1) -> Schedule:
    """The fastest of `seeds` seeded syntheses (the first on ties)."""
    check_synthesis(op, links.nodes, total_bytes, chunks_per_npu, seeds, batch, record)
    best: Schedule | None = None
    for seed in range(seeds):
        s = synthesize(op, links, total_bytes, chunks_per_npu, seed, reduce_bytes_per_s, record, batch)
        if best is None or s.time < best.time:
            best = s
    assert best is not None
    return best


def _csr(ends: np.ndarray, nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The links at every node (`ends`: their sources or destinations): links[start[v]:start[v + 1]]."""
    order = np.argsort(ends, kind="stable")
    counts = np.bincount(ends, minlength=nodes)
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), order.astype(np.int64)


def _all_gather(op: Collective, links: LinkGraph, owner: np.ndarray, chunk_bytes: float, extra_s: float,
                seed: int, record: bool, total_bytes: float, batch: int = 1) -> Schedule:
    # a transfer takes the link's latency plus its chunks at the link's bandwidth (alpha-beta, TACOS §IV-A)
    per_chunk = chunk_bytes / links.bandwidth + extra_s
    duration = links.latency + per_chunk
    out_start, by_source = _csr(links.src, links.nodes)  # the kernel numbers links by source: by_source[k]
    rank = np.empty_like(by_source)
    rank[by_source] = np.arange(len(by_source))  # the kernel's number of each link
    in_start, in_links = _csr(links.dst, links.nodes)
    if batch == 1:  # the kernel's transfer classes: links of one duration (and added time per chunk)
        klass = np.unique(duration, return_inverse=True)[1]
    else:
        klass = np.unique(np.stack([duration, per_chunk], axis=1), axis=0, return_inverse=True)[1]
    time, used, k_link, chunk, start, end, missing = greedy_all_gather(
        links.nodes, owner.astype(np.int64), links.src[by_source], links.dst[by_source],
        duration[by_source].astype(float), per_chunk[by_source].astype(float),
        np.ravel(klass)[by_source].astype(np.int64), out_start, rank, in_start, links.src[in_links], seed, record,
        LOOK if links.nodes <= LOOK_NODES else 1, batch,
        np.empty((links.nodes, len(owner)), np.uint16 if len(owner) <= np.iinfo(np.uint16).max else np.int32))
    busy = np.empty_like(used)
    busy[by_source] = used
    link = by_source[k_link]
    if missing:
        raise ValueError(f"the topology does not connect every device: {missing} (device, chunk) pairs unserved")
    util = busy / time if time > 0 else np.zeros_like(busy)
    return Schedule(op, links, owner.shape[0], chunk_bytes, owner, link.astype(np.int64), chunk.astype(np.int64),
                    start, end, float(time), lower_bound(op, links, total_bytes), util, seed,
                    np.zeros(len(link), bool), batch=batch)


def _reduce_scatter(links: LinkGraph, owner: np.ndarray, chunk_bytes: float, reduce_s: float, seed: int,
                    record: bool, total_bytes: float, batch: int) -> Schedule:
    """The all-gather on the reversed links, run backwards in time."""
    ag = _all_gather(Collective.ALL_GATHER, links.reversed(), owner, chunk_bytes, reduce_s, seed, record,
                     total_bytes, batch)
    order = np.argsort(ag.time - ag.end, kind="stable")
    return Schedule(Collective.REDUCE_SCATTER, links, ag.chunks, chunk_bytes, owner, ag.link[order],
                    ag.chunk[order], (ag.time - ag.end)[order], (ag.time - ag.start)[order], ag.time,
                    lower_bound(Collective.REDUCE_SCATTER, links, total_bytes), ag.utilization, seed,
                    np.ones(len(order), bool), reduce_s, batch=batch)
