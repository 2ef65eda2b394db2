"""Chakra traces written by other tools (PyTorch's converter, ASTRA-sim's samples, MSCCL): their nodes read
a file at a time and costed on a system with the collectives layer, their sends matched into transfers."""

from __future__ import annotations

import heapq
import itertools
import re
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

from armillary.comm.collectives import collective, send_recv
from armillary.errors import SpecError
from armillary.plan.placement import placement_of
from armillary.simulate.chakra.astra_sim import SendCost, astra_sim_send_ns
from armillary.simulate.chakra.schema import CollectiveCommType, NodeType, attributes, read_trace
from armillary.simulate.graph import Category, Stream, Task, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.device import Precision
from armillary.specs.system import System

# foreign collectives as our collectives layer costs them; gather / scatter as the all-gather /
# reduce-scatter with the same bytes per rank, a barrier as an all-reduce of its (empty) message
_C, _O = CollectiveCommType, Collective
_COLLECTIVES = {_C.ALL_REDUCE: _O.ALL_REDUCE, _C.REDUCE: _O.REDUCE, _C.ALL_GATHER: _O.ALL_GATHER,
                _C.GATHER: _O.ALL_GATHER, _C.SCATTER: _O.REDUCE_SCATTER, _C.BROADCAST: _O.BROADCAST,
                _C.ALL_TO_ALL: _O.ALL_TO_ALL, _C.REDUCE_SCATTER: _O.REDUCE_SCATTER,
                _C.REDUCE_SCATTER_BLOCK: _O.REDUCE_SCATTER, _C.BARRIER: _O.ALL_REDUCE}
_PG_STREAMS = {"tp": Stream.TP, "tensor": Stream.TP, "cp": Stream.CP, "context": Stream.CP, "ep": Stream.EP,
               "expert": Stream.EP, "pp": Stream.PP, "pipeline": Stream.PP, "dp": Stream.DP, "data": Stream.DP}
_KNOWN = {NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE,
          NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE}
Key = tuple[Any, ...]


class _Light(NamedTuple):
    """What the import of another tool's trace reads of a node (its protobuf message dropped once read)."""

    id: int
    name: str
    type: int
    data_deps: tuple[int, ...]
    duration_micros: int


# the attributes of other tools' nodes that `foreign_graph` reads
_FOREIGN_ATTRS = frozenset({"is_cpu_op", "comm_src", "comm_dst", "comm_tag", "comm_size", "comm_type", "pg_name",
                            "tensor_size", "num_ops"})
ForeignNodes = list[tuple[_Light, dict[str, Any]]]


def light_nodes(path: Path) -> ForeignNodes:
    """One rank's nodes as `_Light` with the attributes `foreign_graph` reads: a file at a time, so that a trace's
    messages are never all held at once."""
    _, nodes = read_trace(path)
    return [(_Light(n.id, n.name, n.type, tuple(n.data_deps), n.duration_micros), attributes(n, _FOREIGN_ATTRS))
            for n in nodes]


def _forward(deps_of: dict[int, list[int]], dropped: set[int]) -> dict[int, frozenset[int]]:
    """For each dropped node, the kept nodes it depends on, through chains of dropped ones."""
    memo: dict[int, frozenset[int]] = {}
    for start in dropped:
        if start in memo:
            continue
        stack, active = [(start, iter(deps_of.get(start, ())))], {start}
        while stack:
            node, pending = stack[-1]
            for d in pending:
                if d in dropped and d not in memo:
                    if d in active:
                        raise SpecError(f"dependency cycle through node {d}")
                    active.add(d)
                    stack.append((d, iter(deps_of.get(d, ()))))
                    break
            else:
                memo[node] = frozenset().union(*(memo[d] if d in dropped else {d} for d in deps_of.get(node, ())))
                active.discard(node)
                stack.pop()
    return memo


def _key(rank: int, node: Any, a: dict[str, Any]) -> Key:
    """What the nodes of one task share across ranks: the collectives of one process group pair up in order
    of appearance; a send (the transfer) and its receive are matched by (source, destination, tag) and the
    n-th of each, but stay two tasks."""
    try:
        if node.type == NodeType.COMM_SEND_NODE:
            return ("p2p", a.get("comm_src", rank), a["comm_dst"], a.get("comm_tag", 0))
        if node.type == NodeType.COMM_RECV_NODE:
            return ("recv", a["comm_src"], a.get("comm_dst", rank), a.get("comm_tag", 0))
    except KeyError as err:
        raise SpecError(f"node {node.id} of rank {rank} ({node.name!r}) has no {err.args[0]} attribute") from None
    if node.type == NodeType.COMM_COLL_NODE:
        return ("coll", str(a.get("pg_name", "")))
    return ("local", rank, node.id)


def _pg_stream(pg_name: str) -> Stream:
    return next((_PG_STREAMS[w] for w in re.findall(r"[a-z]+", pg_name.lower()) if w in _PG_STREAMS), Stream.DP)


def _seconds_ns(seconds: Any) -> int:
    return round(float(seconds) * 1e9)


