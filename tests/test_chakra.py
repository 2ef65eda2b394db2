"""Chakra execution traces: the schema, the file framing, a lossless round trip and foreign traces."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import on_nodes

from armillary.comm.collectives import collective, send_recv
from armillary.errors import SpecError
from armillary.plan.placement import pair_across
from armillary.simulate.chakra import CollectiveCommType, NodeType, read_chakra, schema, write_chakra
from armillary.simulate.chakra.schema import AttributeProto, GlobalMetadata, Node
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system

PROTO = Path(schema.__file__).with_name("et_def.proto")


def _graph() -> TaskGraph:
    """Compute on four ranks, a 4-rank all-reduce, a 2-rank all-gather, sends both ways, offload copies
    and a dependency on another rank's task that no communication carries."""
    b = GraphBuilder()
    fwd = [b.add(f"fwd r{r}", TaskKind.COMPUTE, Category.COMPUTE, (r,), Stream.COMPUTE, 1.5e-3 + r * 1e-6,
                 flop=3.1e12, bytes=2.5e8 + 0.5) for r in range(4)]
    ar = b.add("grad all-reduce", TaskKind.COLLECTIVE, Category.DP, (0, 1, 2, 3), Stream.DP, 2.345678e-3, fwd,
               Tier.SCALE_UP, bytes=1.25e8, group="dp", collective="all_reduce")
    bwd1 = b.add("bwd r1", TaskKind.COMPUTE, Category.RECOMPUTE, (1,), Stream.COMPUTE, 2e-3, [fwd[1]], flop=1e12)
    s01 = b.add("act 0->1", TaskKind.SEND, Category.PP, (0, 1), None, 4.2e-5, [fwd[0], bwd1], Tier.SCALE_OUT,
                bytes=1.6e7, group="pp 0->1", collective="send_recv")
    bwd1b = b.add("bwd2 r1", TaskKind.COMPUTE, Category.COMPUTE, (1,), Stream.COMPUTE, 1e-3, [s01])
    s10 = b.add("grad 1->0", TaskKind.SEND, Category.PP, (1, 0), None, 4.3e-5, [bwd1b, fwd[0]], Tier.SCALE_OUT,
                bytes=1.6e7, group="pp 1->0", collective="send_recv")
    b.add("optimizer r0", TaskKind.COMPUTE, Category.OPTIMIZER, (0,), Stream.COMPUTE, 5e-4, [s10, ar])
    off = b.add("offload states r2", TaskKind.MEMORY, Category.OFFLOAD, (2,), Stream.OFFLOAD, 3e-3, [ar],
                Tier.MEMORY, bytes=1e9)
    b.add("reload states r2", TaskKind.MEMORY, Category.OFFLOAD, (2,), Stream.OFFLOAD, 3e-3, [off], Tier.MEMORY,
          bytes=1e9)
    b.add("r3 waits on r2", TaskKind.COMPUTE, Category.COMPUTE, (3,), Stream.COMPUTE, 0.0, [off])
    b.add("tp all-gather", TaskKind.COLLECTIVE, Category.TP, (3, 2), Stream.TP, 1e-4, [fwd[2], fwd[3]],
          Tier.SCALE_UP, bytes=8e6, group="tp", collective="all_gather")
    return b.graph(4, labels=("pp0 dp0", "pp1 dp0", "pp0 dp1", "pp1 dp1"), weights=(2, 2, 1, 3))


def _messages(path: Path) -> list[bytes]:
    """Split a file by its varint length prefixes, independently of the module's reader."""
    data, out, pos = path.read_bytes(), [], 0
    while pos < len(data):
        size = shift = 0
        while True:
            byte = data[pos]
            pos += 1
            size |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        out.append(data[pos:pos + size])
        pos += size
    assert pos == len(data)
    return out


def _attrs(node: Any) -> dict[str, Any]:
    return {a.name: a for a in node.attr}


def test_round_trip_is_exact(tmp_path: Path) -> None:
    graph = _graph()
    paths = write_chakra(graph, tmp_path)
    assert [p.name for p in paths] == [f"trace.{r}.et" for r in range(4)]
    back = read_chakra(tmp_path)
    assert back.tasks == graph.tasks  # names, kinds, ranks, streams, durations, deps, bytes: task for task
    assert back == graph
    assert read_chakra(tmp_path, prefix="trace") == graph
    for rank, path in enumerate(paths):  # Chakra consumers wait for what the simulator waits for on this rank
        for node in (Node.FromString(m) for m in _messages(path)[1:]):
            task = graph.tasks[node.id]
            assert set(node.data_deps) == {d for d in task.after if rank in graph.tasks[d].ranks}


