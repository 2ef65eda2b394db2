"""Run a function on n local processes with torch.distributed initialized (gloo on loopback), collecting
each rank's return value. Used by the tests, the tuning sweep and the benchmarks."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from armillary.errors import MissingExtra


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, fn: Callable[..., Any], args: tuple[Any, ...], size: int, port: int, queue: Any,
           timeout_s: float) -> None:
    import faulthandler

    import torch
    import torch.distributed as dist

    faulthandler.dump_traceback_later(max(timeout_s / 2, 1), exit=True)  # a hang shows where each rank waits
    torch.set_num_threads(1)  # several ranks share the cores: one intra-op thread each
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=size, timeout=timedelta(seconds=timeout_s))
    try:
        result = fn(rank, size, *args)
        queue.put((rank, result))
    except BaseException as exc:
        queue.put((rank, exc))
        raise
    finally:
        dist.destroy_process_group()


def launch(fn: Callable[..., Any], size: int, *args: Any, timeout_s: float = 120.0,
           start_method: str = "spawn") -> list[Any]:
    """fn(rank, size, *args) on `size` new processes; the return values in rank order. A rank that raises
    makes this raise (its exception), as does a rank that does not finish in `timeout_s`. "fork" starts
    much faster (torch is not imported again) where the caller has started no threads yet."""
    try:
        import torch.multiprocessing as mp
    except ImportError:
        raise MissingExtra("the runtime", "commbench", "torch") from None
    ctx = mp.get_context(start_method)
    queue = ctx.SimpleQueue()
    context = mp.start_processes(_entry, args=(fn, args, size, free_port(), queue, timeout_s), nprocs=size,
                                 join=False, start_method=start_method)
    import time

    deadline = time.monotonic() + timeout_s
    while not context.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in context.processes:
                p.kill()
            raise TimeoutError(f"{size} ranks did not finish {getattr(fn, '__name__', fn)} in {timeout_s:.0f} s")
    results: dict[int, Any] = {}
    while not queue.empty():
        rank, value = queue.get()
        results[rank] = value
    for value in results.values():
        if isinstance(value, BaseException):
            raise value
    return [results[r] for r in range(size)]
