"""Monotone physics at scale: 20,000+ random feasible configurations, none slower with twice the FLOP/s,
HBM or network bandwidth, or half the network latency, in the estimator (the CI test checks about 3,400)
and, with --simulator, 20,000 simulated steps of random small configurations (the CI test simulates 2,000).
With --resources [N], N (default 20,000) random feasible training configurations of presets (dense and MoE
models, ZeRO 0-3, CP, EP, recomputation, offload, every overlap flag) through the public API, each with every
device and network field a user can set made faster one at a time (tests/test_monotone_resources.py: FLOP/s,
HBM bandwidth / capacity / efficiency, second tier, kernel overhead, GEMM and attention efficiencies, each
network dimension's bandwidth, latency and efficiency); the CI test checks 150. With --collectives, every
collective of every system preset over 16-512 GPUs at 57 sizes from 1 kB to 10 GB, with each dimension's latency
halved, bandwidth doubled, efficiency halfway to 1 and the HBM doubled (tests/test_monotone_collectives.py
checks six of the presets).

Run: python benchmarks/bench_monotone.py [--simulator] [--resources [N [SEED]]] [--collectives]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from test_monotone_physics import CASES, RESOURCES, faster, random_configurations, step_times
from test_monotone_resources import random_configurations as random_training
from test_monotone_resources import slower_with_more

from armillary.errors import ArmillaryError
from armillary.simulate.run import simulate_training
from armillary.specs.loading import load_system


def simulated(count: int = 20_000) -> None:
    started, slower = time.perf_counter(), dict.fromkeys(RESOURCES, 0)
    for model, system, strategy, workload in random_configurations(count, seed=1):
        base = simulate_training(model, system, strategy, workload).step_time_s
        for what in RESOURCES:
            quicker = simulate_training(model, faster(system, what), strategy, workload).step_time_s
            slower[what] += quicker > base * (1 + 1e-9)
    print(f"{count:,} simulated configurations in {time.perf_counter() - started:.1f} s; slower with a faster "
          + ", ".join(f"{what}: {n}" for what, n in slower.items()))


def resources(count: int = 20_000, seed: int = 46) -> None:
    """`count` feasible random training configurations, every user-settable resource made faster in turn
    (another `seed` draws other configurations: shards run side by side)."""
    started, feasible, drawn, slower = time.perf_counter(), 0, 0, {}
    examples: list[str] = []
    for model, name, gpus, strategy, workload in random_training(10 * count, seed=seed):
        if feasible == count:
            break
        drawn += 1
        try:
            system = load_system(name, gpus)
        except ArmillaryError:
            continue
        worse = slower_with_more(model, system, strategy, workload)
        if worse is None:
            continue
        feasible += 1
        for what, base, quicker in worse:
            slower[what] = slower.get(what, 0) + 1
            if len(examples) < 20:
                examples.append(f"  {what}: {base:.4g} -> {quicker:.4g} s  {model} on {gpus} {name} {strategy} "
                                f"{workload}")
    elapsed = time.perf_counter() - started
    print(f"{feasible:,} feasible training configurations (of {drawn:,} drawn) in {elapsed:.0f} s; "
          f"slower with a faster resource: {sum(slower.values())} "
          + (str(dict(sorted(slower.items()))) if slower else ""))
    print("\n".join(examples))


def collectives() -> None:
    """Every (preset, group, collective, faster resource) at 57 sizes: how many get slower anywhere."""
    import numpy as np

    from armillary import collective
    from armillary.presets.registry import preset_names

    started, cases, slower = time.perf_counter(), 0, []
    sizes = np.geomspace(1e3, 1e10, 57)
    for name in preset_names("systems"):
        for gpus in (16, 32, 64, 144, 512):
            try:
                system = load_system(name, gpus)
            except ArmillaryError:
                continue
            edits = {"hbm": system.scaled(hbm_bandwidth=2.0)}
            for i, d in enumerate(system.network):
                edits[f"network.{i}.latency"] = system.with_dimension(i, latency=d.latency / 2)
                edits[f"network.{i}.bandwidth"] = system.with_dimension(i, bandwidth=2 * d.bandwidth)
                edits[f"network.{i}.efficiency"] = system.with_dimension(i, efficiency=(1 + d.efficiency) / 2)
            for op in ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast", "reduce"):
                base = np.array([r.time_s for r in collective(op, sizes, system, gpus=gpus)])
                for what, quicker in edits.items():
                    cases += 1
                    worse = np.array([r.time_s for r in collective(op, sizes, quicker, gpus=gpus)]) > base * (1 + 1e-9)
                    if worse.any():
                        slower.append(f"  {name} x{gpus} {op} {what}: at {sizes[worse][:3]}")
    print(f"{cases:,} (preset, group, collective, faster resource) cases in {time.perf_counter() - started:.0f} s; "
          f"slower at some size: {len(slower)}")
    print("\n".join(slower[:20]))


def main() -> None:
    started, tried, slower = time.perf_counter(), 0, dict.fromkeys(RESOURCES, 0)
    for model, system, gpus, workload, base in CASES:
        sysm = load_system(system, gpus)
        step, feasible = step_times(model, sysm, workload, base, points=20_000)
        tried += int(feasible.sum())
        for what in RESOURCES:
            quicker, _ = step_times(model, faster(sysm, what), workload, base, points=20_000)
            slower[what] += int((feasible & (quicker > step * (1 + 1e-9))).sum())
    print(f"{tried:,} feasible configurations in {time.perf_counter() - started:.1f} s; slower with a faster "
          + ", ".join(f"{what}: {n}" for what, n in slower.items()))
    if "--simulator" in sys.argv:
        simulated()


if __name__ == "__main__" and "--collectives" in sys.argv:
    collectives()
    sys.exit(0)


if __name__ == "__main__" and "--resources" in sys.argv:
    numbers = [int(a) for a in sys.argv[sys.argv.index("--resources") + 1:] if a.isdigit()]
    resources(*numbers[:2])
    sys.exit(0)


if __name__ == "__main__":
    main()