def test_files_have_chakra_framing_and_standard_fields(tmp_path: Path) -> None:
    graph = _graph()
    write_chakra(graph, tmp_path, prefix="job")
    raw = _messages(tmp_path / "job.0.et")
    meta = GlobalMetadata.FromString(raw[0])
    assert meta.version == "0.0.4"
    nodes = [Node.FromString(m) for m in raw[1:]]
    # rank 0 takes part in: fwd r0, the all-reduce, both sends, the optimizer step
    assert [(n.id, n.name) for n in nodes] == [(0, "fwd r0"), (4, "grad all-reduce"), (6, "act 0->1"),
                                               (8, "grad 1->0"), (9, "optimizer r0")]
    fwd, ar, send, recv, opt = nodes
    assert fwd.type == NodeType.COMP_NODE == 4
    assert fwd.duration_micros == 1500  # 1.5 ms
    a = _attrs(fwd)
    # the value types ASTRA-sim's feeder reads (mlcommons/chakra src/feeder/et_feeder_node.cpp)
    assert a["num_ops"].int64_val == 3_100_000_000_000
    assert a["tensor_size"].uint64_val == 250_000_000  # 2.5e8 + 0.5 rounds to even
    assert a["is_cpu_op"].WhichOneof("value") == "bool_val" and not a["is_cpu_op"].bool_val
    assert a["duration_ns"].int64_val == 1_500_000
    assert ar.type == NodeType.COMM_COLL_NODE == 7
    a = _attrs(ar)
    assert a["comm_type"].int64_val == CollectiveCommType.ALL_REDUCE == 0
    assert a["comm_size"].int64_val == 125_000_000
    assert list(a["participants"].int64_list.values) == [0, 1, 2, 3]
    assert sorted(ar.data_deps) == [0]  # of the four fwd tasks, only rank 0's runs here
    assert send.type == NodeType.COMM_SEND_NODE == 5 and recv.type == NodeType.COMM_RECV_NODE == 6
    a = _attrs(send)
    assert (a["comm_src"].int32_val, a["comm_dst"].int32_val, a["comm_tag"].int32_val) == (0, 1, 6)
    assert a["comm_size"].int64_val == 16_000_000
    assert list(send.data_deps) == [0]  # not bwd r1 (task 5), which runs on rank 1
    a = _attrs(recv)
    assert (a["comm_src"].int32_val, a["comm_dst"].int32_val, a["comm_tag"].int32_val) == (1, 0, 8)
    assert list(recv.data_deps) == [0]  # the receiver's fwd r0; bwd2 r1 is the sender's
    assert sorted(opt.data_deps) == [0, 4, 8]  # recv, all-reduce, and fwd r0 before it on the compute stream
    # rank 1: the receive of 0->1 waits for the receiver's bwd r1 only
    nodes1 = {n.id: n for n in (Node.FromString(m) for m in _messages(tmp_path / "job.1.et")[1:])}
    assert nodes1[6].type == NodeType.COMM_RECV_NODE and list(nodes1[6].data_deps) == [5]
    assert sorted(nodes1[7].data_deps) == [5, 6]  # bwd2 r1: the receive and the stream's previous task
    # rank 3: the dependency on rank 2's offload has no Chakra edge, only the stream order; armillary keeps it
    nodes3 = {n.id: n for n in (Node.FromString(m) for m in _messages(tmp_path / "job.3.et")[1:])}
    assert list(nodes3[12].data_deps) == [3] and list(_attrs(nodes3[12])["deps"].int64_list.values) == [10]
    nodes2 = {n.id: n for n in (Node.FromString(m) for m in _messages(tmp_path / "job.2.et")[1:])}
    assert nodes2[10].type == NodeType.MEM_STORE_NODE and nodes2[11].type == NodeType.MEM_LOAD_NODE
    groups = json.loads((tmp_path / "job.comm_group.json").read_text())
    assert groups == {"1": [0, 1, 2, 3], "2": [2, 3]}  # from 1: ASTRA-sim's communicator groups need id > 0
    assert _attrs(nodes3[13])["pg_name"].string_val == "2"


