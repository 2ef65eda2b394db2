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
from typing import TYPE_CHECKING

import numpy as np

from armillary.comm.sweep import bus_factor
from armillary.errors import MissingExtra
from armillary.runtime.table import Machine, RuntimeOp, TuningTable, bucket_of, entry_from_times
from armillary.specs.communication import Collective

if TYPE_CHECKING:
    import torch

    from armillary.runtime.communicator import Communicator

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


# --- several backends, and the mixing runtime (armillary.runtime) ---------------------------------------------

MIXER = "mixer"  # the name under which the tuned communicator's times are reported


@dataclass(frozen=True)
class MixConfig:
    """A sweep of `ops` x `sizes` over each of `backends` (and, given a table, the mixer that follows it),
    their iterations interleaved so that a busy machine's drift hits every backend alike."""

    ops: tuple[Collective, ...]
    sizes: tuple[float, ...]
    ranks: int
    backends: tuple[str, ...]
    dtype: str = "float32"
    warmup: int = 2
    iters: int = 10
    table: TuningTable | None = None  # also time the mixer that follows this table


@dataclass(frozen=True)
class MixSample:
    backend: str
    op: Collective
    size_bytes: float
    time_s: float  # median over iterations, slowest rank
    best_s: float = 0.0  # fastest iteration, slowest rank: what the backend costs without the machine's other load


def _call(c: Communicator, op: Collective, full: torch.Tensor, part: torch.Tensor, backend: str | None) -> None:
    if op is Collective.ALL_REDUCE:
        c.all_reduce(full, backend=backend)
    elif op is Collective.ALL_GATHER:
        c.all_gather_into_tensor(full, part, backend=backend)
    elif op is Collective.REDUCE_SCATTER:
        c.reduce_scatter_tensor(part, full, backend=backend)
    elif op is Collective.ALL_TO_ALL:
        c.all_to_all_single(part.new_empty(full.shape), full, backend=backend)
    elif op is Collective.BROADCAST:
        c.broadcast(full, 0, backend=backend)
    else:
        raise ValueError(f"the mixing benchmark runs all_reduce, all_gather, reduce_scatter, all_to_all and "
                         f"broadcast, not {op.value}")


def _mix_worker(rank: int, size: int, config: MixConfig) -> list[MixSample]:
    import torch
    import torch.distributed as dist

    from armillary.runtime.communicator import Communicator

    comm = Communicator(config.backends, config.table)
    dtype = getattr(torch, config.dtype)
    routes: list[str | None] = [*config.backends, *([None] if config.table is not None else [])]
    samples = []
    for op in config.ops:
        for nbytes in config.sizes:
            count = max(int(nbytes) // dtype.itemsize, size)
            count -= count % size
            full, part = torch.ones(count, dtype=dtype), torch.ones(count // size, dtype=dtype)
            # small messages are cheap and noisy: more iterations; the largest take fewer
            nbytes_real = count * dtype.itemsize
            iters = 3 * config.iters if nbytes_real <= 2**16 else (
                config.iters if nbytes_real <= 4 * 2**20 else max(3, config.iters // 2))
            times: dict[str | None, list[float]] = {r: [] for r in routes}
            for route in routes:
                for _ in range(config.warmup):
                    _call(comm, op, full, part, route)
            for i in range(iters):
                # each route takes each place in the round equally often: a fixed order biased the later
                # ones (the mixer ran 10-30% faster than the backend it dispatched to, right after it); every
                # rank rotates alike, so the collectives stay in one order across ranks
                for route in routes[i % len(routes):] + routes[:i % len(routes)]:
                    comm.barrier(backend="gloo")
                    start = time.perf_counter()
                    _call(comm, op, full, part, route)
                    times[route].append(time.perf_counter() - start)
            stats = torch.tensor([[float(np.median(times[r])), min(times[r])] for r in routes], dtype=torch.float64)
            dist.all_reduce(stats, op=dist.ReduceOp.MAX)  # the slowest rank sets the time
            samples += [MixSample(r or MIXER, op, float(count * dtype.itemsize), float(t), float(b))
                        for r, (t, b) in zip(routes, stats.tolist(), strict=True)]
    return samples


def run_mix_benchmark(config: MixConfig) -> list[MixSample]:
    """Every (backend, op, size) measured over `config.ranks` local processes."""
    from armillary.runtime.launch import launch

    return list(launch(_mix_worker, config.ranks, config, timeout_s=3600)[0])


def tuned_table(samples: list[MixSample], ranks: int, dtype: str) -> TuningTable:
    """The runtime's tuning table from a sweep: per (op, size bucket) the fastest backend and its margin,
    stamped with this machine and torch version. Backends are compared on their fastest iteration: other
    load on the machine only adds time, so the minimum is the steadiest estimate of a backend's own cost."""
    import torch

    keys = sorted({(s.op, s.size_bytes) for s in samples if s.backend != MIXER}, key=lambda k: (k[0].value, k[1]))
    entries = []
    for op, size in keys:
        times = {s.backend: s.best_s for s in samples if (s.op, s.size_bytes) == (op, size) and s.backend != MIXER}
        entries.append(entry_from_times(RuntimeOp(op.value), dtype, bucket_of(size), ranks, times))
    default = "gloo" if any(s.backend == "gloo" for s in samples) else samples[0].backend
    return TuningTable(machine=Machine.here(torch.__version__), default=default, entries=tuple(entries))
