"""The mixing runtime on 4 local processes: tuning sweep, tuned mixer vs each backend, DDP step, model choice.

Run: python benchmarks/bench_runtime.py [--out DIR] [--iters N]   (needs torch: pip install '.[commbench]')
Targets (issue 20): for every size from 8 B to 64 MiB the tuned mixer within 5% of the faster single
backend; a stated factor over gloo on small messages; a small transformer's DDP step faster with the
mixer's hook than with gloo alone; the model's per-call library choice equal to the tuning table's.

1. sweep gloo and shm over OPS x SIZES, write their nccl-tests logs and the tuning table;
2. sweep again with the tuned mixer too, iterations interleaved: mixer / min(gloo, shm) per size;
3. a 2-layer transformer encoder, DDP over gloo vs the same with the mixer's hook: median step time;
4. fit a library per backend and op from step 1's logs (comm.libraries.fit_library) and compare the
   model's fastest library per (op, size) with the table's choice.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from armillary.comm.bench import MIXER, MixConfig, MixSample, nccl_tests_table, run_mix_benchmark, tuned_table
from armillary.comm.calibration import parse_nccl_tests
from armillary.comm.collectives import collective
from armillary.comm.libraries import fit_library, library_names, with_libraries
from armillary.comm.sweep import group_of
from armillary.runtime.launch import launch
from armillary.runtime.table import RuntimeOp, TuningTable, save_table
from armillary.specs.communication import Collective
from armillary.specs.loading import load_device
from armillary.specs.network import NetworkDimension
from armillary.specs.system import System

RANKS = 4
OPS = (Collective.ALL_REDUCE, Collective.ALL_GATHER)
SIZES = (*(float(8 * 4**k) for k in range(12)), float(64 * 2**20))  # 8 B .. 32 MiB in x4 steps, and 64 MiB


def _ddp_steps(rank: int, size: int, table: TuningTable | None, steps: int) -> list[float]:
    import torch

    from armillary.runtime.communicator import Communicator
    from armillary.runtime.dist import ddp_comm_hook

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=128, nhead=4, dim_feedforward=512, batch_first=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.TransformerEncoder(layer, num_layers=2),
                                                      bucket_cap_mb=1)
    if table is not None:
        model.register_comm_hook(Communicator(("gloo", "shm"), table), ddp_comm_hook)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(4, 32, 128)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return times[2:]  # the first steps build DDP's buckets


def _model_choice(samples: list[MixSample], table: TuningTable, out: Path) -> dict[str, object]:
    net = NetworkDimension(name="one host", bandwidth="20 GB/s", latency="50 us", efficiency=0.5,
                           algorithms=["ring"])
    base = System(name="localhost", device=load_device("a100-sxm4-80gb"), devices_per_node=RANKS,
                  scale_up=net, scale_out=net)
    libraries = []
    for name in ("gloo", "shm"):
        for op in OPS:  # one profile per library and operation: gloo's all-gather is not its all-reduce
            log = nccl_tests_table(op, RANKS, [(s.size_bytes, s.best_s) for s in samples  # as the table
                                               if s.backend == name and s.op is op])
            (out / f"fit-{name}-{op.value}.txt").write_text(log)
            libraries.append(fit_library(name, parse_nccl_tests(log), op, RANKS, base, per_op=True))
    system = with_libraries(base, 0, libraries)
    names = library_names(system)
    rows, agree = [], 0
    for op in OPS:
        for size in sorted({s.size_bytes for s in samples if s.op is op}):
            model = names[int(collective(op, size, group_of(system, RANKS), system).library)]
            measured = table.choose(RuntimeOp(op.value), "float32", size, RANKS)
            agree += model == measured
            rows.append((op.value, size, model, measured))
    return {"agree": agree, "of": len(rows), "rows": rows,
            "libraries": [lib.model_dump(mode="json", exclude={"size_efficiency"}) for lib in libraries]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("bench-runtime"))
    parser.add_argument("--iters", type=int, default=7)
    args = parser.parse_args()
    args.out.mkdir(exist_ok=True)
    report: dict[str, object] = {}

    t0 = time.perf_counter()
    sweep = run_mix_benchmark(MixConfig(OPS, SIZES, RANKS, ("gloo", "shm"), iters=args.iters))
    table = tuned_table(sweep, RANKS, "float32")
    save_table(table, args.out / "table.yaml")
    print(f"1. tuning sweep: {time.perf_counter() - t0:.0f} s; table in {args.out / 'table.yaml'}")

    mixed = run_mix_benchmark(MixConfig(OPS, SIZES, RANKS, ("gloo", "shm"), iters=args.iters, table=table))
    rows = []
    for op in OPS:
        for size in sorted({s.size_bytes for s in mixed if s.op is op}):  # 8 B is rounded up to one float per rank
            t = {s.backend: s.time_s for s in mixed if s.op is op and s.size_bytes == size}
            best = {s.backend: s.best_s for s in mixed if s.op is op and s.size_bytes == size}
            rows.append({"op": op.value, "bytes": size, **{k: v * 1e6 for k, v in t.items()},
                         "best_us": {k: v * 1e6 for k, v in best.items()},
                         "mixer_vs_best_min": best[MIXER] / min(best["gloo"], best["shm"]),
                         "mixer_vs_best": t[MIXER] / min(t["gloo"], t["shm"]), "gloo_vs_mixer": t["gloo"] / t[MIXER]})
            print(f"2. {op.value:11s} {size:>11,.0f} B  gloo {t['gloo'] * 1e6:9.1f} us  shm {t['shm'] * 1e6:9.1f} us"
                  f"  mixer {t[MIXER] * 1e6:9.1f} us  mixer/best {rows[-1]['mixer_vs_best']:.3f}"
                  f"  gloo/mixer {rows[-1]['gloo_vs_mixer']:.2f}")
    report["mixer"] = rows
    within = sum(r["mixer_vs_best"] <= 1.05 for r in rows)  # type: ignore[operator]
    within_min = sum(r["mixer_vs_best_min"] <= 1.05 for r in rows)  # type: ignore[operator]
    print(f"   mixer within 5% of the faster backend at {within} of {len(rows)} points (medians), "
          f"{within_min} of {len(rows)} (fastest iterations)")

    gloo_steps = launch(_ddp_steps, RANKS, None, 12, timeout_s=1800)[0]
    mixed_steps = launch(_ddp_steps, RANKS, table, 12, timeout_s=1800)[0]
    report["ddp_step_s"] = {"gloo": statistics.median(gloo_steps), "mixer": statistics.median(mixed_steps)}
    print(f"3. DDP step (2-layer transformer, d=128, 4 ranks): gloo {statistics.median(gloo_steps) * 1e3:.1f} ms, "
          f"mixer hook {statistics.median(mixed_steps) * 1e3:.1f} ms")

    choice = _model_choice(sweep, table, args.out)
    report["model_choice"] = choice
    print(f"4. model's library choice equals the table's at {choice['agree']} of {choice['of']} (op, size) points")
    for op, size, model, measured in choice["rows"]:  # type: ignore[attr-defined]
        print(f"   {op:11s} {size:>11,.0f} B  model {model:5s} table {measured}")
    (args.out / "report.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
