"""Which links each transfer of a task graph occupies, with its load on each and each link's capacity: the
flat arrays the event engine (`engine.py`) shares max-min among the flows in flight."""

from __future__ import annotations

import itertools

import numpy as np

from armillary.simulate.graph import Stream, TaskGraph, TaskKind, Tier


def row_starts(counts: np.ndarray) -> np.ndarray:
    """Where each row starts in compressed rows of these lengths, and where the last ends."""
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    return starts


def shared_links(graph: TaskGraph, duration: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                   np.ndarray]:
    """Per task, the links it may share with another transfer in flight, as compressed rows of dense link
    numbers with the load it puts on each at full rate; and each link's capacity. A rank's link (one per
    rank, tier and direction: full duplex; load and capacity 1) that only tasks of one stream use is left
    out: they all occupy that stream on the link's rank, so they never overlap on it (e.g. a TP group's
    collectives on its scale-up links). The graph's routed links (`TaskGraph.routes`: switch uplinks) come
    after them. A task left with none runs as plain time."""
    cols = graph.columns
    n = len(cols)
    tier = cols.array("tier").astype(np.int64)
    transfers = np.flatnonzero((tier >= 0) & (duration > 0)).tolist()  # transfers that take time
    rank_rows = cols.array("ranks_first")
    chosen = np.asarray(transfers, dtype=np.int64)
    starts, ends = rank_rows[chosen], rank_rows[chosen + 1]
    lengths = ends - starts  # the transfers' rows of ranks, gathered and cut again
    gathered = iter(cols.array("ranks")[np.repeat(starts - row_starts(lengths)[:-1], lengths)
                                        + np.arange(int(lengths.sum()))].tolist())
    keys = list(zip((tuple(itertools.islice(gathered, k)) for k in lengths.tolist()),
                    map(Tier, tier[chosen].tolist()), map(TaskKind, cols.array("kind")[chosen].tolist()),
                    (None if s < 0 else Stream(s) for s in cols.array("stream")[chosen].tolist()), strict=True))
    mixed = -2
    owner: dict[tuple[int, Tier, int], int] = {}  # link -> the one stream using it, or mixed (several, or sends)
    every: dict[tuple[tuple[int, ...], Tier, TaskKind, Stream | None], tuple[tuple[int, Tier, int], ...]] = {}
    for key in dict.fromkeys(keys):
        ranks, on_tier, kind, on = key
        send = kind is TaskKind.SEND
        stream = -1 if send or on is None else int(on)
        every[key] = ((ranks[0], on_tier, 0), (ranks[-1], on_tier, 1)) if send else tuple(
            (r, on_tier, d) for r in ranks for d in (0, 1))
        for link in every[key]:
            owner[link] = stream if owner.get(link, stream) == stream and stream >= 0 else mixed
    number: dict[tuple[int, Tier, int], int] = {}
    shared = {key: tuple(number.setdefault(link, len(number)) for link in links if owner[link] == mixed)
              for key, links in every.items()}
    per_transfer = list(map(shared.__getitem__, keys))
    counts = np.zeros(n, dtype=np.int64)
    counts[transfers] = np.fromiter(map(len, per_transfer), dtype=np.int64, count=len(transfers))
    first = row_starts(counts)
    flat = np.fromiter(itertools.chain.from_iterable(per_transfer), dtype=np.int64, count=int(first[-1]))
    routes = graph.routes
    if routes is None:
        return first, flat, np.ones(len(flat)), np.ones(len(number))
    # merge each task's row with its routed links (numbered after the rank links)
    taking = duration > 0
    routed = np.where(taking, np.diff(routes.first), 0)
    merged = row_starts(counts + routed)
    links, weight = np.empty(int(merged[-1]), dtype=np.int64), np.ones(int(merged[-1]))
    own = np.repeat(merged[:-1], counts) + (np.arange(len(flat)) - np.repeat(first[:-1], counts))
    links[own] = flat
    keep = np.repeat(taking, np.diff(routes.first))
    at = np.repeat(merged[:-1] + counts, routed) + (np.arange(int(routed.sum())) - np.repeat(
        row_starts(routed)[:-1], routed))
    links[at] = routes.link[keep] + len(number)
    weight[at] = routes.load[keep]
    return merged, links, weight, np.concatenate([np.ones(len(number)), routes.capacity])
