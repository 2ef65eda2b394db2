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

What it costs follows the links actually free (the issue's "frontier"), instead of scanning the whole link
matrix per event as the reference does. A link's candidates are the chunks its source received, in arrival
order, that its destination still wants; since a destination's wants only shrink, that is the source's
arrival log filtered when read. So each node keeps one append-only log (`log`, nodes x chunks, as small an
integer type as holds a chunk) and each link a cursor before which its destination wants nothing: an
arrival is one append (not a push to every out-link's queue), and a link reads its source's log forward
from its cursor, checking each entry against the destination's row of the node-major wants bitset. Every
log entry is read at most once per out-link that passes it, and the reads are sequential. The wants
lookups are random (a table of nodes x chunks bits, 32 MB at 16,384 NPUs); the links visited next have
their first lookup prefetched (`_prefetch`), so their cache misses overlap (~20% less CPU at 16,384 NPUs).
Transfers in flight wait in one FIFO per distinct link duration (a link carries one at a time, and a
class's transfers end in the order they start), not in a heap. The kernel numbers links by source node
(`synthesis._all_gather` permutes them and maps the results back), so that a node's out-links are
neighbours in memory, and visits them in the caller's order (`rank`): the schedule is the one the caller's
numbering gives (and the same as the per-link queues of earlier versions gave: the pinned digests). An event
is the matching of its candidate links (`_match`) and then the arrivals that make the next event's (`_arrive`).

Several chunks per transfer (`batch` > 1, beyond TACOS): with one chunk per transfer every transfer pays the
link's latency, and at 16,384 NPUs (64 KiB chunks at 50 GiB/s, 0.5 us links) that is 29% of the time even
though the rounds are optimal (4,097 of the busiest device's 4,096). A link that takes a chunk then takes
the next oldest its destination wants, up to `batch`, in one transfer of latency + m chunks (the alpha-beta
model of TACOS §IV-A with an m-chunk message), but no more than the destination's remaining wants over its
in-links, so that near the end every link carries one. Transfers in flight wait in one FIFO per (duration
class, chunks carried).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils
from numba.extending import intrinsic

_ONE = np.uint64(1)
_AHEAD = 8  # links ahead whose wants word is prefetched (and twice as far, their log entry)


def _prefetch_typing(typingctx: Any, arr: Any, i: Any, j: Any) -> Any:
    """Hint the cache to load arr[i, j] (LLVM's prefetch: read, high locality, data): the wants lookups of the
    links visited next are random in a table of nodes x chunks bits, so their misses overlap this link's work."""
    sig = numba.types.void(arr, i, j)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]], wraparound=False)
        i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


_prefetch = cast(Callable[[np.ndarray, Any, Any], None], intrinsic(_prefetch_typing))


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


@numba.njit(cache=True)
def _visit_order(rank: np.ndarray, mark: np.ndarray, cand: np.ndarray, off: int) -> None:
    """The marked links into `cand`, in the caller's order `rank` from offset `off` round (links of a node
    sit together, so their bitsets stay in cache)."""
    n = 0
    for r in range(off, rank.shape[0]):
        if mark[rank[r]]:
            cand[n] = rank[r]
            n += 1
    for r in range(off):
        if mark[rank[r]]:
            cand[n] = rank[r]
            n += 1


@numba.njit(cache=True, inline="always")
def _send(link: int, m: int, batch: int, now: float, timing: np.ndarray, klass: np.ndarray, ends: np.ndarray,
          busy: np.ndarray, busy_time: np.ndarray, fifo: np.ndarray, fifo_tail: np.ndarray,
          fifo_len: np.ndarray) -> float:
    """Start the link's transfer of m chunks at `now` (timing[0]: a one-chunk transfer's duration, timing[1]:
    what each further chunk adds), queued in the FIFO of its duration class and chunk count; returns its end."""
    busy[link] = True
    took = timing[0, link] + (m - 1) * timing[1, link]
    end = now + took
    ends[link] = end
    busy_time[link] += took
    k = klass[link] * batch + m - 1  # transfers of one duration end in the order they start
    fifo[k, fifo_tail[k]] = link
    fifo_tail[k] = fifo_tail[k] + 1 if fifo_tail[k] + 1 < fifo.shape[1] else 0
    fifo_len[k] += 1
    return end


@numba.njit(cache=True, inline="always")
def _match(order: np.ndarray, now: float, src: np.ndarray, dst: np.ndarray, timing: np.ndarray,
           klass: np.ndarray, in_start: np.ndarray, in_src: np.ndarray, look: int, log: np.ndarray,
           tail: np.ndarray, cursor: np.ndarray, want: np.ndarray, has: np.ndarray, sent: np.ndarray,
           mark: np.ndarray, busy: np.ndarray, carrying: np.ndarray, ncarry: np.ndarray, left: np.ndarray,
           ends: np.ndarray, busy_time: np.ndarray, fifo: np.ndarray, fifo_tail: np.ndarray,
           fifo_len: np.ndarray, record: bool, t_link: np.ndarray, t_chunk: np.ndarray, t_when: np.ndarray,
           count: int) -> int:
    """One event's matching: each free link of `order` (in visit order) starts sending the best of its oldest
    `look` candidates, if it has one, and where `carrying` has room for more, the oldest others its
    destination wants in the same transfer (`_send` starts it); returns the count of chunk transfers recorded
    so far. (Inlined: called, it ran the 64x64 mesh up to 10% slower, though the 32x32 18% faster; the same
    schedules either way. The choice of a chunk and of the chunks riding along stay written out here: as
    helpers, inlined or called, they ran the 64x64 mesh 2.3x to 4.7x slower, numba counting references to
    the arrays passed to them.)"""
    batch = carrying.shape[1]
    for j in range(order.shape[0]):
        link = order[j]
        if j + 2 * _AHEAD < order.shape[0]:  # what the links ahead will read first
            ahead = order[j + 2 * _AHEAD]
            _prefetch(log, src[ahead], cursor[ahead])
        if j + _AHEAD < order.shape[0]:
            ahead = order[j + _AHEAD]
            if cursor[ahead] < tail[src[ahead]]:
                _prefetch(want, dst[ahead], log[src[ahead], cursor[ahead]] >> 6)
        mark[link] = False
        if busy[link]:
            continue
        u, v = src[link], dst[link]
        # the oldest `look` chunks of u's log that v wants, skipping past those at the head it does not
        i, seen, first = cursor[link], 0, -1
        best, best_rank, ties = -1, 4, 0
        while i < tail[u] and seen < look:
            c = log[u, i]
            i += 1
            if not _bit(want, v, c):
                continue
            if seen == 0:
                first = i - 1
            seen += 1
            r = _rank(has, sent, u, v, c, in_start, in_src) if look > 1 else 0
            if r < best_rank:
                best, best_rank, ties = i - 1, r, 1
            elif r == best_rank:
                ties += 1
                if np.random.randint(ties) == 0:
                    best = i - 1
            if r == 0:
                break
        if first < 0:
            cursor[link] = i
        else:
            cursor[link] = first + 1 if best == first else first
        if best < 0:
            continue
        c = log[u, best]
        _clear(want, v, c)
        if look > 1:  # holdings are read only to rank candidates
            _set(sent, u, c)
        carrying[link, 0] = c
        m = 1
        if batch > 1:
            i = cursor[link]
            left[v] -= 1
            # no more than v's share of what it still wants per in-link: at the end, one chunk per link
            most = min(batch, max(1, (left[v] + 1) // (in_start[v + 1] - in_start[v])))
            while m < most and i < tail[u]:  # the oldest others v wants ride along (latency paid once)
                c = log[u, i]
                i += 1
                if _bit(want, v, c):
                    _clear(want, v, c)
                    if look > 1:
                        _set(sent, u, c)
                    carrying[link, m] = c
                    m += 1
                    left[v] -= 1
        ncarry[link] = m
        end = _send(link, m, batch, now, timing, klass, ends, busy, busy_time, fifo, fifo_tail, fifo_len)
        if record:
            for n in range(m):
                t_link[count], t_chunk[count], t_when[0, count], t_when[1, count] = link, carrying[link, n], now, end
                count += 1
    return count


@numba.njit(cache=True)
def _arrive(limit: float, dst: np.ndarray, out_start: np.ndarray, look: int, log: np.ndarray, tail: np.ndarray,
            want: np.ndarray, has: np.ndarray, mark: np.ndarray, busy: np.ndarray, carrying: np.ndarray,
            ncarry: np.ndarray, ends: np.ndarray, fifo: np.ndarray, fifo_head: np.ndarray, fifo_len: np.ndarray,
            cand: np.ndarray) -> int:
    """One event's arrivals: the transfers ending by `limit` deliver their chunks (appended to the
    destination's log); the links freed, and the receivers' idle out-links whose destination wants the chunk,
    become the next event's candidates (`cand`, `mark`). Returns their count."""
    links, ncand = dst.shape[0], 0
    for k in range(fifo.shape[0]):
        while fifo_len[k] > 0 and ends[fifo[k, fifo_head[k]]] <= limit:
            link = fifo[k, fifo_head[k]]
            fifo_head[k] = fifo_head[k] + 1 if fifo_head[k] + 1 < links else 0
            fifo_len[k] -= 1
            v = dst[link]
            busy[link] = False
            if not mark[link]:
                mark[link] = True
                cand[ncand] = link
                ncand += 1
            for j in range(ncarry[link]):
                c = carrying[link, j]
                if look > 1:
                    _set(has, v, c)
                log[v, tail[v]] = c
                tail[v] += 1
                for out in range(out_start[v], out_start[v + 1]):  # v's idle out-links may now send c
                    if not busy[out] and not mark[out] and _bit(want, dst[out], c):
                        mark[out] = True
                        cand[ncand] = out
                        ncand += 1
    return ncand


@numba.njit(cache=True)
def greedy_all_gather(nodes: int, owner: np.ndarray, src: np.ndarray, dst: np.ndarray, duration: np.ndarray,
                      per_chunk: np.ndarray, klass: np.ndarray, out_start: np.ndarray, rank: np.ndarray,
                      in_start: np.ndarray, in_src: np.ndarray, seed: int, record: bool, look: int, batch: int,
                      log: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """All-gather of chunks starting at `owner[c]` over directed links (src, dst; `duration` of a one-chunk
    transfer, `per_chunk` what each further chunk of a transfer adds; links of one `klass`, numbered from 0,
    have the same both), numbered by source (node v's out-links are out_start[v]..out_start[v + 1]) and
    visited in the order `rank` (rank[r]: the r-th link from the event's random offset). A link compares its
    oldest `look` candidates and carries up to `batch` chunks per transfer. `log`: room for every node's
    arrivals (nodes x chunks, any integer type holding a chunk).
    Returns (time, busy seconds per link, and when `record`, the transfers' link, chunk, start, end), and
    the count of (node, chunk) pairs left unserved (non-zero: the graph does not connect them)."""
    np.random.seed(seed)
    chunks, links = owner.shape[0], src.shape[0]
    timing = np.stack((duration, per_chunk))
    words = (chunks + 63) // 64
    held = nodes if look > 1 else 1  # holdings are read only to rank several candidates
    has = np.zeros((held, words), np.uint64)
    want = np.full((nodes, words), ~np.uint64(0), np.uint64)  # per node, the chunks it neither holds nor awaits
    sent = np.zeros((held, words), np.uint64)  # sent on some link
    left = np.full(nodes, chunks, np.int64)  # chunks each node neither holds nor awaits
    tail = np.zeros(nodes, np.int64)  # log[v, :tail[v]]: the chunks v received (or owns), in arrival order
    cursor = np.zeros(links, np.int64)  # before it, the link's destination wants none of its source's log
    # a transfer class per class of link (`klass`) and count of chunks carried: its in-flight links in FIFO
    # order (a ring of `links` places: a link is in flight at most once; wrapped by hand, as an integer modulo
    # per transfer costs more than the rest of its bookkeeping)
    queues = (klass.max() + 1 if links > 0 else 1) * batch
    fifo = np.empty((queues, links), np.int64)
    fifo_head = np.zeros(queues, np.int64)
    fifo_tail = np.zeros(queues, np.int64)
    fifo_len = np.zeros(queues, np.int64)
    ends = np.zeros(links)
    total = chunks * (nodes - 1) if record else 0
    t_link = np.empty(total, np.int32)
    t_chunk = np.empty(total, np.int32)
    t_when = np.empty((2, total), np.float64)  # start, end
    count = 0
    busy = np.zeros(links, np.bool_)
    busy_time = np.zeros(links, np.float64)
    carrying = np.full((links, batch), -1, np.int64)
    ncarry = np.zeros(links, np.int64)
    mark = np.zeros(links, np.bool_)
    cand = rank.copy()  # time 0: every link in the caller's order
    ncand = links
    uniform = links == 0 or np.all(duration == duration[0])
    for c in range(chunks):  # every owner holds its chunks at time 0
        u = owner[c]
        if look > 1:
            _set(has, u, c)
        _clear(want, u, c)
        left[u] -= 1
        log[u, tail[u]] = c
        tail[u] += 1
    now = 0.0
    finish = 0.0
    while True:
        # this event's candidate links in link order from a seeded random offset (links of a node sit
        # together, so their bitsets stay in cache)
        if ncand > 0:
            _visit_order(rank, mark, cand, np.random.randint(links))
        order = cand[:ncand].copy()
        if not uniform:  # earliest arrival first; the shuffle breaks ties
            order = order[np.argsort(duration[order], kind="mergesort")]
        count = _match(order, now, src, dst, timing, klass, in_start, in_src, look, log, tail, cursor, want,
                       has, sent, mark, busy, carrying, ncarry, left, ends, busy_time, fifo, fifo_tail, fifo_len,
                       record, t_link, t_chunk, t_when, count)
        now = np.inf
        for k in range(fifo.shape[0]):
            if fifo_len[k] > 0:
                now = min(now, ends[fifo[k, fifo_head[k]]])
        if now == np.inf:
            break
        finish = now
        ncand = _arrive(now + 1e-12 * now, dst, out_start, look, log, tail, want, has, mark, busy, carrying,
                        ncarry, ends, fifo, fifo_head, fifo_len, cand)
    missing = nodes * chunks - tail.sum()  # every (node, chunk) pair served was appended to a log
    return finish, busy_time, t_link[:count], t_chunk[:count], t_when[0, :count], t_when[1, :count], missing
