"""Task graphs to and from Chakra execution traces: one `{prefix}.{rank}.et` file per rank.

Each task becomes one node on every rank it involves (a send: COMM_SEND_NODE on the source and
COMM_RECV_NODE on the destination, matched by comm_tag). Nodes carry the standard attributes ASTRA-sim
reads and armillary's own, from which `read_chakra` rebuilds the graph exactly. Traces from other tools
are costed with the system's devices and the collectives layer.
"""

from __future__ import annotations

import heapq
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple

from google.protobuf.message import DecodeError

from armillary.comm.collectives import collective, send_recv
from armillary.errors import SpecError
from armillary.plan.placement import placement_of
from armillary.simulate.chakra.astra_sim import SendCost, astra_sim_send_ns
from armillary.simulate.chakra.schema import (
    VERSION,
    AttributeProto,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    clear_encoding_caches,
    encode_attr,
    encode_name_duration,
    encode_node_head,
    encode_node_tail,
    iter_nodes,
    read_metadata,
    read_trace,
    write_trace,
)
from armillary.simulate.graph import Category, Stream, Task, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.loading import MAX_DEVICES
from armillary.specs.system import Precision, System
from armillary.writing import replaced_files

PRODUCER = "armillary"
# foreign collectives as our collectives layer costs them; gather / scatter as the all-gather /
# reduce-scatter with the same bytes per rank, a barrier as an all-reduce of its (empty) message
_C, _O = CollectiveCommType, Collective
_COLLECTIVES = {_C.ALL_REDUCE: _O.ALL_REDUCE, _C.REDUCE: _O.REDUCE, _C.ALL_GATHER: _O.ALL_GATHER,
                _C.GATHER: _O.ALL_GATHER, _C.SCATTER: _O.REDUCE_SCATTER, _C.BROADCAST: _O.BROADCAST,
                _C.ALL_TO_ALL: _O.ALL_TO_ALL, _C.REDUCE_SCATTER: _O.REDUCE_SCATTER,
                _C.REDUCE_SCATTER_BLOCK: _O.REDUCE_SCATTER, _C.BARRIER: _O.ALL_REDUCE}
_COMM_TYPES = {_O.ALL_REDUCE: _C.ALL_REDUCE, _O.ALL_GATHER: _C.ALL_GATHER, _O.REDUCE_SCATTER: _C.REDUCE_SCATTER,
               _O.ALL_TO_ALL: _C.ALL_TO_ALL, _O.BROADCAST: _C.BROADCAST, _O.REDUCE: _C.REDUCE}
_LOAD_WORDS = {"load", "reload", "fetch", "prefetch", "restore", "h2d", "swapin"}  # copies back into HBM
_PG_STREAMS = {"tp": Stream.TP, "tensor": Stream.TP, "cp": Stream.CP, "context": Stream.CP, "ep": Stream.EP,
               "expert": Stream.EP, "pp": Stream.PP, "pipeline": Stream.PP, "dp": Stream.DP, "data": Stream.DP}
_KNOWN = {NodeType.COMP_NODE, NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE,
          NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE}
_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")  # astra-sim workload/Workload.cc: {prefix}.{id}.et
Key = tuple[Any, ...]


def _attr(name: str, **value: Any) -> Any:
    return AttributeProto(name=name, **value)


def _attrs(message: Any, only: frozenset[str] | None = None) -> dict[str, Any]:
    """Attribute name -> value (a list for list values), whichever member of the oneof holds it; only the
    names in `only` if given."""
    out: dict[str, Any] = {}
    for a in message.attr:
        if only is not None and a.name not in only:
            continue
        which = a.WhichOneof("value")
        if which is not None:
            value = getattr(a, which)
            out[a.name] = list(value.values) if which.endswith("_list") else value
    return out


def _node_type(task: Task, rank: int) -> NodeType:
    if task.kind is TaskKind.COMPUTE:
        return NodeType.COMP_NODE
    if task.kind is TaskKind.COLLECTIVE:
        return NodeType.COMM_COLL_NODE
    if task.kind is TaskKind.SEND:
        return NodeType.COMM_SEND_NODE if rank == task.ranks[0] else NodeType.COMM_RECV_NODE
    return _memory_type(task.name)


@lru_cache(maxsize=4096)
def _memory_type(name: str) -> NodeType:
    loads = not _LOAD_WORDS.isdisjoint(re.findall(r"[a-z0-9]+", name.lower()))
    return NodeType.MEM_LOAD_NODE if loads else NodeType.MEM_STORE_NODE


