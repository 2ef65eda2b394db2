"""Chakra traces of a training step read back with the reference tools of mlcommons/chakra: its schema
(schema/protobuf/et_def.proto, compiled here with grpcio-tools) and its reader (src/third_party/utils/protolib.py
openFileRd / decodeMessage, the framing ASTRA-sim's feeder also reads). Needs a checkout of mlcommons/chakra
named by CHAKRA_REPO and grpcio-tools (`git clone https://github.com/mlcommons/chakra; pip install
grpcio-tools; CHAKRA_REPO=chakra pytest tests/test_chakra_reference.py -s` also prints what it read); skipped
otherwise. Nothing of chakra is copied into the package: the test imports the checkout's own files."""

from __future__ import annotations

import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

import pytest

import armillary
from armillary.errors import SpecError
from armillary.specs.workload import Training

REPO = Path(os.environ.get("CHAKRA_REPO", "/nonexistent"))
pytestmark = pytest.mark.skipif(not (REPO / "schema/protobuf/et_def.proto").is_file(),
                                reason="set CHAKRA_REPO to a checkout of mlcommons/chakra")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """(et_def_pb2, protolib) of the chakra checkout."""
    protoc = pytest.importorskip("grpc_tools.protoc")
    out = tmp_path_factory.mktemp("chakra_pb2")
    schema = REPO / "schema/protobuf"
    if protoc.main(["protoc", f"-I{schema}", f"--python_out={out}", str(schema / "et_def.proto")]) != 0:
        pytest.fail("protoc could not compile the reference et_def.proto")
    sys.path[:0] = [str(out), str(REPO / "src/third_party/utils")]
    try:
        return importlib.import_module("et_def_pb2"), importlib.import_module("protolib")
    finally:
        del sys.path[:2]


def _read(path: Path, pb2, protolib) -> tuple[object, list]:
    handle = protolib.openFileRd(str(path))
    meta = pb2.GlobalMetadata()
    assert protolib.decodeMessage(handle, meta)
    nodes = []
    while True:
        node = pb2.Node()
        if not protolib.decodeMessage(handle, node):
            return meta, nodes
        nodes.append(node)


def _attr(node, name):
    a = next(a for a in node.attr if a.name == name)
    return getattr(a, a.WhichOneof("value"))


def test_training_step_reads_back_with_types_sizes_and_groups(tmp_path, reference):
    pb2, protolib = reference
    # llama3-8b (hidden 4096) on 8 H100: tp 2 with sequence parallelism, pp 2, dp 2, ZeRO-1, seq 2048, mb 1
    w = Training(seq_len=2048, global_batch=8)
    strategy = {"tp": 2, "pp": 2, "sequence_parallel": True, "zero": 1, "attention": "flash"}
    result = armillary.simulate("llama3-8b", "dgx-h100", strategy, w, gpus=8, symmetric=False)
    from armillary.simulate.chakra import write_chakra

    with pytest.raises(SpecError, match="1-rank group"):  # the symmetric graph is refused
        write_chakra(armillary.simulate("llama3-8b", "dgx-h100", strategy, w, gpus=8).graph, tmp_path / "sym")

    paths = write_chakra(result.graph, tmp_path / "et")
    groups = json.loads((tmp_path / "et" / "trace.comm_group.json").read_text())
    coll = pb2.COMM_COLL_NODE
    types: Counter[str] = Counter()
    sizes: dict[str, set[int]] = {}
    for path in paths:
        meta, nodes = _read(path, pb2, protolib)
        assert meta.version == "0.0.4" and nodes
        for n in (n for n in nodes if n.type == coll):
            kind = pb2.CollectiveCommType.Name(_attr(n, "comm_type"))
            size, pg = _attr(n, "comm_size"), _attr(n, "pg_name")
            assert size > 0, f"{n.name}: comm_size 0"
            assert len(groups[pg]) > 1, f"{n.name}: a {len(groups[pg])}-rank group"
            types[kind] += 1
            sizes.setdefault(n.name.split(" ")[0] + " " + kind, set()).add(size)
    print("\nread back:", dict(types), {k: sorted(v) for k, v in sorted(sizes.items())})
    # SP layers: all-gathers; DP under ZeRO-1: reduce-scatter of gradients, all-gather of parameters;
    # the embedding / LM head: all-reduces
    assert {"ALL_GATHER", "REDUCE_SCATTER", "ALL_REDUCE"} <= set(types)
    # one TP message: micro-batch 1 x 2048 tokens x 4096 hidden x 2 bytes = 16 MiB; a layer's forward makes
    # 2 all-gathers + 2 reduce-scatters (4 messages), its backward 4 + 2 (Korthikanti et al. 2022 §4.2.2)
    msg = 2048 * 4096 * 2
    assert sizes["tp ALL_GATHER"] == {4 * msg, 6 * msg}
    assert sizes["embedding ALL_REDUCE"] == {msg}
