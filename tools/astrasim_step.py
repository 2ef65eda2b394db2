"""Export a simulated training step as Chakra traces and run them in ASTRA-sim's analytical backend.

Writes `{out}/step.{rank}.et` and `{out}/step.comm_group.json` (`write_chakra`, every rank), ASTRA-sim's
network and system configurations for an 8-GPU HGX H100 (its own validated ones: one NVSwitch dimension,
400 GB/s, 936.25 ns; ring collectives, 2 active chunks, 4 splits) and, with `--astra-sim BINARY`
(`AstraSim_Analytical_Congestion_Unaware` or `_Aware`, built by ASTRA-sim's
`build/astra_analytical/build.sh`), runs it and prints its step time beside armillary's:

    python tools/astrasim_step.py /tmp/step \
        --astra-sim astra-sim/build/astra_analytical/build/bin/AstraSim_Analytical_Congestion_Unaware

ASTRA-sim replays compute nodes for their duration_micros (whole microseconds) and costs the collectives and
sends itself; its communicator ids come from comm_group.json (numbered from 1: it refuses id 0).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
from pathlib import Path

import armillary
from armillary.simulate.chakra import write_chakra
from armillary.specs.workload import Training

NETWORK = "topology: [ Switch ]\nnpus_count: [ 8 ]\nbandwidth: [ 400.0 ]  # GB/s\nlatency: [ 936.25 ]  # ns\n"
SYSTEM = {"scheduling-policy": "LIFO", "endpoint-delay": 10, "active-chunks-per-dimension": 2,
          "preferred-dataset-splits": 4, "all-reduce-implementation": ["ring"],
          "all-gather-implementation": ["ring"], "reduce-scatter-implementation": ["ring"],
          "all-to-all-implementation": ["ring"], "collective-optimization": "localBWAware", "local-mem-bw": 3350,
          "boost-mode": 0}
MEMORY = {"memory-type": "NO_MEMORY_EXPANSION"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the traces and configurations")
    parser.add_argument("--model", default="llama3-8b")
    parser.add_argument("--strategy", default='{"tp": 2, "pp": 2}', help="strategy as JSON")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--astra-sim", type=Path, help="ASTRA-sim analytical binary to run the traces with")
    args = parser.parse_args()
    result = armillary.simulate(args.model, "dgx-h100", json.loads(args.strategy),
                                Training(seq_len=args.seq_len, global_batch=args.global_batch), gpus=8,
                                symmetric=False)
    write_chakra(result.graph, args.out, "step")
    (args.out / "network.yml").write_text(NETWORK)
    (args.out / "system.json").write_text(json.dumps(SYSTEM, indent=1) + "\n")
    (args.out / "memory.json").write_text(json.dumps(MEMORY) + "\n")
    print(f"armillary: step {result.step_time_s * 1e3:.3f} ms ({len(result.graph.tasks):,} tasks, 8 ranks)")
    if args.astra_sim is None:
        return
    run = subprocess.run([str(args.astra_sim), f"--workload-configuration={args.out / 'step'}",
                          f"--comm-group-configuration={args.out / 'step.comm_group.json'}",
                          f"--system-configuration={args.out / 'system.json'}",
                          f"--remote-memory-configuration={args.out / 'memory.json'}",
                          f"--network-configuration={args.out / 'network.yml'}"],
                         capture_output=True, text=True, check=False)
    cycles = [int(c) for c in re.findall(r"finished, (\d+) cycles", run.stdout + run.stderr)]
    if run.returncode != 0 or not cycles:
        raise SystemExit(f"ASTRA-sim failed (exit {run.returncode}):\n{(run.stdout + run.stderr)[-2000:]}")
    print(f"ASTRA-sim: step {max(cycles) / 1e6:.3f} ms (slowest of {len(cycles)} ranks; 1 cycle = 1 ns)")


if __name__ == "__main__":
    main()