def _node_head(index: int, task: Task, pg_name: str) -> bytes:
    """The fields of a task's node common to all its ranks, encoded: what repeats across tasks (a layer's
    kernel on every rank and micro-batch) once (`_fixed`), then the task's own id, ranks and dependencies."""
    send = task.kind is TaskKind.SEND
    fixed = _fixed(task.name, task.kind, task.stream, task.duration_ns, task.tier, task.category, task.group,
                   task.collective, task.bytes, task.flop, pg_name, task.ranks if send else ())
    return encode_node_head(index, b"".join((
        fixed, encode_attr("comm_tag", "int32_val", index) if send else b"", encode_attr("task", "int64_val", index),
        encode_attr("participants", "int64_list", task.ranks), encode_attr("deps", "int64_list", task.deps),
        encode_attr("after", "int64_list", task.after))))


@lru_cache(maxsize=1 << 17)
def _fixed(name: str, kind: TaskKind, stream: Stream | None, duration_ns: int, tier: Tier, category: Category,
           group: str, collective: Collective | None, size: float, flop: float, pg_name: str,
           send: tuple[int, ...]) -> bytes:
    """Name, duration and the attributes that do not name the task's index or ranks (but a send's):

    - what ASTRA-sim's feeder reads, with the value types it reads them as (mlcommons/chakra
      src/feeder/et_feeder_node.cpp); is_cpu_op defaults to true there and ASTRA-sim issues communication
      only for nodes that are not CPU ops (astra-sim workload/Workload.cc: issue); a send's comm_tag is its
      task index (`_node_head`);
    - armillary's exact task, for a lossless read back (with `task`, `participants`, `deps`, `after`)."""
    out = [encode_name_duration(name, round(duration_ns / 1000)), encode_attr("is_cpu_op", "bool_val", False)]
    if kind is TaskKind.COMPUTE:
        out += [encode_attr("num_ops", "int64_val", round(flop)), encode_attr("tensor_size", "uint64_val", round(size))]
    elif kind is TaskKind.MEMORY:
        out.append(encode_attr("tensor_size", "uint64_val", round(size)))
    elif kind is TaskKind.COLLECTIVE:
        comm_type = _COMM_TYPES.get(collective or Collective.ALL_REDUCE, CollectiveCommType.ALL_REDUCE)
        out += [encode_attr("comm_type", "int64_val", int(comm_type)),
                encode_attr("comm_size", "int64_val", round(size)), encode_attr("pg_name", "string_val", pg_name)]
    else:
        out += [encode_attr("comm_src", "int32_val", send[0]), encode_attr("comm_dst", "int32_val", send[1]),
                encode_attr("comm_size", "int64_val", round(size))]
    out += [encode_attr("duration_ns", "int64_val", duration_ns), encode_attr("kind", "int64_val", int(kind)),
            encode_attr("stream", "int64_val", -1 if stream is None else int(stream)),
            encode_attr("tier", "int64_val", int(tier)), encode_attr("category", "string_val", category.value),
            encode_attr("group", "string_val", group), encode_attr("collective", "string_val", collective or ""),
            encode_attr("bytes", "double_val", size), encode_attr("flop", "double_val", flop)]
    return b"".join(out)


def write_chakra(graph: TaskGraph, directory: Path, prefix: str = "trace") -> list[Path]:
    """Write `{prefix}.{rank}.et` for every rank (node id = task index) and `{prefix}.comm_group.json`, the
    ranks of each `pg_name` (ASTRA-sim's communicator-group file); return the trace files.

    A node's data_deps are the task's dependencies that run on the same rank, and the rank's previous task
    on the same stream (program order); dependencies on other ranks travel through the matched sends and
    collectives, and all of them are kept in the `deps` attribute.

    The files are written one rank at a time: each task's fields common to its ranks are encoded once
    (Protocol Buffers wire format, `schema.encode_attr`), a rank's node adds its type and data_deps.

    A symmetric graph whose collectives run over 1-rank groups (one simulated rank standing for its group) is
    refused: ASTRA-sim would run those collectives on one rank. Build the graph with every rank
    (`simulate(..., symmetric=False)`, `simulate.run.every_rank_graph`); `armillary simulate --chakra` does."""
    try:
        _write_chakra(graph, directory, prefix)
    finally:
        _fixed.cache_clear()
        clear_encoding_caches()
    return [directory / f"{prefix}.{rank}.et" for rank in range(graph.ranks)]


