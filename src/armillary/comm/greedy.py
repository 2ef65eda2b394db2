"""The kernel of collective synthesis: greedy link-chunk matching on a time-expanded network (TACOS, Won et
al., MICRO'24, §IV-B), compiled with numba.

At each event time the links whose transfer finished deliver their chunk; then every link that may carry
something (a link that just became free, or an idle link whose source just received a chunk) is matched to
one chunk its source holds and its destination neither holds nor awaits, links in order of earliest arrival
(latency + chunk / bandwidth). A destination never awaits the same chunk
twice, so no chunk arrives by two paths. Of the candidates a link looks at, it takes (seeded random among
equals) first a chunk no other in-neighbour of the destination holds and the source has not sent yet, then
one no other in-neighbour holds, then one at most one other holds, then any: chunks only this link can bring
go first, and a source spreads different chunks over its links. Links are visited in link order from a
seeded random offset (a node's links sit together, so the bitsets they read stay in cache).

What it costs follows the links actually free (the issue's "frontier"): each link keeps a queue of the
chunks its source received while its destination wanted them (pushed on arrival, dropped lazily once the
destination no longer wants them) and looks at the oldest few, instead of scanning the whole link matrix
per event as the reference does. A queue is a list of 16-entry contiguous blocks (taken or unwanted
entries become -1 and are trimmed off the head), and the wants bitset is chunk-major, so that the pushes
of one arrival to a node's neighbours touch few cache lines: the cost per transfer is memory latency.
Transfers in flight wait in one FIFO per distinct link duration (a link carries one at a time, and a
class's transfers end in the order they start), not in a heap. The kernel numbers links by source node
(`synthesis._all_gather` permutes them and maps the results back), so that a node's out-links and their
queue heads are neighbours in memory, and visits them in the caller's order (`rank`): the schedule is the
one the caller's numbering gives.
"""

from __future__ import annotations

import numba
import numpy as np

_ONE = np.uint64(1)


@numba.njit(cache=True, inline="always")
def _bit(bits: np.ndarray, v: int, c: int) -> bool:
    return (bits[v, c >> 6] >> np.uint64(c & 63)) & _ONE != 0


@numba.njit(cache=True, inline="always")
def _set(bits: np.ndarray, v: int, c: int) -> None:
    bits[v, c >> 6] |= _ONE << np.uint64(c & 63)


@numba.njit(cache=True, inline="always")
def _clear(bits: np.ndarray, v: int, c: int) -> None:
    bits[v, c >> 6] &= ~(_ONE << np.uint64(c & 63))


@numba.njit(cache=True)
def _rank(has: np.ndarray, sent: np.ndarray, u: int, v: int, c: int, in_start: np.ndarray,
          in_src: np.ndarray) -> int:
    """0: no other in-neighbour of v holds c and u has not sent it; 1: no other holds it; 2: one other; 3."""
    holders = 0
    for i in range(in_start[v], in_start[v + 1]):
        w = in_src[i]
        if w != u and _bit(has, w, c):
            holders += 1
            if holders >= 2:
                return 3
    if holders == 1:
        return 2
    return 1 if _bit(sent, u, c) else 0


_BLOCK = 16  # candidate chunks per block of a link's queue (one 64-byte cache line of int32)


