"""Task graphs to and from Chakra execution traces: one `{prefix}.{rank}.et` file per rank.

Each task becomes one node on every rank it involves (a send: COMM_SEND_NODE on the source and
COMM_RECV_NODE on the destination, matched by comm_tag). Nodes carry the standard attributes ASTRA-sim
reads and armillary's own, from which `read_chakra` rebuilds the graph exactly. Traces from other tools
are costed with the system's devices and the collectives layer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

from google.protobuf.message import DecodeError

from armillary.errors import SpecError
from armillary.simulate.chakra.astra_sim import SendCost
from armillary.simulate.chakra.foreign import foreign_graph, light_nodes
from armillary.simulate.chakra.schema import (
    VERSION,
    AttributeProto,
    CollectiveCommType,
    GlobalMetadata,
    Node,
    NodeType,
    attributes,
    clear_encoding_caches,
    encode_attr,
    encode_name_duration,
    encode_node_head,
    encode_node_tail,
    iter_nodes,
    read_metadata,
    write_trace,
)
from armillary.simulate.graph import Category, Stream, Task, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.loading import MAX_DEVICES
from armillary.specs.system import System
from armillary.writing import replaced_files

PRODUCER = "armillary"
_C, _O = CollectiveCommType, Collective
_COMM_TYPES = {_O.ALL_REDUCE: _C.ALL_REDUCE, _O.ALL_GATHER: _C.ALL_GATHER, _O.REDUCE_SCATTER: _C.REDUCE_SCATTER,
               _O.ALL_TO_ALL: _C.ALL_TO_ALL, _O.BROADCAST: _C.BROADCAST, _O.REDUCE: _C.REDUCE}
_LOAD_WORDS = {"load", "reload", "fetch", "prefetch", "restore", "h2d", "swapin"}  # copies back into HBM
_FILE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et$")  # astra-sim workload/Workload.cc: {prefix}.{id}.et


def _attr(name: str, **value: Any) -> Any:
    return AttributeProto(name=name, **value)


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
    come back exactly; others are costed on `system` (see `foreign.foreign_graph`), their point-to-point sends as
    `sends` says (`astra_sim.SendCost`: the system's library, or ASTRA-sim's analytical network)."""
    try:
        sends = SendCost(sends)
    except ValueError:
        raise SpecError(f"sends {str(sends)[:40]!r}: one of {', '.join(c.value for c in SendCost)}") from None
    files = _files(directory, prefix)
    metas = {rank: attributes(read_metadata(path)) for rank, path in files.items()}
    if all(m.get("producer") == PRODUCER for m in metas.values()):
        try:
            graph = _ours(files, metas)
        except SpecError:
            raise
        except (KeyError, TypeError, IndexError, ValueError) as err:  # a file of ours edited by hand
            raise SpecError(f"{directory}: a trace written by armillary lacks or mistypes an attribute "
                            f"({type(err).__name__}: {str(err)[:80]})") from None
        return _checked(graph)
    return _checked(foreign_graph({rank: light_nodes(path) for rank, path in files.items()}, system, sends))


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
            a = attributes(node)
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