def _write_chakra(graph: TaskGraph, directory: Path, prefix: str) -> None:
    groups: dict[tuple[int, ...], str] = {}
    heads: list[bytes] = []  # per task: its node's fields common to its ranks
    deps_of: list[tuple[int, ...]] = []
    stream_of: list[Stream | None] = []
    type_of: list[int] = []  # NodeType, or for a send -1 - its source (a send there, a receive elsewhere)
    on_rank: list[list[int]] = [[] for _ in range(graph.ranks)]
    for i, task in enumerate(graph.tasks):  # once each: a graph's tasks may be made on access (Columns)
        if task.kind is TaskKind.SEND and (len(task.ranks) != 2 or i > 2**31 - 1):
            raise SpecError(f"task {i} {task.name!r}: a send has ranks (source, destination) and an int32 tag")
        members = tuple(dict.fromkeys(task.ranks))
        if any(not 0 <= rank < graph.ranks for rank in members):
            raise SpecError(f"task {i} {task.name!r}: rank {next(r for r in members if not 0 <= r < graph.ranks)} "
                            f"outside 0..{graph.ranks - 1}")
        pg_name = ""
        if task.kind is TaskKind.COLLECTIVE:
            if len(members) == 1 and graph.rank_weights[members[0]] > 1:
                raise SpecError(f"write_chakra: a symmetric graph ({graph.ranks} simulated ranks standing for "
                                f"{graph.devices}): collective {task.name!r} has a 1-rank group that ASTRA-sim would "
                                "run alone; export a graph with every rank (simulate with symmetric=False / "
                                "--no-symmetric)")
            # communicator group ids from 1: ASTRA-sim's CommunicatorGroup requires an id > 0 (its workload
            # adds 1 to the process-group names it reads from PyTorch traces for that reason)
            pg_name = groups.setdefault(tuple(sorted(members)), str(len(groups) + 1))
        heads.append(_node_head(i, task, pg_name))
        deps_of.append(task.deps)
        stream_of.append(task.stream)
        type_of.append(-1 - task.ranks[0] if task.kind is TaskKind.SEND else int(_node_type(task, task.ranks[0])))
        for rank in members:
            on_rank[rank].append(i)
    with replaced_files(directory) as staging:  # every file, or none
        for rank in range(graph.ranks):
            meta = GlobalMetadata(version=VERSION, attr=[
                _attr("producer", string_val=PRODUCER), _attr("rank", int64_val=rank),
                _attr("ranks", int64_val=graph.ranks), _attr("rank_label", string_val=graph.rank_labels[rank]),
                _attr("rank_weight", int64_val=graph.rank_weights[rank])])
            nodes = _rank_nodes(rank, on_rank[rank], heads, deps_of, stream_of, type_of)
            write_trace(staging / f"{prefix}.{rank}.et", meta, nodes)
            on_rank[rank] = []  # done with: its memory back
        (staging / f"{prefix}.comm_group.json").write_text(
            json.dumps({name: list(ranks) for ranks, name in groups.items()}, indent=1) + "\n")


def _rank_nodes(rank: int, indices: list[int], heads: list[bytes], deps_of: list[tuple[int, ...]],
                stream_of: list[Stream | None], type_of: list[int]) -> Iterator[bytes]:
    """The encoded nodes of one rank (its tasks: `indices`): each task's common fields, then this rank's type
    and data_deps (the task's dependencies on this rank, and the rank's previous task on its stream)."""
    here = set(indices)
    last: dict[Stream, int] = {}
    send, receive = int(NodeType.COMM_SEND_NODE), int(NodeType.COMM_RECV_NODE)
    for i in indices:
        deps = {d for d in deps_of[i] if d in here}
        stream = stream_of[i]
        if stream is not None:
            if stream in last:
                deps.add(last[stream])
            last[stream] = i
        code = type_of[i]
        yield heads[i] + encode_node_tail(code if code >= 0 else send if -1 - code == rank else receive, sorted(deps))


def _files(directory: Path, prefix: str | None) -> dict[int, Path]:
    found: dict[int, Path] = {}
    prefixes = set()
    for path in sorted(directory.glob("*.et")):
        match = _FILE.match(path.name)
        if match and (prefix is None or match["prefix"] == prefix):
            prefixes.add(match["prefix"])
            if len(match["rank"]) > len(str(MAX_DEVICES)) or int(match["rank"]) >= MAX_DEVICES:
                raise SpecError(f"{path.name}: rank {match['rank'][:12]} in the name; ranks 0 to {MAX_DEVICES - 1:,} "
                                "are read")
            found[int(match["rank"])] = path
    if not found:
        raise FileNotFoundError(f"no {prefix or '<prefix>'}.<rank>.et trace files in {directory}")
    if len(prefixes) > 1:
        raise SpecError(f"{directory} holds several traces ({', '.join(sorted(prefixes))}): pass prefix=")
    return found