@numba.njit(cache=True)
def _reserve(need: int, blk: np.ndarray, blk_next: np.ndarray, fl: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At least `need` blocks on the free list (fl: its head and length; linked through blk_next), doubling
    the pool as needed."""
    while fl[1] < need:
        n = blk_next.shape[0]
        blk2 = np.empty(2 * n * _BLOCK, np.int32)
        blk2[:n * _BLOCK] = blk
        next2 = np.empty(2 * n, np.int32)
        next2[:n] = blk_next
        next2[n:2 * n - 1] = np.arange(n + 1, 2 * n)
        next2[2 * n - 1] = fl[0]
        blk, blk_next = blk2, next2
        fl[0], fl[1] = n, fl[1] + n
    return blk, blk_next


@numba.njit(cache=True, inline="always")
def _push(link: int, c: int, blk: np.ndarray, blk_next: np.ndarray, q: np.ndarray, fl: np.ndarray) -> None:
    """Append chunk c to `link`'s queue: q[link] = (head block, head offset, tail block, tail offset), head
    block -1 when empty; a new block comes from the free list (`_reserve` made room)."""
    if q[link, 0] < 0 or q[link, 3] == _BLOCK:
        b = fl[0]
        fl[0], fl[1] = blk_next[b], fl[1] - 1
        if q[link, 0] < 0:
            q[link, 0], q[link, 1] = b, 0
        else:
            blk_next[q[link, 2]] = b
        q[link, 2], q[link, 3] = b, 0
    blk[q[link, 2] * _BLOCK + q[link, 3]] = c
    q[link, 3] += 1


@numba.njit(cache=True)
def _trim(link: int, blk: np.ndarray, blk_next: np.ndarray, q: np.ndarray, fl: np.ndarray) -> None:
    """Drop the taken or unwanted entries (-1) at the head of `link`'s queue, giving emptied blocks back to
    the free list."""
    while q[link, 0] >= 0:
        b, o = q[link, 0], q[link, 1]
        if b == q[link, 2] and o == q[link, 3]:
            blk_next[b], fl[0], fl[1] = fl[0], b, fl[1] + 1
            q[link, 0] = -1
        elif o == _BLOCK:
            q[link, 0], q[link, 1] = blk_next[b], 0
            blk_next[b], fl[0], fl[1] = fl[0], b, fl[1] + 1
        elif blk[b * _BLOCK + o] >= 0:
            break
        else:
            q[link, 1] = o + 1


@numba.njit(cache=True)
def greedy_all_gather(nodes: int, owner: np.ndarray, src: np.ndarray, dst: np.ndarray, duration: np.ndarray,
                      out_start: np.ndarray, rank: np.ndarray, in_start: np.ndarray,
                      in_src: np.ndarray, seed: int, record: bool, look: int,
                      ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """All-gather of chunks starting at `owner[c]` over directed links (src, dst, duration per transfer),
    numbered by source (node v's out-links are out_start[v]..out_start[v + 1]) and visited in the order
    `rank` (rank[r]: the r-th link from the event's random offset). A link compares its oldest `look`
    candidates. Returns (time, busy seconds per link, and when `record`,
    the transfers' link, chunk, start, end), and
    the count of (node, chunk) pairs left unserved (non-zero: the graph does not connect them)."""
    np.random.seed(seed)
    chunks, links = owner.shape[0], src.shape[0]
    words = (chunks + 63) // 64
    held = nodes if look > 1 else 1  # holdings are read only to rank several candidates
    has = np.zeros((held, words), np.uint64)
    # per chunk, the nodes that neither hold nor await it (chunk-major: a node's neighbours share words)
    want = np.full((chunks, (nodes + 63) // 64), ~np.uint64(0), np.uint64)
    sent = np.zeros((held, words), np.uint64)  # sent on some link
    # per link, a FIFO of candidate chunks in blocks of _BLOCK contiguous entries (one pool, free list)
    q = np.full((links, 4), -1, np.int32)
    nblocks = max(64, 2 * links)
    blk = np.empty(nblocks * _BLOCK, np.int32)
    blk_next = np.arange(1, nblocks + 1, dtype=np.int32)
    blk_next[-1] = -1
    fl = np.array([0, nblocks], np.int64)  # the free list's head and length
    degree = int(np.max(np.diff(out_start))) if nodes > 0 else 0
    missing = nodes * chunks
    # a transfer class per distinct duration: its in-flight links in FIFO order
    classes = np.unique(duration)
    klass = np.searchsorted(classes, duration)
    # (a ring of `links` places: a link is in flight at most once; wrapped by hand, as an integer modulo
    # per transfer costs more than the rest of its bookkeeping)
    fifo = np.empty((classes.shape[0], links), np.int64)
    fifo_head = np.zeros(classes.shape[0], np.int64)
    fifo_tail = np.zeros(classes.shape[0], np.int64)
    fifo_len = np.zeros(classes.shape[0], np.int64)
    ends = np.zeros(links)
    total = chunks * (nodes - 1) if record else 0
    t_link = np.empty(total, np.int32)
    t_chunk = np.empty(total, np.int32)
    t_start = np.empty(total, np.float64)
    t_end = np.empty(total, np.float64)
    count = 0
    busy = np.zeros(links, np.bool_)
    busy_time = np.zeros(links, np.float64)
    carrying = np.full(links, -1, np.int64)
    mark = np.zeros(links, np.bool_)
    cand = rank.copy()  # time 0: every link in the caller's order
    ncand = links
    uniform = classes.shape[0] == 1
    arrived = np.empty(links, np.int64)  # (node, chunk) arrivals of an event, as links
    for c in range(chunks):  # every owner holds its chunks at time 0
        u = owner[c]
        if look > 1:
            _set(has, u, c)
        _clear(want, c, u)
        missing -= 1
    blk, blk_next = _reserve(chunks * degree, blk, blk_next, fl)
    for c in range(chunks):
        u = owner[c]
        for out in range(out_start[u], out_start[u + 1]):
            if _bit(want, c, dst[out]):
                _push(out, c, blk, blk_next, q, fl)
    now = 0.0
    finish = 0.0
    while True:
        # this event's candidate links in link order from a seeded random offset (links of a node sit
        # together, so their bitsets stay in cache)
        if ncand > 0:
            off = np.random.randint(links)
            n2 = 0
            for r in range(off, links):
                l2 = rank[r]
                if mark[l2]:
                    cand[n2] = l2
                    n2 += 1
            for r in range(off):
                l2 = rank[r]
                if mark[l2]:
                    cand[n2] = l2
                    n2 += 1
        order = cand[:ncand].copy()
        if not uniform:  # earliest arrival first; the shuffle breaks ties
            order = order[np.argsort(duration[order], kind="mergesort")]
        for link in order:
            mark[link] = False
            if busy[link]:
                continue
            u, v = src[link], dst[link]
            # look at the oldest `look` wanted candidates, dropping (-1) those v no longer wants
            b, o, seen = q[link, 0], q[link, 1], 0
            best, best_rank, ties = -1, 4, 0
            while b >= 0 and seen < look and not (b == q[link, 2] and o == q[link, 3]):
                if o == _BLOCK:
                    b, o = blk_next[b], 0
                    continue
                pos = b * _BLOCK + o
                o += 1
                c = blk[pos]
                if c < 0:
                    continue
                if not _bit(want, c, v):
                    blk[pos] = -1
                    continue
                seen += 1
                r = _rank(has, sent, u, v, c, in_start, in_src) if look > 1 else 0
                if r < best_rank:
                    best, best_rank, ties = pos, r, 1
                elif r == best_rank:
                    ties += 1
                    if np.random.randint(ties) == 0:
                        best = pos
                if r == 0:
                    break
            if best >= 0:
                c = blk[best]
                blk[best] = -1
            _trim(link, blk, blk_next, q, fl)
            if best < 0:
                continue
            _clear(want, c, v)
            if look > 1:  # holdings are read only to rank candidates
                _set(sent, u, c)
            busy[link] = True
            carrying[link] = c
            end = now + duration[link]
            ends[link] = end
            busy_time[link] += duration[link]
            k = klass[link]
            fifo[k, fifo_tail[k]] = link
            fifo_tail[k] = fifo_tail[k] + 1 if fifo_tail[k] + 1 < links else 0
            fifo_len[k] += 1
            if record:
                t_link[count], t_chunk[count], t_start[count], t_end[count] = link, c, now, end
                count += 1
        ncand = 0
        now = np.inf
        for k in range(classes.shape[0]):
            if fifo_len[k] > 0:
                now = min(now, ends[fifo[k, fifo_head[k]]])
        if now == np.inf:
            break
        finish = now
        limit = now + 1e-12 * now
        narrived = 0
        for k in range(classes.shape[0]):
            while fifo_len[k] > 0 and ends[fifo[k, fifo_head[k]]] <= limit:
                link = fifo[k, fifo_head[k]]
                fifo_head[k] = fifo_head[k] + 1 if fifo_head[k] + 1 < links else 0
                fifo_len[k] -= 1
                if look > 1:
                    _set(has, dst[link], carrying[link])
                missing -= 1
                busy[link] = False
                arrived[narrived] = link
                narrived += 1
                if not mark[link]:
                    mark[link] = True
                    cand[ncand] = link
                    ncand += 1
        blk, blk_next = _reserve(narrived * degree, blk, blk_next, fl)
        for a in range(narrived):
            v, c = dst[arrived[a]], carrying[arrived[a]]
            for out in range(out_start[v], out_start[v + 1]):
                if _bit(want, c, dst[out]):  # a new candidate of v's out-link
                    _push(out, c, blk, blk_next, q, fl)
                    if not busy[out] and not mark[out]:
                        mark[out] = True
                        cand[ncand] = out
                        ncand += 1
    return finish, busy_time, t_link[:count], t_chunk[:count], t_start[:count], t_end[:count], missing
