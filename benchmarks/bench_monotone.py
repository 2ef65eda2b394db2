"""Monotone physics at scale: 20,000+ random feasible configurations, none slower with twice the FLOP/s,
HBM or network bandwidth, or half the network latency, in the estimator (the CI test checks about 3,400)
and, with --simulator, 20,000 simulated steps of random small configurations (the CI test simulates 2,000).

Run: python benchmarks/bench_monotone.py [--simulator]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

from test_monotone_physics import CASES, RESOURCES, faster, random_configurations, step_times

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


if __name__ == "__main__":
    main()
