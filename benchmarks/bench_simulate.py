"""Speed and memory of the event-driven simulation, and its agreement with the analytical estimator.

Run: python benchmarks/bench_simulate.py   (targets: >= 1 million events/s; Llama 3 405B on 16,384 GPUs,
TP8 PP16 DP128, one iteration in under 5 s and 1 GB with symmetry; the time with symmetry off for 1,024
GPUs is reported)
"""

from __future__ import annotations

import resource
import statistics
import time

from armillary.simulate.engine import run
from armillary.simulate.run import simulate_training
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.validation.rows import row_specs
from armillary.validation.run import choose_candidate, read_rows

# Llama 3 405B as trained (Llama Team 2024 §3.3.2): TP8, PP16, 8,192-token sequences, one layer fewer on
# the first and the last stage (126 = 7 + 14 x 8 + 7)
LLAMA = {"tp": 8, "pp": 16, "micro_batch": 1, "sequence_parallel": True, "attention": "flash", "zero": 1,
         "first_stage_layers": 7, "last_stage_layers": 7}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def llama(gpus: int, global_batch: int, symmetric: bool) -> None:
    model, system = load_model("llama3.1-405b"), load_system("dgx-h100", gpus)
    strategy = load_strategy(LLAMA)
    workload = load_workload({"seq_len": 8192, "global_batch": global_batch})
    t0 = time.perf_counter()
    r = simulate_training(model, system, strategy, workload, symmetric=symmetric)
    wall = time.perf_counter() - t0
    runs = []
    for _ in range(7):
        t1 = time.perf_counter()
        run(r.graph)
        runs.append(time.perf_counter() - t1)
    engine, best = statistics.median(runs), min(runs)
    print(f"Llama 3 405B, {gpus:,} GPUs (TP8 PP16 DP{gpus // 128}), global batch {global_batch}, symmetry "
          f"{'on' if symmetric else 'off'}: {r.graph.ranks:,} simulated ranks, {len(r.graph.tasks):,} tasks, "
          f"{r.timeline.events:,} events; end to end {wall:.2f} s (graph and run); engine alone, median of 7: "
          f"{engine:.3f} s = {r.timeline.events / engine:,.0f} events/s (best {r.timeline.events / best:,.0f}); "
          f"step {r.step_time_s:.3f} s vs analytical "
          f"{float(r.estimate.step_time_s):.3f} s ({r.difference:+.2%}); peak memory so far {peak_mib():.0f} MiB")


def agreement() -> None:
    """Every Korthikanti et al. and SC'21 row: the simulated step against the estimate."""
    errors = []
    for row in read_rows():
        if not row["id"].startswith(("TR-KOR", "TR-SC21-T1", "TR-SC21-T2")):
            continue
        try:
            candidates = row_specs(row)
        except Exception as why:
            print(f"  {row['id']:26s} skipped: {why}")
            continue
        rs = choose_candidate(candidates)[1]
        r = simulate_training(rs.model, rs.system, rs.strategy, rs.workload)
        errors.append(abs(r.difference))
        s = rs.strategy
        print(f"  {row['id']:26s} tp{s.tp} pp{s.pp} vpp{s.vpp} m{float(r.estimate.microbatches):.0f}: simulated "
              f"{r.step_time_s:8.3f} s, analytical {float(r.estimate.step_time_s):8.3f} s, {r.difference:+.2%} "
              f"({len(r.graph.tasks):,} tasks, {r.wall_s:.2f} s)")
    print(f"agreement: {len(errors)} rows, mean |difference| {statistics.mean(errors):.2%}, max {max(errors):.2%}")


def main() -> None:
    llama(16384, 2048, symmetric=True)
    llama(1024, 128, symmetric=True)
    llama(1024, 128, symmetric=False)
    agreement()


if __name__ == "__main__":
    main()