def foreign_graph(traces: dict[int, ForeignNodes], system: System | None, sends: SendCost) -> TaskGraph:
    """Nodes of other tools: collectives matched by process group and order into one task with the union of
    the nodes' data_deps (ctrl_deps are ignored, as ASTRA-sim's feeder does). A send and its receive, matched
    by (source, destination, tag), keep their own dependencies as ASTRA-sim runs them: the transfer (a SEND
    task) starts when the send's dependencies are done, the receive completes (a 0-duration task on the
    destination, no stream) when the transfer has arrived and the receive's own dependencies are done; the
    receive's users wait for it. (One task with both nodes' dependencies made a cycle where a rank's receive
    waits for its own send, as in ASTRA-sim's send/recv custom collectives.)

    CPU-op nodes of other types are dropped, their dependencies
    passed on; other nodes of other types become empty compute. Compute takes duration_micros, or
    num_ops at the device's bf16 matrix peak; communication is costed by the collectives layer."""
    entries: dict[Key, list[tuple[int, int, Any, dict[str, Any]]]] = {}
    owner: dict[tuple[int, int], Key] = {}
    raw_deps: dict[Key, set[tuple[int, int]]] = {}
    for rank, pairs in sorted(traces.items()):
        nodes, attrs = [n for n, _ in pairs], [a for _, a in pairs]
        if len({n.id for n in nodes}) != len(nodes):
            raise SpecError(f"rank {rank}: node ids are not unique")
        dropped = {n.id for n, a in zip(nodes, attrs, strict=True) if n.type not in _KNOWN and a.get("is_cpu_op", True)}
        forward = _forward({n.id: list(n.data_deps) for n in nodes}, dropped)
        seen: Counter[Key] = Counter()
        for pos, (node, a) in enumerate(zip(nodes, attrs, strict=True)):
            if node.id not in dropped:
                key = _key(rank, node, a)
                seen[key] += 1
                key = (*key, seen[key])
                entries.setdefault(key, []).append((rank, pos, node, a))
                owner[(rank, node.id)] = key
                raw_deps.setdefault(key, set()).update((rank, x) for d in node.data_deps for x in forward.get(d, {d}))
    members: dict[str, set[int]] = {}
    for key, nodes_of in entries.items():
        if key[0] == "coll":
            members.setdefault(key[1], set()).update(rank for rank, *_ in nodes_of)
        elif key[0] in ("p2p", "recv") and (len(nodes_of) != 1 or _peer(key) not in entries):
            raise SpecError(f"send {key[1]}->{key[2]} tag {key[3]} (#{key[4]}) has no matching send and receive")
    for key, nodes_of in entries.items():
        if key[0] == "coll" and len(nodes_of) != len(members[key[1]]):
            raise SpecError(f"collective #{key[2]} of process group {key[1]!r} is missing on some of ranks "
                             f"{sorted(members[key[1]])}")
    deps: dict[Key, set[Key]] = {}
    for key, raw in raw_deps.items():
        missing = [f"{d} (rank {r})" for r, d in raw if (r, d) not in owner]
        if missing:
            raise SpecError(f"{key}: depends on nodes not in the trace: {', '.join(missing)}")
        deps[key] = {owner[rd] for rd in raw} - {key}
        if key[0] == "recv":  # a receive completes when its message has arrived
            deps[key].add(_peer(key))
    order, after = _order(entries, deps)
    index = {key: i for i, key in enumerate(order)}
    tasks = [_task(key, entries[key], members, system, tuple(sorted(index[d] for d in deps[key])), sends)
             ._replace(after=tuple(sorted(index[d] for d in after[key]))) for key in order]
    ranks = max(traces) + 1
    if system is not None and ranks > system.devices:
        raise SpecError(f"the Chakra trace has ranks 0 to {ranks - 1}; system {system.name!r} has {system.devices} "
                        "devices (give --gpus)")
    return TaskGraph(tuple(tasks), ranks, tuple(f"rank {r}" for r in range(ranks)), (1,) * ranks)


def _peer(key: Key) -> Key:
    """The receive of a send's key, or the send of a receive's."""
    return ("recv" if key[0] == "p2p" else "p2p", *key[1:])


def _stream(key: Key, node: Any) -> Stream | None:
    if key[0] == "coll":
        return _pg_stream(key[1])
    if key[0] in ("p2p", "recv"):
        return None
    return Stream.OFFLOAD if node.type in (NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE) else Stream.COMPUTE


