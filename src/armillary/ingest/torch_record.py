"""Record torch.profiler traces of a small transformer training step with gloo data parallelism on the CPU
(for tests and examples; needs torch). `record(folder, ranks)` writes one Kineto chrome trace per rank and
returns each rank's measured step time (the wall time of the profiled step).
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, world: int, port: int, folder: str, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, batch_first=True)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(layer, torch.nn.Linear(256, 256)),
                                                      bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(8, 64, 256)

    def step() -> None:
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()

    for _ in range(2):
        step()
    dist.barrier()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        times = []
        for _ in range(steps):
            t = time.perf_counter()
            with torch.profiler.record_function(f"ProfilerStep#{_}"):
                step()
            times.append(time.perf_counter() - t)
    prof.export_chrome_trace(str(Path(folder) / f"rank{rank}.json"))
    Path(folder, f"rank{rank}.time.json").write_text(json.dumps({"step_s": times}))
    dist.destroy_process_group()


def record(folder: Path, ranks: int = 2, steps: int = 1) -> list[list[float]]:
    """Profile `steps` steps on `ranks` gloo processes; each rank's measured step times."""
    import torch.multiprocessing as mp

    folder.mkdir(parents=True, exist_ok=True)
    mp.spawn(_worker, args=(ranks, _free_port(), str(folder), steps), nprocs=ranks, join=True)
    out: list[list[float]] = []
    for r in range(ranks):
        data: dict[str, Any] = json.loads((folder / f"rank{r}.time.json").read_text())
        out.append(data["step_s"])
    return out
