"""Export a simulated training step as Chakra traces and run them in ASTRA-sim's analytical backend.

Writes `{out}/step.{rank}.et` and `{out}/step.comm_group.json` (`write_chakra`, every rank), ASTRA-sim's
network and system configurations for an 8-GPU HGX H100 (its own validated ones: one NVSwitch dimension,
400 GB/s, 936.25 ns; ring collectives, 2 active chunks, 4 splits) and, with `--astra-sim BINARY`
(`AstraSim_Analytical_Congestion_Unaware` or `_Aware`, built by ASTRA-sim's
`build/astra_analytical/build.sh`), runs it and prints its step time beside armillary's:

    python tools/astrasim_step.py /tmp/step \
        --astra-sim astra-sim/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware

ASTRA-sim replays compute nodes for their duration_micros (whole microseconds) and costs the collectives and
sends itself; its communicator ids come from comm_group.json (numbered from 1: it refuses id 0). Before running
it the traces are checked against what ASTRA-sim's reader requires (`simulate.chakra.astra_sim_problems`;
tests/test_astrasim_step.py checks the export without ASTRA-sim).

`--all-reduce BYTES` instead runs one all-reduce on ASTRA-sim's own 3-D example network (astra-network-analytical
input/Ring_FullyConnected_Switch.yml: 2 x 8 x 4 NPUs, 200 / 100 / 50 GB/s, 50 / 500 / 2,000 ns) with ring /
direct / halvingDoubling per dimension (`--network`, `--implementations` change them), pipelined
(`--splits 4`, one active chunk per dimension) and one chunk at a time (`--splits 1`), and prints armillary's
hierarchical composition beside it (comm/astra_network.py; tests/test_astrasim_direct.py holds the figures):

    python tools/astrasim_step.py /tmp/ar --all-reduce 1073741824 --local-mem-bw 160000 \
        --astra-sim astra-sim/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import armillary
from armillary.simulate.chakra import astra_sim_problems, write_chakra
from armillary.specs.workload import Training

NETWORK = "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 400.0 ]  # GB/s\nlatency: [ 936.25 ]  # ns\n"
SYSTEM = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 2,
          "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"],
          "all-gather-implementation": ["ring"], "reduce-scatter-implementation": ["ring"],
          "all-to-all-implementation": ["ring"], "collective-optimization": "localBWAware", "local-mem-bw": 3350,
          "boost-mode": 0}
MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


NETWORK_3D = {"topology": ["Ring", "FullyConnected", "Switch"], "npus_count": [2, 8, 4],
              "bandwidth": [200.0, 100.0, 50.0], "latency": [50.0, 500.0, 2000.0]}


def all_reduce(args: argparse.Namespace) -> None:
    """One all-reduce of args.all_reduce bytes on an ASTRA-sim network: ASTRA-sim (if given) and armillary."""
    from armillary.comm.astra_network import astra_sim_system
    from armillary.comm.collectives import collective
    from armillary.comm.sweep import group_of
    from armillary.simulate.chakra.schema import AttributeProto, GlobalMetadata, Node, write_trace
    from armillary.specs.communication import Collective, Composition

    net = {**NETWORK_3D, **(json.loads(args.network) if args.network else {})}
    impl = args.implementations.split(",")
    npus = 1
    for k in net["npus_count"]:
        npus *= int(k)
    args.out.mkdir(parents=True, exist_ok=True)
    for rank in range(npus):
        node = Node(id=0, name="all_reduce", type=7, attr=[  # COMM_COLL_NODE
            AttributeProto(name="is_cpu_op", bool_val=False), AttributeProto(name="comm_type", int64_val=0),
            AttributeProto(name="comm_size", int64_val=args.all_reduce)])
        write_trace(args.out / f"ar.{rank}.et", GlobalMetadata(version="0.0.4"), [node])
    (args.out / "network.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in net.items()))
    memory_rate = args.local_mem_bw * 2**30  # ASTRA-sim's GB/s
    system = astra_sim_system(net["topology"], net["npus_count"], net["bandwidth"], net["latency"], impl, memory_rate)
    group = group_of(system, npus)
    (args.out / "memory.json").write_text(json.dumps(MEMORY) + "\n")
    for splits, composition in ((4, Composition.PIPELINED), (1, Composition.SEQUENTIAL)):
        ours = float(collective(Collective.ALL_REDUCE, float(args.all_reduce), group, system,
                                composition=composition).cost.time) * 1e9
        line = f"{splits} split(s): armillary {composition.value} {ours:,.0f} ns"
        if args.astra_sim is not None:
            config = {**SYSTEM, "active-chunks-per-dimension": 1, "preferred-dataset-splits": splits,
                      "local-mem-bw": args.local_mem_bw, **{f"{op}-implementation": impl for op in (
                          "all-reduce", "all-gather", "reduce-scatter", "all-to-all")}}
            (args.out / "system.json").write_text(json.dumps(config, indent=1) + "\n")
            cycles = run_astra_sim(args.astra_sim, args.out / "ar", None, args.out)
            line += f", ASTRA-sim {cycles:,} ns ({ours / cycles - 1:+.1%})"
        print(line)


def run_astra_sim(binary: Path, workload: Path, comm_group: Path | None, folder: Path) -> int:
    """ASTRA-sim's time for `workload` (its slowest rank, cycles = ns) with folder's configuration files."""
    command = [str(binary), f"--workload-configuration={workload}",
               f"--system-configuration={folder / 'system.json'}",
               f"--remote-memory-configuration={folder / 'memory.json'}",
               f"--network-configuration={folder / 'network.yml'}"]
    if comm_group is not None:
        command.insert(2, f"--comm-group-configuration={comm_group}")
    run = subprocess.run(command, capture_output=True, text=True, check=False)
    cycles = [int(c) for c in re.findall(r"finished, (\d+) cycles", run.stdout + run.stderr)]
    if run.returncode != 0 or not cycles:
        raise SystemExit(f"ASTRA-sim failed (exit {run.returncode}):\n{(run.stdout + run.stderr)[-2000:]}")
    return max(cycles)


def export_step(out: Path, model: str, strategy: dict[str, object], seq_len: int,
                global_batch: int) -> tuple[float, int]:
    """Simulate the step on 8 H100 (every rank), write `out/step.{rank}.et`, `step.comm_group.json` and
    ASTRA-sim's network / system / memory files for the HGX H100; return armillary's step time (s) and the
    number of tasks."""
    result = armillary.simulate(model, "dgx-h100", strategy, Training(seq_len=seq_len, global_batch=global_batch),
                                gpus=8, symmetric=False)
    write_chakra(result.graph, out, "step")
    (out / "network.yml").write_text(NETWORK)
    (out / "system.json").write_text(json.dumps(SYSTEM, indent=1) + "\n")
    (out / "memory.json").write_text(json.dumps(MEMORY) + "\n")
    return result.step_time_s, len(result.graph.tasks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the traces and configurations")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--strategy", default='{"tp": 2, "pp": 2}', help="strategy as JSON")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--astra-sim", type=Path, help="ASTRA-sim analytical binary to run the traces with")
    parser.add_argument("--all-reduce", type=int, help="bytes: one all-reduce on an ASTRA-sim network instead")
    parser.add_argument("--network", help="JSON replacing fields of the 3-D network (topology, npus_count, ...)")
    parser.add_argument("--implementations", default="ring,direct,halvingDoubling", help="one per dimension")
    parser.add_argument("--local-mem-bw", type=float, default=1600.0, help="ASTRA-sim's local-mem-bw, GB/s")
    args = parser.parse_args()
    if args.all_reduce is not None:
        all_reduce(args)
        return
    step_s, tasks = export_step(args.out, args.model, json.loads(args.strategy), args.seq_len, args.global_batch)
    print(f"armillary: step {step_s * 1e3:.3f} ms ({tasks:,} tasks, 8 ranks)")
    problems = astra_sim_problems(args.out, "step")
    if problems:
        raise SystemExit("the traces would not run in ASTRA-sim:\n" + "\n".join(problems[:20]))
    if args.astra_sim is None:
        return
    cycles = run_astra_sim(args.astra_sim, args.out / "step", args.out / "step.comm_group.json", args.out)
    print(f"ASTRA-sim: step {cycles / 1e6:.3f} ms (slowest rank; 1 cycle = 1 ns)")


if __name__ == "__main__":
    main()
