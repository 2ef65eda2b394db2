"""All-to-all synthesis on the time-expanded network of `comm/synthesis.py`: every device sends a distinct
chunk to every other device, each chunk routed over shortest paths (in hops) by the same earliest-arrival
greedy link-chunk matching as the all-gather (TACOS, Won et al., MICRO'24, §IV-B, with one destination per
chunk instead of all).

At each event time the links whose transfer finished deliver their chunk (kept at its destination, or
queued at the node it reached); then every free link, in link order from a seeded random offset (earliest
arrival first where links differ), takes one chunk its source holds for which the link's destination is on
a shortest path to the chunk's destination: the one with the most hops left, the oldest on ties. A chunk is
never forwarded to a node off its shortest paths, and it moves (it is not copied), so it travels exactly
its hop distance.

Lower bounds (`bounds`; the schedule reports their maximum, latencies left out): the busiest node's
injection, (p - 1) chunks over its outgoing bandwidth, and reception, over its incoming bandwidth; the
link load, every chunk's hops times its bytes over all links' bandwidth together; and, where the graph
knows a bisection (`LinkGraph.cut`: meshes, tori, rings), the |A| |B| chunks that cross it each way over
the bandwidth of the links that cross it that way.
"""

from __future__ import annotations

import numba
import numpy as np

from armillary.comm.synthesis import LinkGraph, Schedule
from armillary.specs.communication import Collective


@numba.njit(cache=True)
def _bfs(nodes: int, out_start: np.ndarray, out_dst: np.ndarray) -> np.ndarray:
    distance = np.full((nodes, nodes), -1, np.int32)
    frontier = np.empty(nodes, np.int64)
    for s in range(nodes):
        distance[s, s], frontier[0], head, tail = 0, s, 0, 1
        while head < tail:
            u = frontier[head]
            head += 1
            for i in range(out_start[u], out_start[u + 1]):
                w = out_dst[i]
                if distance[s, w] < 0:
                    distance[s, w] = distance[s, u] + 1
                    frontier[tail] = w
                    tail += 1
    return distance


def hops(links: LinkGraph) -> np.ndarray:
    """Shortest-path hop counts over the directed links, hops[u, v] (-1: unreachable)."""
    order = np.argsort(links.src, kind="stable")
    out_start = np.concatenate([[0], np.cumsum(np.bincount(links.src, minlength=links.nodes))]).astype(np.int64)
    return _bfs(links.nodes, out_start, links.dst[order].astype(np.int64))


def bounds(links: LinkGraph, total_bytes: float, distance: np.ndarray | None = None) -> dict[str, float]:
    """The all-to-all lower bounds in seconds (module docstring); `total_bytes`: each device's buffer, a
    1/p share of it for every device."""
    p = links.nodes
    pair = total_bytes / p
    out_bw = np.bincount(links.src, weights=links.bandwidth, minlength=p)
    d = hops(links) if distance is None else distance
    out = {"injection": float((p - 1) * pair / out_bw.min()),
           "reception": float((p - 1) * pair / links.incoming_bandwidth().min()),
           "link load": float(np.clip(d, 0, None).sum() * pair / links.bandwidth.sum())}
    if links.cut is not None:
        a = links.cut
        crossing = float(a.sum() * (~a).sum() * pair)
        ab = links.bandwidth[a[links.src] & ~a[links.dst]].sum()
        ba = links.bandwidth[~a[links.src] & a[links.dst]].sum()
        out["bisection"] = crossing / min(ab, ba) if min(ab, ba) > 0 else float("inf")
    return out


@numba.njit(cache=True, inline="always")
def _append(head: np.ndarray, last: np.ndarray, nxt: np.ndarray, prv: np.ndarray, u: int, c: int) -> None:
    """Chunk c joins the end of node u's list (the lists are linked through nxt / prv)."""
    nxt[c], prv[c] = -1, last[u]
    if last[u] >= 0:
        nxt[last[u]] = c
    else:
        head[u] = c
    last[u] = c


@numba.njit(cache=True, inline="always")
def _unlink(head: np.ndarray, last: np.ndarray, nxt: np.ndarray, prv: np.ndarray, u: int, c: int) -> None:
    """Chunk c leaves node u's list."""
    if prv[c] >= 0:
        nxt[prv[c]] = nxt[c]
    else:
        head[u] = nxt[c]
    if nxt[c] >= 0:
        prv[nxt[c]] = prv[c]
    else:
        last[u] = prv[c]


