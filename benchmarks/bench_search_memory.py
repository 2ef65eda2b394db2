"""Memory of a search over a huge space: its blocks are generated layout by layout, so memory does not
grow with the number of points (issue: a 1e19-point space once built the list of all blocks, 7.7 GB).

Run: python benchmarks/bench_search_memory.py   (target: a 1e12-point space enumerated in constant memory;
reports the peak resident memory before and after walking every block in search order, and a search of
the same space stopped after 20 s of blocks)
"""

from __future__ import annotations

import resource
import time

import numpy as np

from armillary.search.run import _ordered_blocks, layout_bounds, search
from armillary.search.space import StrategySpace, resolve_axes
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    model, system = load_model("gpt3-175b"), load_system("dgx-a100", 4096)
    workload, base = load_workload({"seq_len": 2048, "global_batch": 4096}), load_strategy({"attention": "flash"})
    # micro-batches 1..300,000 and longer pp, cp, vpp lists widen a normal space to about 1e12 points
    space = StrategySpace(micro_batch=tuple(range(1, 300_001)), cp=(1, 2, 4, 8), vpp=(1, 2, 3, 4, 6, 8),
                          pp=tuple(range(1, 97)))
    axes = resolve_axes(space, model, system.devices, system.devices_per_node, base)
    size = axes.size + axes.pruned
    print(f"space: {size:.3g} points ({axes.size:.3g} after pruning layouts)")
    from armillary.search.run import Objective, Problem

    problem = Problem(model, system, base, workload, space, axes, Objective.TIME, 10)
    before, started, blocks, points = peak_mib(), time.perf_counter(), 0, 0
    for _, a, b in _ordered_blocks(axes, np.asarray(layout_bounds(problem)), 262144):
        blocks += 1
        points += b - a
    print(f"walked {blocks:,} blocks ({points:.3g} points) in {time.perf_counter() - started:.1f} s; "
          f"peak memory {before:.0f} MiB before, {peak_mib():.0f} MiB after")

    def stop_after(seconds: float):
        deadline = time.perf_counter() + seconds

        def progress(done: int, total: int) -> None:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{done:.3g} of {total:.3g} points")
        return progress

    try:
        search(model, system, workload, base, space, progress=stop_after(20.0))
    except TimeoutError as stopped:
        print(f"search stopped after 20 s at {stopped}; peak memory {peak_mib():.0f} MiB")


if __name__ == "__main__":
    main()
