"""Describe this machine's 8 JAX host devices as an armillary system, from a matmul and a copy
microbenchmark run on all 8 devices at once (they share the CPU cores, as the sharded step does), then
time the compiled GPT steps of `jax_gpt_hlo.py` and simulate their HLO on that system.

    python examples/jax_cpu_calibrate.py OUT_DIR
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax
import jax.numpy as jnp
import numpy as np
import yaml
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

sys.path.insert(0, str(Path(__file__).parent))
from jax_gpt_hlo import Config, compile_step, measure


def _timed(fn: Any, *args: Any, repeats: int = 7) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _per_iteration(body: Any, x: Any, n: int) -> float:
    """Seconds of one iteration of `body` inside a compiled loop: a loop of n against a loop of 1, so the
    dispatch of the program (hundreds of microseconds for 8 devices) drops out."""
    def loop(k: int) -> Any:
        return jax.jit(lambda y: jax.lax.fori_loop(0, k, lambda i, z: body(z), y))

    return (_timed(loop(n), x) - _timed(loop(1), x)) / (n - 1)


def calibrate() -> dict[str, Any]:
    """Per-device matmul rate at several sizes, copy bandwidth and the time per kernel, all 8 devices busy."""
    mesh = Mesh(np.array(jax.devices()), ("d",))
    shard = NamedSharding(mesh, P("d"))
    points = []
    for n in (64, 128, 256, 512):
        a = jax.device_put(jnp.ones((8, n, n), jnp.float32) / n, shard)
        repeats = max(4, int(2e8 / (2.0 * n ** 3)))
        seconds = _per_iteration(lambda z: jnp.einsum("bij,bjk->bik", z, z), a, repeats)
        points.append((2.0 * n ** 3, 2.0 * n ** 3 / seconds))  # FLOP per device, FLOP/s per device
    peak = max(rate for _, rate in points)
    # the copy at the size of the step's activations (b s h floats per device, 128 KiB to 1 MiB: they stay
    # in the caches, which a DRAM-sized copy would miss), as its own program: like every kernel of the
    # sharded step it is handed to the 8 device threads, and that hand-off, not the bytes, dominates on
    # this host (a copy inside a loop streams 30-70x faster than the step's kernels run)
    elements = 64 * 1024
    big = jax.device_put(jnp.ones((8, elements), jnp.float32), shard)
    copy_s = _timed(jax.jit(lambda z: z * 1.0001), big)
    bandwidth = 2 * 4 * elements / copy_s  # read + write, per device
    tiny = jax.device_put(jnp.ones((8, 8), jnp.float32), shard)
    overhead = _kernel_overhead(tiny)
    return {"peak": peak, "points": [(f, r / peak) for f, r in points], "bandwidth": bandwidth,
            "overhead": overhead}


def _kernel_overhead(tiny: Any, n: int = 2000) -> float:
    """Time per kernel inside a compiled program: a loop of n tiny iterations against one, divided by the
    kernels one iteration runs (counted by armillary's own HLO import)."""
    from armillary.ingest.hlo_cost import cost_module
    from armillary.ingest.hlo_parse import parse_hlo
    from armillary.specs.loading import load_system

    def loop(x: Any, k: int) -> Any:
        return jax.lax.fori_loop(0, k, lambda i, y: y * 1.0001 + 1e-6, x)

    long, short = jax.jit(lambda x: loop(x, n)), jax.jit(lambda x: loop(x, 1))
    per_iteration = (_timed(long, tiny) - _timed(short, tiny)) / (n - 1)
    module = parse_hlo(long.lower(tiny).compile().as_text())
    kernels = sum(t.count for t in cost_module(module, load_system("dgx-h100", 8)).by_kind.values())
    return per_iteration * n / max(kernels, 1)


def system_spec(c: dict[str, Any]) -> dict[str, Any]:
    src = "measured by examples/jax_cpu_calibrate.py on this machine, 8 host devices busy at once"
    device = {"name": "CPU host device (1/8 of this machine)",
              "matrix_flops": {"fp32": c["peak"], "tf32": c["peak"], "bf16": c["peak"]},
              "vector_flops": {"fp32": c["peak"]},
              "matrix_efficiency": {"points": [list(p) for p in c["points"]]},
              "memory": [{"name": "DRAM", "capacity": 4e9, "bandwidth": c["bandwidth"], "efficiency": 1.0}],
              "kernel_overhead": c["overhead"], "sources": {"matrix_flops": src, "memory": src}}
    # collectives between host devices are copies through the same memory
    dim = {"name": "shared memory", "size": 8, "bandwidth": c["bandwidth"], "latency": c["overhead"],
           "efficiency": 1.0, "sources": {"bandwidth": src}}
    return {"name": "CPU, 8 host devices", "device": device, "network": [dim], "sources": {"network": src}}


def main(out: Path) -> None:
    from armillary.ingest.hlo_run import simulate_hlo
    from armillary.specs.loading import load_system

    out.mkdir(parents=True, exist_ok=True)
    calibration = calibrate()
    path = out / "cpu8.yaml"
    path.write_text(yaml.safe_dump(system_spec(calibration)))
    system = load_system(str(path))
    rows = {}
    for strategy in ("tp", "dp", "fsdp"):
        compiled, args = compile_step(Config(), strategy)
        hlo = out / f"gpt_small_{strategy}.hlo.txt"
        hlo.write_text(compiled.as_text())
        measured = measure(compiled, args)
        simulated = simulate_hlo(hlo, system)
        rows[strategy] = {"measured_s": measured, "simulated_s": simulated.step_time_s,
                          "error": simulated.step_time_s / measured - 1, "compute_s": simulated.compute_s,
                          "communication_s": simulated.communication_s}
        print(strategy, rows[strategy], flush=True)
    (out / "cpu_check.json").write_text(json.dumps({"calibration": calibration, "steps": rows}, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
