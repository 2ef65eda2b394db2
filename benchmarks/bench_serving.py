"""Speed of the serving simulation and of an inference estimate.

Run: python benchmarks/bench_serving.py   (target: 10,000 requests simulated in < 10 s)

Three loads of 10,000 Poisson requests on the shipped serving example (Llama 2 70B, two TP4 replicas on a
DGX H100): light (mostly single-sequence decode stretches), near capacity, and overloaded (preemptions).
"""

from __future__ import annotations

import time
from pathlib import Path

import armillary
from armillary.specs.run import load_run
from armillary.specs.workload import Inference

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
REQUESTS = 10_000


def main() -> None:
    model, system, strategy, workload = load_run(EXAMPLE)
    assert isinstance(workload, Inference)
    armillary.estimate(model, system, strategy, workload)
    t0 = time.perf_counter()
    for _ in range(100):
        armillary.estimate(model, system, strategy, workload)
    print(f"inference estimate (static batch of {workload.batch}):  {(time.perf_counter() - t0) * 10:.2f} ms per call")
    for rate in (2.0, 8.0, 20.0):
        t0 = time.perf_counter()
        r = armillary.simulate_serving(model, system, strategy, workload, rate, REQUESTS / rate)
        elapsed = time.perf_counter() - t0
        print(f"serve {r.requests:,} requests at {rate:g}/s: {elapsed:.2f} s  ({r.iterations:,} iterations, "
              f"mean batch {r.mean_batch:.1f}, {r.preemptions} preemptions, P90 TTFT {r.ttft_s.p90 * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
