"""Speed of one estimate in-process and of `armillary estimate` end to end.

Run: python benchmarks/bench_estimate.py   (targets: < 1 ms in-process, < 1 s end to end)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import armillary
from armillary.specs.run import load_run

EXAMPLE = Path(__file__).parent.parent / "examples" / "gpt3-175b-a100.yaml"


def per_call(fn, repeats: int = 2000) -> float:
    fn()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats // 5):
            fn()
        samples.append((time.perf_counter() - t0) / (repeats // 5))
    return statistics.median(samples)


def main() -> None:
    model, system, strategy, workload = load_run(EXAMPLE)
    t_specs = per_call(lambda: armillary.estimate(model, system, strategy, workload))
    print(f"estimate(), spec objects:            {t_specs * 1e3:.3f} ms per call")
    t_names = per_call(lambda: armillary.estimate("gpt3-175b", "dgx-a100", strategy, workload, gpus=1024), 200)
    print(f"estimate(), preset names (cached):     {t_names * 1e3:.3f} ms per call")
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "armillary.cli", "estimate", str(EXAMPLE), "--json"],
                       check=True, capture_output=True)
        runs.append(time.perf_counter() - t0)
    print(f"`armillary estimate` end to end:       {statistics.median(runs):.3f} s (median of 5)")


if __name__ == "__main__":
    main()