def read_chakra(directory: Path, system: System | None = None, prefix: str | None = None,
                sends: SendCost | str = SendCost.LIBRARY) -> TaskGraph:
    """The task graph of the `{prefix}.{rank}.et` files in `directory`. Traces written by `write_chakra`
    come back exactly; others are costed on `system` (see `_foreign`), their point-to-point sends as
    `sends` says (`astra_sim.SendCost`: the system's library, or ASTRA-sim's analytical network)."""
    try:
        sends = SendCost(sends)
    except ValueError:
        raise SpecError(f"sends {str(sends)[:40]!r}: one of {', '.join(c.value for c in SendCost)}") from None
    files = _files(directory, prefix)
    metas = {rank: _attrs(read_metadata(path)) for rank, path in files.items()}
    if all(m.get("producer") == PRODUCER for m in metas.values()):
        try:
            graph = _ours(files, metas)
        except SpecError:
            raise
        except (KeyError, TypeError, IndexError, ValueError) as err:  # a file of ours edited by hand
            raise SpecError(f"{directory}: a trace written by armillary lacks or mistypes an attribute "
                            f"({type(err).__name__}: {str(err)[:80]})") from None
        return _checked(graph)
    return _checked(_foreign({rank: _light_nodes(path) for rank, path in files.items()}, system, sends))


class _Light(NamedTuple):
    """What the import of another tool's trace reads of a node (its protobuf message dropped once read)."""

    id: int
    name: str
    type: int
    data_deps: tuple[int, ...]
    duration_micros: int


# the attributes of other tools' nodes that `_foreign` reads
_FOREIGN_ATTRS = frozenset({"is_cpu_op", "comm_src", "comm_dst", "comm_tag", "comm_size", "comm_type", "pg_name",
                            "tensor_size", "num_ops"})
ForeignNodes = list[tuple[_Light, dict[str, Any]]]


def _light_nodes(path: Path) -> ForeignNodes:
    """One rank's nodes as `_Light` with the attributes `_foreign` reads: a file at a time, so that a trace's
    messages are never all held at once."""
    _, nodes = read_trace(path)
    return [(_Light(n.id, n.name, n.type, tuple(n.data_deps), n.duration_micros), _attrs(n, _FOREIGN_ATTRS))
            for n in nodes]


def _checked(graph: TaskGraph) -> TaskGraph:
    """The graph if the engine can run it: every task after the tasks it waits for (no dependency cycle,
    none on a task that does not exist), on ranks of the graph, with a duration >= 0."""
    for i, task in enumerate(graph.tasks):
        waits = (*task.deps, *task.after)
        if any(not 0 <= d < i for d in waits):
            raise SpecError(f"Chakra task {i} ({task.name[:80]!r}) depends on task "
                            f"{next(d for d in waits if not 0 <= d < i)}: a dependency cycle, or on a task that does "
                            "not come before it")
        if not task.ranks or any(not 0 <= r < graph.ranks for r in task.ranks):
            raise SpecError(f"Chakra task {i} ({task.name[:80]!r}) runs on ranks {task.ranks[:8]}: outside 0 to "
                            f"{graph.ranks - 1}")
        if not 0 <= task.duration_ns < 2**62:
            raise SpecError(f"Chakra task {i} ({task.name[:80]!r}): duration {task.duration_ns} ns")
    return graph


def _ours(files: dict[int, Path], metas: dict[int, dict[str, Any]]) -> TaskGraph:
    """Our own traces, one rank's file at a time: a task's node on each of its ranks carries the whole task,
    so a node whose id (= the task's index) is already read is skipped unparsed."""
    ranks = max(max(m.get("ranks", 0) for m in metas.values()), max(files) + 1)
    if not 0 < ranks <= MAX_DEVICES:
        raise SpecError(f"Chakra metadata: ranks = {ranks}; 1 to {MAX_DEVICES:,} are read")
    labels, weights = [f"rank {r}" for r in range(ranks)], [1] * ranks
    tasks: dict[int, Task] = {}
    for rank, path in files.items():
        labels[rank], weights[rank] = metas[rank]["rank_label"], metas[rank]["rank_weight"]
        for known, message in iter_nodes(path):
            if known is not None and known in tasks:
                continue
            try:
                node = Node.FromString(message)
            except DecodeError:
                raise SpecError(f"{path}: not a Chakra execution trace (a message does not decode)") from None
            a = _attrs(node)
            if a["task"] != node.id:
                raise SpecError(f"{path}: node {node.id} carries task {a['task']} (armillary writes them equal)")
            if node.id not in tasks:
                tasks[node.id] = Task(
                    node.name, TaskKind(a["kind"]), Category(a["category"]), tuple(a["participants"]),
                    None if a["stream"] < 0 else Stream(a["stream"]), a["duration_ns"], tuple(a["deps"]),
                    Tier(a["tier"]), a["bytes"], a["flop"], a["group"],
                    Collective(a["collective"]) if a["collective"] else None, tuple(a.get("after", ())))
    if sorted(tasks) != list(range(len(tasks))):
        raise SpecError("the trace lacks some of its tasks: are files of some ranks missing?")
    return TaskGraph(tuple(tasks[i] for i in range(len(tasks))), ranks, tuple(labels), tuple(weights))


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


def _foreign(traces: dict[int, ForeignNodes], system: System | None, sends: SendCost) -> TaskGraph:
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
