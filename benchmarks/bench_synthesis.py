"""Speed of collective synthesis and of the per-dimension bandwidth optimizer.

Run: python benchmarks/bench_synthesis.py [--max-side 128] [--torus-side 128] [--batch 4]
Targets (issue 18): all-gather on a 32x32 mesh (1,024 NPUs, 1 chunk each) in under 1 s (the reference C++
synthesizer: 49.6 s); 16,384 NPUs (128x128 mesh) in under 2 minutes; the growth exponent of time in the
device count; a 4-D network for a 1T model solved in under 1 s. Issue 48: on a 128x128 torus (16,384 NPUs)
within 1.15x of the lower bound in under 2 minutes: with one chunk per transfer the schedule takes 4,097
rounds of the 4,096 the busiest device needs, but each pays 0.5 us of latency on a 1.22 us chunk (1.41x the
bound, which has no latency); `batch` chunks per transfer pay it once. Prints wall and CPU seconds (the CPU
time is the fairer figure on a loaded machine).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from armillary.comm.synthesis import grid, synthesize
from armillary.search.network_bandwidth import BandwidthConstraints, BandwidthWorkload, minimize_time
from armillary.specs.communication import Collective

GIB = 2**30


def synthesis(max_side: int) -> None:
    synthesize(Collective.ALL_GATHER, grid((4, 4), False, 50 * GIB, 0.5e-6), GIB)  # compile / load the kernel
    sizes, times = [], []
    side = 16
    while side <= max_side:
        links = grid((side, side), False, 50 * GIB, 0.5e-6)
        t0, c0 = time.perf_counter(), time.process_time()
        s = synthesize(Collective.ALL_GATHER, links, GIB, record=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"mesh {side}x{side} ({side * side} NPUs): {wall:.2f} s wall, {cpu:.2f} s CPU; "
              f"time {s.time * 1e6:.1f} us = {s.time / s.bound:.4f} x bound", flush=True)
        sizes.append(side * side)
        times.append(cpu)
        side *= 2
    if len(sizes) >= 2:
        slope = np.polyfit(np.log(sizes), np.log(times), 1)[0]
        print(f"growth: CPU time ~ NPUs^{slope:.2f} (transfers grow as NPUs^2)")


def torus(side: int, batches: list[int]) -> None:
    """All-gather of 1 GiB on a side x side torus (50 GiB/s, 0.5 us links), one chunk per NPU, unrecorded."""
    links = grid((side, side), True, 50 * GIB, 0.5e-6)
    for batch in batches:
        t0, c0 = time.perf_counter(), time.process_time()
        s = synthesize(Collective.ALL_GATHER, links, GIB, record=False, batch=batch)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"torus {side}x{side} ({side * side} NPUs), batch {batch}: {wall:.2f} s wall, {cpu:.2f} s CPU; "
              f"time {s.time * 1e6:.1f} us = {s.time / s.bound:.4f} x bound (target < 1.15 in < 120 s)", flush=True)


def bandwidth_4d() -> None:
    """A 1T-model-sized workload on 4 dimensions: 500 collectives (per-layer TP, PP, DP of 128 layers)."""
    rng = np.random.default_rng(0)
    traffic = rng.uniform(0, 1e10, (500, 4)) * np.array([8.0, 2.0, 1.0, 0.5])
    work = BandwidthWorkload(10.0, traffic, pipelined=True)
    cons = BandwidthConstraints(np.full(4, 1e9), np.full(4, 1e12), total=1e12, ordered=True)
    t0 = time.perf_counter()
    best = minimize_time(work, cons)
    wall = time.perf_counter() - t0
    print(f"4-D bandwidth optimization: {wall * 1e3:.1f} ms, {best.iterations} cuts, "
          f"b = {np.round(best.bandwidth / 1e9, 2)} GB/s, step {best.step_time_s:.3f} s "
          f"(target < 1 s); within {math.fsum(best.bandwidth) / 1e12:.6f} of the total")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-side", type=int, default=128)
    parser.add_argument("--torus-side", type=int, default=128)
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 4], help="chunks per transfer to compare")
    args = parser.parse_args()
    bandwidth_4d()
    synthesis(args.max_side)
    torus(args.torus_side, args.batch)