def test_varint_framing() -> None:
    assert schema.encode_varint(1) == b"\x01"
    assert schema.encode_varint(300) == b"\xac\x02"  # protobuf.dev encoding guide example
    assert schema.decode_varint(b"\x00\xac\x02", 1) == (300, 3)
    with pytest.raises(ValueError):
        schema.decode_varint(b"\xac", 0)


@pytest.mark.parametrize(("kind", "value"), [
    ("bool_val", False), ("bool_val", True), ("int32_val", 0), ("int32_val", -1), ("int32_val", 2**31 - 1),
    ("int64_val", 0), ("int64_val", -1), ("int64_val", 3_100_000_000_000), ("int64_val", 2**63 - 1),
    ("uint64_val", 250_000_000), ("double_val", 0.0), ("double_val", 2.5e8 + 0.5), ("double_val", -1e-300),
    ("string_val", ""), ("string_val", "pp 0->1 é"), ("int64_list", ()), ("int64_list", (0, 127, 128, 16383)),
    ("int64_list", (16384, 2**21 - 1, 2**21, 2**40, -1))])
def test_hand_encoded_attributes_are_what_the_message_classes_write(kind: str, value: Any) -> None:
    field = {kind: schema.Int64List(values=value) if kind == "int64_list" else value}
    expected = Node(attr=[AttributeProto(name="some name", **field)]).SerializeToString()
    assert schema.encode_attr("some name", kind, value) == expected


def test_a_node_encoded_in_two_parts_parses_as_one() -> None:
    attrs = schema.encode_attr("is_cpu_op", "bool_val", False) + schema.encode_attr("task", "int64_val", 70_000)
    for node_id, name, micros in ((70_000, "fwd r0", 1500), (0, "", 0), (1, "x", 2**40)):
        head = schema.encode_node_head(node_id, schema.encode_name_duration(name, micros) + attrs)
        encoded = head + schema.encode_node_tail(int(NodeType.COMM_RECV_NODE), [3, 20_000, 2**30])
        expected = Node(id=node_id, name=name, type=int(NodeType.COMM_RECV_NODE), data_deps=[3, 20_000, 2**30],
                        duration_micros=micros, attr=[AttributeProto(name="is_cpu_op", bool_val=False),
                                                      AttributeProto(name="task", int64_val=70_000)])
        assert Node.FromString(encoded) == expected
        assert schema.node_id(encoded) == (node_id or None)  # id 0 is not written: the reader parses it
    assert schema.node_id(Node(name="no id").SerializeToString()) is None


def test_a_node_of_ours_whose_task_is_not_its_id_is_refused(tmp_path: Path) -> None:
    write_chakra(_graph(), tmp_path)
    path = tmp_path / "trace.1.et"
    raw = _messages(path)
    node = Node.FromString(raw[1])
    node.id += 100
    with open(path, "wb") as out:
        schema.write_frames(out, [raw[0], node.SerializeToString(), *raw[2:]])
    with pytest.raises(SpecError, match="carries task"):
        read_chakra(tmp_path)


def _proto_schema(text: str) -> tuple[dict[str, dict[str, tuple[int, str, bool]]], dict[str, dict[str, int]]]:
    """Messages (field -> number, type, repeated) and enums of a .proto file, enough for et_def.proto."""
    messages: dict[str, dict[str, tuple[int, str, bool]]] = {}
    enums: dict[str, dict[str, int]] = {}
    stack: list[tuple[str, str]] = []
    token = re.compile(r"(message|enum|oneof)\s+(\w+)\s*\{|(\})|(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+)\s*;"
                       r"|(\w+)\s*=\s*(\d+)\s*;")
    for m in token.finditer(re.sub(r"//[^\n]*", "", text)):
        block, name, close, repeated, kind, field, number, value, value_number = m.groups()
        if block:
            stack.append((block, name))
            if block == "message":
                messages[name] = {}
            elif block == "enum":
                enums[name] = {}
        elif close:
            stack.pop()
        elif field:
            owner = next(n for b, n in reversed(stack) if b == "message")
            messages[owner][field] = (int(number), kind, bool(repeated))
        else:
            enums[stack[-1][1]][value] = int(value_number)
    return messages, enums