def _order(entries: dict[Key, list[tuple[int, int, Any, dict[str, Any]]]],
           deps: dict[Key, set[Key]]) -> tuple[list[Key], dict[Key, set[Key]]]:
    """A topological order of the tasks that keeps each rank's file order on every stream, and what each
    task waits for: its dependencies and its streams' previous tasks (`Task.after`)."""
    after = {key: set(d) for key, d in deps.items()}
    last: dict[tuple[int, Stream], Key] = {}
    for rank, _, key in sorted((r, pos, key) for key, nodes in entries.items() for r, pos, _, _ in nodes):
        stream = _stream(key, entries[key][0][2])
        if stream is not None:
            if (rank, stream) in last and last[(rank, stream)] != key:
                after[key].add(last[(rank, stream)])
            last[(rank, stream)] = key
    users: dict[Key, list[Key]] = {key: [] for key in entries}
    for key, before in after.items():
        for d in before:
            users[d].append(key)
    waiting = {key: len(before) for key, before in after.items()}
    first = {key: min((pos, rank) for rank, pos, _, _ in nodes) for key, nodes in entries.items()}
    tie = itertools.count()
    ready = [(first[key], next(tie), key) for key in entries if not waiting[key]]
    heapq.heapify(ready)
    order: list[Key] = []
    while ready:
        *_, key = heapq.heappop(ready)
        order.append(key)
        for user in users[key]:
            waiting[user] -= 1
            if not waiting[user]:
                heapq.heappush(ready, (first[user], next(tie), user))
    if len(order) != len(entries):
        raise SpecError("the trace's dependencies and per-rank stream order form a cycle (collectives of one "
                         "stream in different orders on different ranks?)")
    return order, after


def _need(system: System | None) -> System:
    if system is None:
        raise SpecError("this Chakra trace was not written by armillary: costing its communication (and compute "
                        "nodes without duration_micros) needs a system: pass system=load_system(...)")
    return system


def _amount(node: Any, a: dict[str, Any], name: str) -> float:
    """A size or count attribute of a foreign node: a finite number >= 0 (0 where absent)."""
    value = a.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2.0**63:
        raise SpecError(f"node {node.id} ({node.name[:60]!r}): {name} {str(value)[:20]}; expected a number from 0 "
                        "to 2^63")
    return float(value)


def _task(key: Key, nodes: list[tuple[int, int, Any, dict[str, Any]]], members: dict[str, set[int]],
          system: System | None, deps: tuple[int, ...], sends: SendCost) -> Task:
    rank, _, node, a = min(nodes, key=lambda n: (n[2].type != NodeType.COMM_SEND_NODE, n[0]))
    micros_ns = node.duration_micros * 1000
    stream = _stream(key, node)
    if key[0] == "p2p":
        s = _need(system)
        src, dst = key[1], key[2]
        size = _amount(node, a, "comm_size")
        pair = placement_of((src, dst), s.sizes)
        crosses = pair.outermost > 0
        if sends is SendCost.ASTRA_SIM:
            duration = astra_sim_send_ns(size, src, dst, s) if size > 0 else 0
        else:
            duration = _seconds_ns(send_recv(size, pair, s).time)
        return Task(node.name, TaskKind.SEND, Category.PP, (src, dst), None,
                    duration, deps, Tier.SCALE_OUT if crosses else Tier.SCALE_UP,
                    size, 0.0, "", Collective.SEND_RECV)
    if key[0] == "recv":
        return Task(node.name, TaskKind.COMPUTE, Category.PP, (rank,), None, 0, deps, Tier.NONE,
                    _amount(node, a, "comm_size"), 0.0, "", Collective.SEND_RECV)
    if key[0] == "coll":
        s = _need(system)
        ranks = tuple(sorted(members[key[1]]))
        group = placement_of(ranks, s.sizes)
        kind = a.get("comm_type", 0)
        if kind not in _COLLECTIVES:
            raise SpecError(f"node {node.id} ({node.name[:60]!r}): comm_type {str(kind)[:20]}; known: "
                            f"{', '.join(f'{int(c)} ({c.name})' for c in _COLLECTIVES)}")
        op = _COLLECTIVES[kind]
        size = _amount(node, a, "comm_size")
        assert stream is not None
        return Task(node.name, TaskKind.COLLECTIVE, stream.category, ranks, stream,
                    _seconds_ns(collective(op, size, group, s).cost.time), deps,
                    Tier.SCALE_OUT if group.outermost > 0 else Tier.SCALE_UP, size, 0.0, key[1], op)
    size = _amount(node, a, "tensor_size")
    if stream is Stream.OFFLOAD:  # duration_micros, or the bytes over the offload path (second tier or pool)
        duration = micros_ns
        if micros_ns == 0 and size > 0:
            sized = _need(system)
            path = sized.offload_path
            duration = _seconds_ns(size / sized.device.hbm.rate if path is None else path.latency + size / path.rate)
        return Task(node.name, TaskKind.MEMORY, Category.OFFLOAD, (rank,), stream, duration, deps, Tier.MEMORY, size)
    flop = _amount(node, a, "num_ops") if node.type == NodeType.COMP_NODE else 0.0
    if node.type != NodeType.COMP_NODE:
        duration = 0
    elif micros_ns > 0 or flop == 0:
        duration = micros_ns
    else:
        duration = _seconds_ns(flop / _need(system).device.matrix_peak(Precision.BF16))
    return Task(node.name, TaskKind.COMPUTE, Category.COMPUTE, (rank,), Stream.COMPUTE, duration, deps,
                Tier.NONE, size, flop)
