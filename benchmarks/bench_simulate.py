"""Speed and memory of the event-driven simulation, and its agreement with the analytical estimator.

Run: python benchmarks/bench_simulate.py   (targets: >= 1 million events/s; Llama 3 405B on 16,384 GPUs,
TP8 PP16 DP128, one iteration in under 5 s and 1 GB with symmetry; the time with symmetry off for 1,024
GPUs is reported; every rank of 16,384 GPUs with routed flows over tapered rails, by rank classes, in under
60 s and 8 GB at global batch 2,048 and under 5 minutes at 8,192, each in a process of its own for its peak
memory). `--full` also runs the every-rank graph of 16,384 GPUs itself (about 2 minutes, 1.9 GB) and checks
the class graph's step against it.
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

from armillary.estimate.run import estimate_training_run
from armillary.simulate.engine import run
from armillary.simulate.routing import untapered
from armillary.simulate.run import simulate_training
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.system import System
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


def tapered_rails(gpus: int, leaf_size: int = 48, oversubscription: float = 2.0) -> System:
    """DGX H100 nodes on rail-optimized NDR whose rail leaves hold `leaf_size` nodes with 1/`oversubscription`
    of their ports' bandwidth up to the spines (48 does not divide a stage's 128 nodes: leaves straddle
    stages, so lanes differ and rank classes have work to do)."""
    base = load_system("dgx-h100")
    rails = {**base.network[1].model_dump(mode="json", exclude_none=True), "kind": "rail_optimized",
             "leaf_size": leaf_size, "oversubscription": oversubscription}
    return load_system({**base.model_dump(mode="json", exclude_none=True),
                        "network": [base.network[0].model_dump(mode="json", exclude_none=True), rails]}, gpus)


def every_rank(gpus: int, global_batch: int, classes: bool, leaf_size: int = 48, oversubscription: float = 2.0,
               order: str = "tp-cp-dp-pp") -> None:
    """Every rank of Llama 3.1 405B with routed flows over tapered rails (rank classes, or the every-rank
    graph itself), against the analytical estimate on the same tapered system and untapered; the DP time
    on the critical path against the estimator's exposed DP time, tapered and untapered."""
    model, system = load_model("llama3.1-405b"), tapered_rails(gpus, leaf_size, oversubscription)
    workload = load_workload({"seq_len": 8192, "global_batch": global_batch})
    strategy = load_strategy({**LLAMA, "rank_order": order})
    t0 = time.perf_counter()
    r = simulate_training(model, system, strategy, workload, symmetric=False, classes=classes)
    wall = time.perf_counter() - t0
    flat = estimate_training_run(model, untapered(system), strategy, workload)
    uplinks = 0 if r.graph.routes is None else len(r.graph.routes.capacity)
    print(f"Llama 3.1 405B, {gpus:,} GPUs ({order}) on rails with {leaf_size}-node leaves at {oversubscription:g}:1, "
          f"global batch {global_batch}, every rank {'by classes' if classes else 'graph'}: {r.graph.devices:,} "
          f"devices as {r.graph.ranks:,} simulated ranks, {len(r.graph.tasks):,} tasks, {uplinks} uplink"
          f"{' classes' if classes else 's'}; {wall:.1f} s (engine {r.engine_s:.1f} s), peak {peak_mib():.0f} MiB")
    print(f"  step {r.step_time_s:.6f} s routed; analytical {float(r.estimate.step_time_s):.3f} s tapered "
          f"({r.difference:+.2%}), {float(flat.step_time_s):.3f} s untapered; DP on the critical path "
          f"{r.on_critical_path.dp:.3f} s, estimator's exposed DP {float(r.estimate.breakdown.dp_exposed):.3f} s "
          f"tapered, {float(flat.breakdown.dp_exposed):.3f} s untapered")


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


def in_own_process(*args: str) -> None:
    """Run a case in a fresh process: its peak memory is its own."""
    subprocess.run([sys.executable, __file__, *args], check=True)


def main() -> None:
    if sys.argv[1:2] == ["every-rank"]:
        gpus, batch, how, *network = sys.argv[2:]
        every_rank(int(gpus), int(batch), how == "classes",
                   *((int(network[0]), float(network[1]), network[2]) if network else ()))
        return
    llama(16384, 2048, symmetric=True)
    llama(1024, 128, symmetric=True)
    llama(1024, 128, symmetric=False)
    for batch in (2048, 8192):
        in_own_process("every-rank", "16384", str(batch), "classes")
    if "--full" in sys.argv:
        in_own_process("every-rank", "16384", "2048", "graph")
    # contention the estimator does not see: pipeline neighbours innermost put every DP ring edge across
    # 4-node leaves at 8:1
    in_own_process("every-rank", "8192", "1024", "classes", "4", "8", "tp-cp-pp-dp")
    agreement()


if __name__ == "__main__":
    main()
