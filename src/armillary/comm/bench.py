"""A real collective benchmark with torch.distributed: gloo on CPUs (any machine, CI included), NCCL on GPUs.

It sweeps message sizes like nccl-tests and prints the same table, so its output feeds
`armillary calibrate-network`. torch is an optional dependency: it is imported only here, when a benchmark
runs. Processes rendezvous on the loopback interface only.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

import numpy as np

from armillary.comm.sweep import bus_factor
from armillary.errors import MissingExtra
from armillary.specs.communication import Collective

_DTYPE_BYTES = 4  # float32, as nccl-tests' default


@dataclass(frozen=True)
class BenchConfig:
    op: Collective
    sizes: tuple[float, ...]
    ranks: int
    backend: str  # "gloo" or "nccl"
    warmup: int = 3
    iters: int = 10


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker(rank: int, config: BenchConfig, port: int, queue: object) -> None:
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group(config.backend, rank=rank, world_size=config.ranks)
    device = torch.device("cuda", rank) if config.backend == "nccl" else torch.device("cpu")
    if config.backend == "nccl":
        torch.cuda.set_device(device)
    p = config.ranks
    results = []
    for size in config.sizes:
        count = max(int(size) // _DTYPE_BYTES, p)
        count -= count % p  # divisible for the scattering collectives
        full = torch.ones(count, device=device)
        part = torch.ones(count // p, device=device)

        def once(full: torch.Tensor = full, part: torch.Tensor = part) -> None:
            if config.op is Collective.ALL_REDUCE:
                dist.all_reduce(full)
            elif config.op is Collective.ALL_GATHER:
                dist.all_gather_into_tensor(full, part)
            elif config.op is Collective.REDUCE_SCATTER:
                dist.reduce_scatter_tensor(part, full)
            elif config.op is Collective.ALL_TO_ALL:
                dist.all_to_all_single(full, full.clone())
            elif config.op is Collective.BROADCAST:
                dist.broadcast(full, src=0)
            else:
                dist.reduce(full, dst=0)

        for _ in range(config.warmup):
            once()
        dist.barrier()
        if config.backend == "nccl":
            torch.cuda.synchronize()
        samples = []
        for _ in range(config.iters):  # the median iteration: robust to a busy machine's hiccups
            start = time.perf_counter()
            once()
            if config.backend == "nccl":
                torch.cuda.synchronize()
            samples.append(time.perf_counter() - start)
        elapsed = torch.tensor([float(np.median(samples))], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the time, as in nccl-tests
        results.append((count * _DTYPE_BYTES, float(elapsed)))
    if rank == 0:
        queue.put(results)  # type: ignore[attr-defined]
    dist.destroy_process_group()


def run_benchmark(config: BenchConfig) -> list[tuple[float, float]]:
    """(bytes, seconds) per size, measured over `config.ranks` local processes."""
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise MissingExtra("commbench", "commbench", "torch") from None
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(config, _free_port(), queue), nprocs=config.ranks, join=True,
                       start_method="spawn")
    return list(queue.get())


def nccl_tests_table(op: Collective, ranks: int, measured: list[tuple[float, float]]) -> str:
    """The measurements as nccl-tests prints them (out-of-place and in-place columns alike)."""
    lines = [f"# armillary commbench: {op.value}, {ranks} ranks",
             "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
             "   busbw #wrong",
             "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)"
             "  (GB/s)"]
    factor = float(bus_factor(op, np.float64(ranks)))
    for size, seconds in measured:
        algbw = size / seconds / 1e9
        cols = f"{seconds * 1e6:8.2f} {algbw:7.3f} {algbw * factor:7.3f}      0"
        lines.append(f"{size:12.0f} {size / _DTYPE_BYTES:13.0f}     float     sum      -1 {cols} {cols}")
    return "\n".join(lines) + "\n"
