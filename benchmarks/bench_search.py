"""Speed and memory of the strategy search and of the co-design study.

Run: python benchmarks/bench_search.py   (target: >= 1,000,000 evaluated configurations per second per core
on the GPT-3 175B / 64-GPU strategy space; Calculon: 134 per CPU-second, 1.3k with logging silenced)
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from armillary.search.run import search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

ROOT = Path(__file__).parent.parent


def timed(label: str, model: str, gpus: int, global_batch: int, space: StrategySpace | None = None,
          chunk: int = 262144) -> None:
    m, system = load_model(model), load_system("dgx-a100", gpus)
    workload = load_workload({"seq_len": 2048, "global_batch": global_batch})
    base = load_strategy({"attention": "flash"})
    search(m, system, workload, base, space, chunk=chunk)  # warm the caches (presets, efficiency curves)
    runs = []
    for _ in range(11):
        t0 = time.perf_counter()
        r = search(m, system, workload, base, space, top_k=1, chunk=chunk)  # one winner re-estimated in full
        runs.append(time.perf_counter() - t0)
    median = statistics.median(runs)
    print(f"{label}: {r.points:,} points ({r.pruned:,} pruned, {r.bounded:,} of them by the time bound), "
          f"{r.evaluated:,} evaluated, median {median:.3f} s "
          f"(best {min(runs):.3f}) -> {r.evaluated / median:,.0f} evaluated/s, {r.points / median:,.0f} points/s "
          "(one core)")


def main() -> None:
    timed("GPT-3 175B, 64 A100", "gpt3-175b", 64, 64)
    wide = StrategySpace(cp=(1, 2, 4), micro_batch=(1, 2, 4, 8, 16), offload_optimizer=(False, True),
                         offload_activations=(False, True))
    timed("GPT-3 175B, 64 A100, wide space (cp, offload, mb 16)", "gpt3-175b", 64, 64, wide)
    timed("GPT-3 175B, 64 A100, wide space, blocks of 4,096", "gpt3-175b", 64, 64, wide, 4096)
    timed("Megatron 1T, 4,096 A100", "megatron-1t", 4096, 3072)
    timed("Megatron 1T, 4,096 A100, blocks of 4,096", "megatron-1t", 4096, 3072, chunk=4096)
    print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    t0 = time.perf_counter()
    study = ROOT / "examples" / "codesign"
    space, strategies = study / "megatron-1t-system-space.yaml", study / "strategies.yaml"
    subprocess.run([sys.executable, "-m", "armillary.cli", "search", "--model", "megatron-1t", "--system", "dgx-a100",
                    "--gpus", "8", "--global-batch", "3072", "--space", str(space), "--strategies", str(strategies),
                    "--json"], check=True, capture_output=True)
    print(f"co-design example (18 systems), end to end: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
