"""Chakra traces both ways with ASTRA-sim (issue 48): communicator groups numbered from 1 on export (ASTRA-sim's
CommunicatorGroup requires an id > 0), and ASTRA-sim-style send/recv custom-collective traces on import (a
matched send and receive keep their own dependencies: the transfer waits for the send's, the receive's
users for the transfer and the receive's)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import armillary
from armillary.comm.collectives import send_recv
from armillary.plan.placement import pair_across
from armillary.simulate.chakra import NodeType, read_chakra, schema, write_chakra
from armillary.simulate.chakra.schema import AttributeProto, GlobalMetadata, Node, read_trace
from armillary.simulate.engine import run
from armillary.simulate.graph import TaskKind
from armillary.specs.loading import load_system
from armillary.specs.workload import Training


def _node(id: int, name: str, kind: NodeType, deps: tuple[int, ...] = (), **attrs: Any) -> Any:
    node = Node(id=id, name=name, type=int(kind), data_deps=list(deps))
    for key, value in {"is_cpu_op": False, **attrs}.items():
        field = {bool: "bool_val", int: "int64_val"}[type(value)]
        node.attr.append(AttributeProto(name=key, **{field: value}))
    return node


def _write(directory: Path, ranks: dict[int, list[Any]]) -> None:
    for rank, nodes in ranks.items():
        with open(directory / f"ring.{rank}.et", "wb") as out:
            for message in (GlobalMetadata(version="0.0.4"), *nodes):
                body = message.SerializeToString()
                out.write(schema.encode_varint(len(body)) + body)


def ring_all_gather(n: int, size: int) -> dict[int, list[Any]]:
    """A ring all-gather as ASTRA-sim's custom collectives write it (one file per NPU, send and receive nodes
    with comm_src / comm_dst / comm_tag): in step s each rank sends the chunk it received in step s - 1 to
    its right neighbour and posts the receive from its left one after its own send."""
    out: dict[int, list[Any]] = {}
    for r in range(n):
        nodes, right, left, node_id, received = [], (r + 1) % n, (r - 1) % n, 0, None
        for step in range(n - 1):
            send = node_id
            nodes.append(_node(send, f"send s{step}", NodeType.COMM_SEND_NODE,
                               () if received is None else (received,), comm_src=r, comm_dst=right,
                               comm_tag=step, comm_size=size))
            received = node_id + 1
            nodes.append(_node(received, f"recv s{step}", NodeType.COMM_RECV_NODE, (send,), comm_src=left,
                               comm_dst=r, comm_tag=step, comm_size=size))
            node_id += 2
        out[r] = nodes
    return out


@pytest.mark.parametrize("n", [2, 4, 8])
def test_ring_of_sends_and_receives_reads_and_runs(tmp_path, n):
    system = load_system("dgx-h100", 8)
    size = 64 * 2**20
    _write(tmp_path, ring_all_gather(n, size))
    graph = read_chakra(tmp_path, system)  # refused before as "dependencies ... form a cycle"
    sends = [t for t in graph.tasks if t.kind is TaskKind.SEND]
    receives = [t for t in graph.tasks if t.kind is TaskKind.COMPUTE]
    assert len(sends) == len(receives) == n * (n - 1)
    assert all(t.duration_ns == 0 and t.stream is None for t in receives)
    # every step's transfers run side by side; step s + 1 starts when step s's message has arrived: the ring
    # takes n - 1 transfers, each on one NVLink pair
    one = round(send_recv(size, pair_across(0, len(system.sizes)), system).time * 1e9)
    assert all(t.duration_ns == one for t in sends)
    assert run(graph).makespan_ns == (n - 1) * one


# ASTRA-sim's own custom-collective sample, committed: tests/test_astrasim_sendrecv.py


def test_receive_waits_for_its_own_dependencies(tmp_path):
    # rank 1 posts its receive only after a 1 ms compute; the message arrives earlier: the receive's user
    # starts at 1 ms, the transfer itself at 0
    system = load_system("dgx-h100", 8)
    _write(tmp_path, {
        0: [_node(0, "send", NodeType.COMM_SEND_NODE, comm_src=0, comm_dst=1, comm_tag=5, comm_size=1024)],
        1: [Node(id=0, name="work", type=int(NodeType.COMP_NODE), duration_micros=1000),
            _node(1, "recv", NodeType.COMM_RECV_NODE, (0,), comm_src=0, comm_dst=1, comm_tag=5, comm_size=1024),
            Node(id=2, name="use", type=int(NodeType.COMP_NODE), data_deps=[1], duration_micros=10)],
    })
    graph = read_chakra(tmp_path, system)
    timeline = run(graph)
    at = {t.name: i for i, t in enumerate(graph.tasks)}
    assert timeline.start_ns[at["send"]] == 0
    assert timeline.end_ns[at["send"]] < 1_000_000
    assert timeline.start_ns[at["use"]] == 1_000_000 and timeline.makespan_ns == 1_010_000


def test_exported_communicator_groups_number_from_one(tmp_path):
    # ASTRA-sim reads {prefix}.comm_group.json and builds CommunicatorGroup(id, ...) with id > 0
    w = Training(seq_len=1024, global_batch=4)
    result = armillary.simulate("llama3-8b", "dgx-h100", {"tp": 2, "pp": 2}, w, gpus=4, symmetric=False)
    paths = write_chakra(result.graph, tmp_path, "step")
    groups = json.loads((tmp_path / "step.comm_group.json").read_text())
    assert groups and all(int(name) >= 1 for name in groups)
    assert sorted(int(name) for name in groups) == list(range(1, len(groups) + 1))
    used = set()
    for path in paths:
        _, nodes = read_trace(path)
        for node in nodes:
            if node.type == NodeType.COMM_COLL_NODE:
                pg = next(a.string_val for a in node.attr if a.name == "pg_name")
                assert pg in groups
                used.add(pg)
    assert used == set(groups)
