"""Speed of the serving simulation and of an inference estimate; stability of the max rate.

Run: python benchmarks/bench_serving.py              (target: 100,000 requests served in < 10 s)
     python benchmarks/bench_serving.py --stability  (also the max rate at 60 s and 600 s: within 5%)
     python benchmarks/bench_serving.py --search     (only the serving search: target >= 100,000 points/s)
     python benchmarks/bench_serving.py --max-rate   (only `serve --max-rate`: target < 3 s, within the seeds'
                                                      spread of the bisection it replaced)

Three loads of 100,000 Poisson requests on the shipped serving example (Llama 2 70B, two TP4 replicas on
a DGX H100): light (mostly single-sequence decode stretches), near capacity, and overloaded; and near
capacity again with least-outstanding-tokens balancing.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import armillary
from armillary.serving.rate import steady_max_rate
from armillary.specs.run import load_run
from armillary.specs.workload import Balance, Inference

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
REQUESTS = 100_000


def stability(model: object, system: object, strategy: object, workload: Inference) -> None:
    def at(duration: float):  # type: ignore[no-untyped-def]
        def serve(rate: float, seed: int) -> armillary.ServingResult:
            sv = workload.serving.model_copy(update={"seed": seed})
            w = workload.model_copy(update={"serving": sv})
            return armillary.simulate_serving(model, system, strategy, w, rate, duration)  # type: ignore[arg-type]
        return steady_max_rate(serve, seeds=3, steps=8)

    rates = {}
    for duration in (60.0, 600.0):
        t0 = time.perf_counter()
        found = at(duration)
        rates[duration] = found.rate
        seeds = ", ".join(f"{r:.2f}" for r in found.per_seed)
        print(f"max rate at {duration:g} s: {found.rate:.2f} req/s (seeds {seeds})  [{time.perf_counter() - t0:.0f} s]")
    print(f"600 s vs 60 s: {rates[600.0] / rates[60.0] - 1:+.1%} (target within 5%)")


def max_rate(model: object, system: object, strategy: object, workload: Inference, repeats: int = 3) -> None:
    """`armillary.max_rate` (serve --max-rate: interpolating from the analytical rate) against the bisection
    it replaced (`steady_max_rate(bisect=True)` from the same start), alternately: seconds, runs, the answer
    and the seeds' range."""
    from armillary import defaults
    from armillary.serving.rate import analytical_rate

    def serve(rate: float, seed: int) -> armillary.ServingResult:
        sv = workload.serving.model_copy(update={"seed": workload.serving.seed + seed})
        return armillary.simulate_serving(model, system, strategy, workload.model_copy(update={"serving": sv}),  # type: ignore[arg-type]
                                          rate, defaults.SERVE_DURATION_S)

    armillary.simulate_serving(model, system, strategy, workload, 2.0, 10.0)  # type: ignore[arg-type]  # kernels loaded
    start = analytical_rate(armillary.estimate(model, system, strategy, workload))  # type: ignore[arg-type]
    for _ in range(repeats):
        for name in ("bisection (before)", "interpolated"):
            t0, c0 = time.perf_counter(), time.process_time()
            found = (steady_max_rate(serve, defaults.MAX_RATE_SEEDS, start=start, bisect=True) if name[0] == "b"
                     else armillary.max_rate(model, system, strategy, workload))  # type: ignore[arg-type]
            elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"max rate, {name:18}: {elapsed:.2f} s ({cpu:.2f} s CPU), {len(found.tried)} runs: "
                  f"{found.rate:.3f} req/s (seeds {found.low:.3f}..{found.high:.3f})")


def search() -> None:
    """The serving search over tp, pp, ep, batch 1-2048, weight and KV precision on one DGX H100."""
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.specs.loading import load_model, load_system
    from armillary.specs.strategy import Strategy

    space = InferenceSpace(tp=(1, 2, 4, 8), pp=(1, 2), ep=(1, 2, 4, 8), batch=tuple(range(1, 2049)),
                           weights=(None, "fp8", "int4"), kv_cache=(None, "fp8"), tpot_limit_s=0.05)  # type: ignore[arg-type]
    w = Inference(input_len=1024, output_len=256)
    for preset in ("llama2-70b", "mixtral-8x7b"):
        model, system = load_model(preset), load_system("dgx-h100", 8)
        t0 = time.perf_counter()
        r = search_inference(model, system, w, Strategy(attention="flash"), space, top_k=10)
        elapsed = time.perf_counter() - t0
        print(f"serving search {preset}: {r.points:,} points in {elapsed:.2f} s = {r.points / elapsed:,.0f} points/s "
              f"({r.feasible:,} fit, {r.within_limits:,} within TPOT 50 ms; best tp {r.top[0].strategy.tp}, "
              f"batch {r.top[0].batch})")


def main() -> None:
    if "--search" in sys.argv:
        search()
        return
    model, system, strategy, workload = load_run(EXAMPLE)
    assert isinstance(workload, Inference)
    if "--max-rate" in sys.argv:
        max_rate(model, system, strategy, workload)
        return
    armillary.estimate(model, system, strategy, workload)
    t0 = time.perf_counter()
    for _ in range(100):
        armillary.estimate(model, system, strategy, workload)
    print(f"inference estimate (static batch of {workload.batch}):  {(time.perf_counter() - t0) * 10:.2f} ms per call")
    t0 = time.perf_counter()
    armillary.simulate_serving(model, system, strategy, workload, 2.0, 25.0)
    print(f"warm-up (the serving kernels compiled, or loaded from numba's on-disk cache): "
          f"{time.perf_counter() - t0:.2f} s")
    for rate in (2.0, 8.0, 20.0):
        t0, c0 = time.perf_counter(), time.process_time()
        r = armillary.simulate_serving(model, system, strategy, workload, rate, REQUESTS / rate)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(f"serve {r.requests:,} requests at {rate:g}/s: {elapsed:.2f} s ({cpu:.2f} s CPU)  "
              f"({r.iterations:,} iterations, "
              f"mean batch {r.mean_batch:.1f}, {r.preemptions} preemptions, P90 TTFT {r.ttft_s.p90 * 1e3:.0f} ms)")
    # the same near-capacity stream balanced by outstanding tokens: the replicas run side by side
    balanced = workload.model_copy(update={"serving": workload.serving.model_copy(
        update={"balance": Balance.LEAST_OUTSTANDING_TOKENS})})
    t0, c0 = time.perf_counter(), time.process_time()
    r = armillary.simulate_serving(model, system, strategy, balanced, 8.0, REQUESTS / 8.0)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"serve {r.requests:,} requests at 8/s, least outstanding tokens: {elapsed:.2f} s ({cpu:.2f} s CPU)  "
          f"({r.iterations:,} iterations, P90 TTFT {r.ttft_s.p90 * 1e3:.0f} ms)")
    search()
    max_rate(model, system, strategy, workload, repeats=1)
    if "--stability" in sys.argv:
        stability(model, system, strategy, workload)


if __name__ == "__main__":
    main()
