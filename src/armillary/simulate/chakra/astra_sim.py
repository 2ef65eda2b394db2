"""How Chakra point-to-point sends are costed when a trace is read on a system (`read_chakra(sends=...)`).

- `library`: the system's collective library (comm/collectives.py `send_recv`): each send a separate
  operation with its protocol's launch cost (NCCL's base latency) and per-step latency, as a framework
  issues pipeline sends.
- `astra-sim`: ASTRA-sim's analytical network (astra-network-analytical congestion_unaware
  BasicTopology::send / compute_communication_delay): hops x the dimension's latency + bytes / the link's
  bandwidth, truncated to whole nanoseconds, on the innermost dimension where the two ranks differ
  (MultiDimTopology::get_dim_to_transfer); a Ring takes the shorter way round (Ring::compute_hops_count,
  bidirectional), a Switch 2 hops, a FullyConnected 1. No launch cost per send: the sends of an ASTRA-sim
  custom collective (an MSCCL program through its Chakra converter) run inside one collective.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from enum import StrEnum
from pathlib import Path

from armillary.errors import SpecError
from armillary.specs.network import NetworkKind
from armillary.specs.system import System


class SendCost(StrEnum):
    """What a foreign trace's COMM_SEND / COMM_RECV transfer costs (see the module's docstring)."""

    LIBRARY = "library"
    ASTRA_SIM = "astra-sim"


# ASTRA-sim's analytical topologies (astra-network-analytical congestion_unaware/basic-topology/*.cpp) and
# the hops a send takes on each; a ring's depend on the distance
_HOPS = {NetworkKind.FULLY_CONNECTED: 1, NetworkKind.SWITCH: 2}


def astra_sim_send_ns(size: float, src: int, dst: int, system: System) -> int:
    """ASTRA-sim's delay (ns) of `size` bytes from rank `src` to rank `dst` of `system` (ranks numbered
    mixed-radix over the dimensions, innermost first, as ASTRA-sim's translate_address), at each link's
    `bandwidth / links` (x the dimension's efficiency: 1 for a network read from ASTRA-sim)."""
    sizes = system.sizes
    if not (0 <= src < system.devices and 0 <= dst < system.devices) or src == dst:
        raise SpecError(f"send {src}->{dst}: two different ranks of 0 to {system.devices - 1} "
                        f"(system {system.name!r})")
    a, b, dim = src, dst, 0
    while a % sizes[dim] == b % sizes[dim]:  # they differ somewhere: src != dst
        a, b, dim = a // sizes[dim], b // sizes[dim], dim + 1
    net, n = system.network[dim], sizes[dim]
    x, y = a % n, b % n
    if net.kind is NetworkKind.RING:
        hops = min((y - x) % n, (x - y) % n)
    elif net.kind in _HOPS:
        hops = _HOPS[net.kind]
    else:
        raise SpecError(f"send {src}->{dst} crosses {net.name!r}, a {net.kind.value} network: the astra-sim send "
                        "cost knows ASTRA-sim's analytical topologies: ring, fully_connected, switch")
    per_link = net.bandwidth / (net.links or 1) * net.efficiency  # bytes/s
    return math.floor(hops * net.latency * 1e9 + size / per_link * 1e9 + 1e-6)  # EventTime: truncated


# collectives ASTRA-sim's workload layer issues (astra-sim workload/Workload.cc issue_coll_comm: others throw
# "Unsupported collective comm type")
ASTRA_SIM_COLLECTIVES = frozenset({"ALL_REDUCE", "ALL_TO_ALL", "ALL_GATHER", "REDUCE_SCATTER", "BROADCAST"})


def astra_sim_problems(directory: Path, prefix: str) -> list[str]:
    """What would stop ASTRA-sim (astra-sim 518bd51 workload/Workload.cc, chakra feeder) from running the
    `{prefix}.{rank}.et` files and `{prefix}.comm_group.json` of `directory`, one line each (empty: none):
    ranks 0 to n - 1 all present; node ids unique in a file and every data / control dependency a node of the
    same file, without a cycle (the feeder resolves them per file); communication not marked a CPU op
    (issue_comm throws); collectives of a kind ASTRA-sim issues, of a size > 0, whose pg_name is a group
    id > 0 of comm_group.json (CommunicatorGroup asserts id > 0) that holds the rank, and the same sequence
    of (kind, size) on every member of a group; each send (comm_src this rank) matched by one receive on
    its destination with the same source, tag and size."""
    from armillary.simulate.chakra.schema import CollectiveCommType, NodeType, read_trace

    files = sorted(directory.glob(f"{prefix}.*.et"))
    ranks = sorted(int(p.name[len(prefix) + 1:-3]) for p in files if p.name[len(prefix) + 1:-3].isdigit())
    problems = [] if ranks == list(range(len(ranks))) and ranks else [f"trace files of ranks {ranks[:8]}...: "
                                                                       "expected 0 to n - 1"]
    group_file = directory / f"{prefix}.comm_group.json"
    groups: dict[str, list[int]] = json.loads(group_file.read_text()) if group_file.is_file() else {}
    problems += [f"comm_group.json: group id {g!r} (ASTRA-sim requires an integer > 0)" for g in groups
                 if not (g.isdigit() and int(g) > 0)]
    sequences: dict[tuple[str, int], list[tuple[str, int]]] = {}
    sends: Counter[tuple[int, int, int, int]] = Counter()
    receives: Counter[tuple[int, int, int, int]] = Counter()
    for rank in ranks:
        _, nodes = read_trace(directory / f"{prefix}.{rank}.et")
        where = f"rank {rank}"
        ids = [n.id for n in nodes]
        if len(set(ids)) != len(ids):
            problems.append(f"{where}: node ids are not unique")
        present = set(ids)
        for node in nodes:
            missing = [d for d in (*node.data_deps, *node.ctrl_deps) if d not in present]
            if missing:
                problems.append(f"{where}: node {node.id} depends on {missing[:4]}, not nodes of the file")
        if _cyclic({n.id: [*n.data_deps, *n.ctrl_deps] for n in nodes}):
            problems.append(f"{where}: the dependencies form a cycle")
        for node in nodes:
            a = {x.name: getattr(x, x.WhichOneof("value") or "name") for x in node.attr}
            comm = node.type in (NodeType.COMM_COLL_NODE, NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE)
            if comm and a.get("is_cpu_op", False):  # Workload::issue_comm reads it with default false
                problems.append(f"{where}: communication node {node.id} is marked a CPU op (is_cpu_op true)")
            if node.type == NodeType.COMM_COLL_NODE:
                kind = CollectiveCommType(a.get("comm_type", 0)).name
                pg = str(a.get("pg_name", ""))
                if kind not in ASTRA_SIM_COLLECTIVES:
                    problems.append(f"{where}: node {node.id}: {kind}, which ASTRA-sim does not issue")
                if a.get("comm_size", 0) <= 0:
                    problems.append(f"{where}: node {node.id}: comm_size {a.get('comm_size', 0)}")
                if rank not in groups.get(pg, ()):
                    problems.append(f"{where}: node {node.id}: pg_name {pg!r} is not a group of comm_group.json "
                                    "holding this rank")
                sequences.setdefault((pg, rank), []).append((kind, a.get("comm_size", 0)))
            elif node.type in (NodeType.COMM_SEND_NODE, NodeType.COMM_RECV_NODE):
                sending = node.type == NodeType.COMM_SEND_NODE
                key = (a.get("comm_src", rank if sending else -1), a.get("comm_dst", -1 if sending else rank),
                       a.get("comm_tag", 0), a.get("comm_size", 0))
                (sends if sending else receives)[key] += 1
    for pg, members in groups.items():
        seen = {tuple(sequences.get((pg, r), ())) for r in members}
        if len(seen) > 1:
            problems.append(f"group {pg}: its members issue different sequences of collectives")
    for key in sorted(sends.keys() | receives.keys()):
        if sends[key] != receives[key]:
            src, dst, tag, size = key
            problems.append(f"send {src}->{dst} tag {tag} ({size} bytes): {sends[key]} sends, {receives[key]} "
                            "receives")
    return problems


def _cyclic(deps: dict[int, list[int]]) -> bool:
    """Whether the dependencies among these nodes (ids absent from `deps` ignored) form a cycle (Kahn)."""
    waiting = {n: sum(d in deps for d in ds) for n, ds in deps.items()}
    users: dict[int, list[int]] = {}
    for n, ds in deps.items():
        for d in ds:
            if d in deps:
                users.setdefault(d, []).append(n)
    ready = [n for n, w in waiting.items() if w == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for u in users.get(n, ()):
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return done != len(deps)
