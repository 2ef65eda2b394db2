"""A training step we export runs in ASTRA-sim's analytical backend (issue 48): tools/astrasim_step.py writes the
traces and ASTRA-sim's configuration files; ASTRA-sim cannot be built here, so the export is checked against what
ASTRA-sim's reader requires (`astra_sim_problems`), which finds what made ASTRA-sim refuse earlier exports.
Measured with ASTRA-sim 518bd51 (analytical congestion-unaware, HGX-H100-validated network): Llama 3 8B tp 2 x
pp 2 x dp 2, seq 2048, global batch 8 - ASTRA-sim 331.108 ms, armillary 353.356 ms
(docs/loops-convolutions-traces.md)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from armillary.simulate.chakra import astra_sim_problems, write_chakra
from armillary.simulate.chakra.schema import NodeType, read_trace, write_trace
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskKind, Tier
from armillary.specs.communication import Collective

TOOL = Path(__file__).parent.parent / "tools" / "astrasim_step.py"


def _tool():
    spec = importlib.util.spec_from_file_location("astrasim_step", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_exported_step_is_what_astra_sim_reads(tmp_path):
    tool = _tool()
    step_s, tasks = tool.export_step(tmp_path, "llama3-8b", {"tp": 2, "pp": 2}, 2048, 8)
    assert 0 < step_s < 10 and tasks > 100
    assert astra_sim_problems(tmp_path, "step") == []
    assert sorted(p.name for p in tmp_path.glob("step.*.et")) == sorted(f"step.{r}.et" for r in range(8))
    groups = json.loads((tmp_path / "step.comm_group.json").read_text())
    assert sorted(map(int, groups)) == list(range(1, len(groups) + 1))  # ids from 1
    # ASTRA-sim's validated HGX H100 (examples/network/analytical/HGX-H100-validated.yml) and a system file
    # with every key its Sys reads
    assert "topology: [ Switch ]" in (tmp_path / "network.yml").read_text()
    system = json.loads((tmp_path / "system.json").read_text())
    assert {"scheduling-policy", "active-chunks-per-dimension", "preferred-dataset-splits",
            "all-reduce-implementation", "local-mem-bw"} <= set(system)
    assert json.loads((tmp_path / "memory.json").read_text()) == {"memory-type": "NO_MEMORY_EXPANSION"}


def _two_ranks(tmp_path: Path) -> Path:
    b = GraphBuilder()
    work = [b.add(f"work r{r}", TaskKind.COMPUTE, Category.COMPUTE, (r,), Stream.COMPUTE, 1e-3) for r in range(2)]
    ar = b.add("all-reduce", TaskKind.COLLECTIVE, Category.DP, (0, 1), Stream.DP, 1e-4, work, Tier.SCALE_UP,
               bytes=2**20, group="dp", collective=Collective.ALL_REDUCE)
    b.add("act 0->1", TaskKind.SEND, Category.PP, (0, 1), None, 1e-5, [ar], Tier.SCALE_UP, bytes=2**16,
          collective=Collective.SEND_RECV)
    write_chakra(b.graph(2), tmp_path, "step")
    return tmp_path


def _rewrite(path: Path, change) -> None:
    meta, nodes = read_trace(path)
    write_trace(path, meta, [change(n) or n for n in nodes])


def test_the_check_finds_what_astra_sim_refuses(tmp_path):
    folder = _two_ranks(tmp_path)
    assert astra_sim_problems(folder, "step") == []
    # communicator ids from 0, as exported before: CommunicatorGroup::set_id asserts id > 0
    (folder / "step.comm_group.json").write_text(json.dumps({"0": [0, 1]}))
    problems = astra_sim_problems(folder, "step")
    assert any("group id '0'" in p for p in problems) and any("pg_name '1'" in p for p in problems)
    (folder / "step.comm_group.json").write_text(json.dumps({"1": [0, 1]}))

    def reduce(node):  # a REDUCE, which Workload::issue_coll_comm does not issue
        if node.type == NodeType.COMM_COLL_NODE:
            next(a for a in node.attr if a.name == "comm_type").int64_val = 1
    _rewrite(folder / "step.0.et", reduce)
    assert any("REDUCE, which ASTRA-sim does not issue" in p for p in astra_sim_problems(folder, "step"))
    assert any("different sequences" in p for p in astra_sim_problems(folder, "step"))


@pytest.mark.parametrize("damage", ["receive", "missing", "cycle", "cpu"])
def test_the_check_finds_broken_sends_and_dependencies(tmp_path, damage):
    folder = _two_ranks(tmp_path)
    path = folder / ("step.1.et" if damage == "receive" else "step.0.et")
    meta, nodes = read_trace(path)
    if damage == "receive":
        nodes = [n for n in nodes if n.type != NodeType.COMM_RECV_NODE]
        expected = "1 sends, 0 receives"
    elif damage == "missing":
        nodes[-1].data_deps.append(99)
        expected = "depends on [99]"
    elif damage == "cycle":
        nodes[0].data_deps.append(nodes[-1].id)
        expected = "cycle"
    else:
        next(a for a in nodes[-1].attr if a.name == "is_cpu_op").bool_val = True
        expected = "marked a CPU op"
    write_trace(path, meta, nodes)
    assert any(expected in p for p in astra_sim_problems(folder, "step"))


def test_astra_sims_own_sample_passes_the_check():
    sample = Path(__file__).parent / "data" / "chakra" / "astra_sim_custom_allreduce"
    assert astra_sim_problems(sample, "custom_allreduce") == []