def test_runtime_schema_matches_proto_file() -> None:
    messages, enums = _proto_schema(PROTO.read_text())
    assert messages == {name: {f: (n, t, r) for f, n, t, r in fields} for name, fields in schema.MESSAGES.items()}
    assert enums == {e.__name__: {m.name: m.value for m in e} for e in schema.ENUMS}
    assert messages["Node"]["data_deps"] == (5, "uint64", True)  # mlcommons/chakra schema/protobuf/et_def.proto
    assert messages["AttributeProto"]["bytes_list"] == (32, "BytesList", False)


def test_runtime_schema_matches_protoc(tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc")
    from google.protobuf import descriptor_pb2

    out = tmp_path / "et_def.pb"
    assert protoc.main(["protoc", f"-I{PROTO.parent}", f"--descriptor_set_out={out}", str(PROTO)]) == 0
    compiled = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes()).file[0]
    for message in compiled.message_type:
        for field in message.field:
            field.ClearField("json_name")
    assert compiled == schema.file_descriptor()


def _node(id: int, name: str, kind: NodeType, deps: tuple[int, ...] = (), micros: int = 0, **attrs: Any) -> Any:
    node = Node(id=id, name=name, type=int(kind), data_deps=list(deps), duration_micros=micros)
    for key, value in attrs.items():
        field = {bool: "bool_val", str: "string_val", int: "int64_val"}[type(value)]
        node.attr.append(AttributeProto(name=key, **{field: value}))
    return node


def _write_foreign(directory: Path, ranks: dict[int, list[Any]]) -> None:
    """Files as another tool writes them: no armillary attributes; some comm_size / comm_type as uint64."""
    for rank, nodes in ranks.items():
        with open(directory / f"foreign.{rank}.et", "wb") as out:
            for message in (GlobalMetadata(version="0.0.4"), *nodes):
                body = message.SerializeToString()
                out.write(schema.encode_varint(len(body)) + body)


def _foreign_trace(directory: Path) -> None:
    coll, cpu = NodeType.COMM_COLL_NODE, dict(is_cpu_op=False)
    allreduce = _node(4, "allreduce grads", coll, (2,), comm_type=0, comm_size=64_000_000, pg_name="dp_grad", **cpu)
    allreduce.attr[1].uint64_val = 64_000_000  # the oneof now holds uint64_val, as some converters write it
    _write_foreign(directory, {
        0: [_node(1, "fwd", NodeType.COMP_NODE, micros=50, **cpu),
            _node(2, "gemm", NodeType.COMP_NODE, (1,), num_ops=3_120_000_000_000, **cpu),
            _node(3, "send act", NodeType.COMM_SEND_NODE, (2,), comm_dst=1, comm_tag=7, comm_size=1_000_000, **cpu),
            allreduce,
            _node(5, "marker", NodeType.METADATA_NODE, (4,)),  # a CPU op by default: dropped
            _node(6, "opt", NodeType.COMP_NODE, (5,), micros=10, **cpu),
            _node(7, "tp gather", coll, (1,), comm_type=2, comm_size=8_000_000, pg_name="tp_0", **cpu)],
        1: [_node(1, "fwd1", NodeType.COMP_NODE, micros=20, **cpu),
            _node(2, "recv act", NodeType.COMM_RECV_NODE, (1,), comm_src=0, comm_tag=7, comm_size=1_000_000, **cpu),
            _node(3, "bwd1", NodeType.COMP_NODE, (2,), micros=5, **cpu),
            _node(4, "tp gather peer", coll, (), comm_type=2, comm_size=8_000_000, pg_name="tp_0", **cpu),
            _node(5, "offload", NodeType.MEM_STORE_NODE, (3,), tensor_size=3_200_000_000, **cpu)],
        8: [_node(10, "allreduce peer", coll, (), comm_type=0, comm_size=64_000_000, pg_name="dp_grad", **cpu),
            _node(11, "noop", NodeType.INVALID_NODE, (10,), **cpu)],
    })


