"""A synthesized schedule as Chakra execution traces: one `{prefix}.{rank}.et` per device with a
COMM_SEND_NODE and a COMM_RECV_NODE per transfer (the point-to-point form ASTRA-sim replays), using the
message classes and framing of `simulate/chakra/schema.py`.

Per device, a send waits (data_deps) for the last receive of its chunk on that device and for the previous
send on the same link; a receive waits for the previous receive on the same link (each link runs its
transfers in order). Sends and receives are matched by `comm_tag` = the transfer's index.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from armillary.comm.synthesis import Schedule
from armillary.simulate.chakra.schema import (
    VERSION,
    AttributeProto,
    GlobalMetadata,
    Node,
    NodeType,
    read_trace,
    write_trace,
)
from armillary.writing import replaced_files


def write_schedule(schedule: Schedule, directory: Path, prefix: str = "synth") -> list[Path]:
    """Write the traces (every file, or none); return their paths."""
    n = schedule.links.nodes
    nodes: list[list[Any]] = [[] for _ in range(n)]
    last_recv: dict[tuple[int, int], int] = {}  # (device, chunk) -> node id of its last receive
    last_on_link: dict[tuple[int, int], int] = {}  # (link, side 0 send / 1 receive) -> node id
    size = round(schedule.chunk_bytes)
    for k in np.argsort(schedule.start, kind="stable"):
        u, v, c, link = int(schedule.src[k]), int(schedule.dst[k]), int(schedule.chunk[k]), int(schedule.link[k])
        send_id, recv_id = 2 * int(k), 2 * int(k) + 1
        duration = round(float(schedule.end[k] - schedule.start[k]) * 1e6)
        for side, (rank, node_id, kind) in enumerate(((u, send_id, NodeType.COMM_SEND_NODE),
                                                      (v, recv_id, NodeType.COMM_RECV_NODE))):
            deps = [last_on_link[(link, side)]] if (link, side) in last_on_link else []
            if side == 0 and (u, c) in last_recv:
                deps.append(last_recv[(u, c)])
            node = Node(id=node_id, name=f"chunk{c} {u}->{v}", type=int(kind), data_deps=sorted(deps),
                        duration_micros=duration)
            node.attr.extend([AttributeProto(name="is_cpu_op", bool_val=False),
                              AttributeProto(name="comm_src", int32_val=u),
                              AttributeProto(name="comm_dst", int32_val=v),
                              AttributeProto(name="comm_tag", int32_val=int(k)),
                              AttributeProto(name="comm_size", int64_val=size),
                              AttributeProto(name="chunk", int64_val=c)])
            nodes[rank].append(node)
            last_on_link[(link, side)] = node_id
        last_recv[(v, c)] = recv_id
    with replaced_files(directory) as staging:
        for rank in range(n):
            meta = GlobalMetadata(version=VERSION, attr=[
                AttributeProto(name="producer", string_val="armillary synthesis"),
                AttributeProto(name="rank", int64_val=rank)])
            write_trace(staging / f"{prefix}.{rank}.et", meta, nodes[rank])
    return [directory / f"{prefix}.{rank}.et" for rank in range(n)]


def read_transfers(paths: list[Path]) -> list[tuple[int, int, int]]:
    """(src, dst, chunk) of every send in the traces, sorted: for a round-trip check."""
    out = []
    for path in paths:
        _, nodes = read_trace(path)
        for node in nodes:
            if node.type == int(NodeType.COMM_SEND_NODE):
                a = {x.name: x for x in node.attr}
                out.append((a["comm_src"].int32_val, a["comm_dst"].int32_val, a["chunk"].int64_val))
    return sorted(out)