@numba.njit(cache=True)
def greedy_all_to_all(nodes: int, src: np.ndarray, dst: np.ndarray, duration: np.ndarray, owner: np.ndarray,
                      target: np.ndarray, distance: np.ndarray, seed: int, transfers: int,
                      ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Chunks from `owner[c]` to `target[c]` over directed links (src, dst, duration per transfer);
    `distance[u, v]`: hops from u to v. Returns (time, busy seconds per link, the transfers' link, chunk,
    start, end, and the count of chunks left undelivered)."""
    np.random.seed(seed)
    chunks, links = owner.shape[0], src.shape[0]
    # the chunks at each node, oldest first: a list linked through nxt/prv (a chunk is at one node at a time)
    head, last = np.full(nodes, -1, np.int64), np.full(nodes, -1, np.int64)
    nxt, prv = np.full(chunks, -1, np.int64), np.full(chunks, -1, np.int64)
    busy, carrying = np.zeros(links, np.bool_), np.full(links, -1, np.int64)
    ends, busy_time = np.zeros(links), np.zeros(links)
    t_link, t_chunk = np.empty(transfers, np.int64), np.empty(transfers, np.int64)
    t_start, t_end = np.empty(transfers), np.empty(transfers)
    count, left = 0, chunks
    uniform = np.unique(duration).shape[0] == 1
    for c in range(chunks):
        _append(head, last, nxt, prv, owner[c], c)
    now = finish = 0.0
    while True:
        off = np.random.randint(links)
        order = np.concatenate((np.arange(off, links), np.arange(off)))
        if not uniform:  # earliest arrival first; the offset breaks ties
            order = order[np.argsort(duration[order], kind="mergesort")]
        for link in order:
            if busy[link]:
                continue
            u, v = src[link], dst[link]
            best, most, c = -1, -1, head[u]
            while c >= 0:  # the chunk with the most hops left of those v is on a shortest path for
                d = distance[u, target[c]]
                if d > most and distance[v, target[c]] == d - 1:
                    best, most = c, d
                c = nxt[c]
            if best < 0:
                continue
            _unlink(head, last, nxt, prv, u, best)
            busy[link], carrying[link] = True, best
            ends[link] = now + duration[link]
            busy_time[link] += duration[link]
            t_link[count], t_chunk[count], t_start[count], t_end[count] = link, best, now, ends[link]
            count += 1
        now = np.inf
        for k in range(links):
            if busy[k]:
                now = min(now, ends[k])
        if now == np.inf:
            break
        finish = now
        limit = now + 1e-12 * now
        for k in range(links):  # deliveries in link order
            if busy[k] and ends[k] <= limit:
                busy[k] = False
                c, v = carrying[k], dst[k]
                if target[c] == v:
                    left -= 1
                    continue
                _append(head, last, nxt, prv, v, c)
    return finish, busy_time, t_link[:count], t_chunk[:count], t_start[:count], t_end[:count], left


def synthesize_all_to_all(links: LinkGraph, total_bytes: float, chunks_per_pair: int = 1, seed: int = 0) -> Schedule:
    """All-to-all of `total_bytes` per device (a 1/p share for each device, in `chunks_per_pair` chunks)."""
    p = links.nodes
    source, dest = np.nonzero(~np.eye(p, dtype=bool))  # every (source, destination) pair, source-major
    owner, target = np.repeat(source, chunks_per_pair), np.repeat(dest, chunks_per_pair)
    chunk_bytes = total_bytes / (p * chunks_per_pair)
    distance = hops(links)
    bound = max(bounds(links, total_bytes, distance).values()) if p > 1 else 0.0
    if p == 1:
        empty = np.zeros(0, np.int64)
        return Schedule(Collective.ALL_TO_ALL, links, 0, chunk_bytes, owner, empty, empty, np.zeros(0), np.zeros(0),
                        0.0, bound, np.zeros(len(links.src)), seed, np.zeros(0, bool), target=target)
    # a transfer takes the link's latency plus the chunk at the link's bandwidth (alpha-beta, TACOS §IV-A)
    duration = (links.latency + chunk_bytes / links.bandwidth).astype(float)
    transfers = int(np.clip(distance[owner, target], 0, None).sum())
    time, busy, link, chunk, start, end, left = greedy_all_to_all(
        p, links.src.astype(np.int64), links.dst.astype(np.int64), duration, owner.astype(np.int64),
        target.astype(np.int64), distance, seed, transfers)
    if left:
        raise ValueError(f"the topology does not connect every device: {left} chunks undelivered")
    util = busy / time if time > 0 else np.zeros_like(busy)
    return Schedule(Collective.ALL_TO_ALL, links, len(owner), chunk_bytes, owner, link, chunk, start, end,
                    float(time), bound, util, seed, np.zeros(len(link), bool), target=target)