def test_foreign_trace_is_matched_and_costed(tmp_path: Path) -> None:
    _foreign_trace(tmp_path)
    system = load_system("dgx-a100", 16)  # 8 GPUs per node: ranks 0, 1 share a node, rank 8 is in the next
    graph = read_chakra(tmp_path, system)
    assert graph.ranks == 9 and len(graph.tasks) == 11  # the marker is dropped; the receive is its own task
    by_name = {t.name: t for t in graph.tasks}
    index = {t.name: i for i, t in enumerate(graph.tasks)}

    def deps(name: str) -> set[str]:
        return {graph.tasks[d].name for d in by_name[name].deps}

    assert by_name["fwd"].duration_ns == 50_000  # duration_micros
    assert by_name["gemm"].duration_ns == 10_000_000  # 3.12e12 FLOP at the A100's 312 TFLOP/s bf16
    assert by_name["gemm"].flop == 3.12e12
    send = by_name["send act"]
    assert (send.kind, send.ranks, send.stream, send.tier) == (TaskKind.SEND, (0, 1), None, Tier.SCALE_UP)
    assert deps("send act") == {"gemm"}  # the sender's dependencies: the transfer starts when they are done
    recv = by_name["recv act"]  # completes when the message has arrived and the receiver's fwd1 is done
    assert (recv.kind, recv.ranks, recv.stream, recv.duration_ns) == (TaskKind.COMPUTE, (1,), None, 0)
    assert deps("recv act") == {"send act", "fwd1"}
    assert send.duration_ns == round(send_recv(1e6, pair_across(0, 2), system).time * 1e9)
    ar = by_name["allreduce grads"]
    assert (ar.kind, ar.ranks, ar.stream, ar.tier) == (TaskKind.COLLECTIVE, (0, 8), Stream.DP, Tier.SCALE_OUT)
    assert ar.bytes == 64e6 and ar.collective == "all_reduce" and ar.category is Category.DP
    one_per_node = collective(Collective.ALL_REDUCE, 64e6, on_nodes(2.0, 1.0), system).cost.time
    assert ar.duration_ns == round(one_per_node * 1e9)
    assert ar.duration_ns > 5 * round(collective(Collective.ALL_REDUCE, 64e6, on_nodes(2.0, 2.0), system).cost.time
                                      * 1e9)  # across nodes, not NVLink
    assert deps("allreduce grads") == {"gemm"}
    assert deps("opt") == {"allreduce grads"}  # through the dropped marker
    assert {graph.tasks[d].name for d in by_name["opt"].after} == {"allreduce grads", "gemm"}  # + stream order
    gather = by_name["tp gather"]
    assert (gather.ranks, gather.stream, gather.tier, gather.collective) == ((0, 1), Stream.TP, Tier.SCALE_UP,
                                                                             "all_gather")
    assert gather.duration_ns == round(collective(Collective.ALL_GATHER, 8e6, on_nodes(2.0, 2.0), system)
                                       .cost.time * 1e9)
    assert deps("tp gather") == {"fwd"}
    assert deps("bwd1") == {"recv act"}
    offload = by_name["offload"]
    assert (offload.kind, offload.stream, offload.tier) == (TaskKind.MEMORY, Stream.OFFLOAD, Tier.MEMORY)
    assert offload.duration_ns == 125_000_000  # 3.2 GB over PCIe 4.0 x16: 32 GB/s at 80 %
    noop = by_name["noop"]
    assert (noop.kind, noop.ranks, noop.duration_ns) == (TaskKind.COMPUTE, (8,), 0)
    assert deps("noop") == {"allreduce grads"}
    assert all(d < i for i, t in enumerate(graph.tasks) for d in t.deps)  # a topological order
    assert index["fwd"] < index["gemm"] < index["opt"]  # rank 0's compute stream in file order


def test_foreign_trace_needs_a_system(tmp_path: Path) -> None:
    _foreign_trace(tmp_path)
    with pytest.raises(SpecError, match="needs a system"):
        read_chakra(tmp_path)


def test_unmatched_send_is_an_error(tmp_path: Path) -> None:
    cpu = dict(is_cpu_op=False)
    _write_foreign(tmp_path, {
        0: [_node(1, "send", NodeType.COMM_SEND_NODE, comm_dst=1, comm_tag=3, comm_size=10, **cpu)],
        1: [_node(1, "recv", NodeType.COMM_RECV_NODE, comm_src=0, comm_tag=4, comm_size=10, **cpu)],
    })
    with pytest.raises(ValueError, match="no matching"):
        read_chakra(tmp_path, load_system("dgx-a100", 16))
