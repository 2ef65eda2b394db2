"""The shm collectives registered with torch.distributed as the backend "shm".

torch 2.13 accepts a Python subclass of `torch.distributed.ProcessGroup` from a backend's creator function
(`Backend.register_backend`; distributed_c10d returns such a group as is), so after `register()`
`dist.new_group(backend="shm")` and `dist.init_process_group("shm")` give a group whose all_reduce,
all_gather (list form), reduce_scatter (list form), all_to_all_single, broadcast, send / recv and barrier,
sync and async, run here, and DDP accepts it. What torch 2.13 does not route to a Python group:
`all_gather_into_tensor` and `reduce_scatter_tensor` (C++ `_allgather_base` / `_reduce_scatter_base`
look for a C++ backend of the device); the communicator calls the engine directly for those.

Asynchronous calls run on one worker thread per group (collectives in issue order) and one each for sends
and receives (so that isend + recv between two ranks cannot block each other); a synchronous call first
waits for the group's last asynchronous one, so that every call runs in program order.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future as PyFuture
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.futures import Future

from armillary.runtime.shm import ReduceKind, ShmGroup, segment_path

BACKEND_NAME = "shm"

_REDUCE = {dist.ReduceOp.SUM: ReduceKind.SUM, dist.ReduceOp.PRODUCT: ReduceKind.PRODUCT,
           dist.ReduceOp.MIN: ReduceKind.MIN, dist.ReduceOp.MAX: ReduceKind.MAX}


def reduce_kind(op: Any) -> ReduceKind:
    for key, kind in _REDUCE.items():
        if op == key:
            return kind
    raise ValueError(f"the shm backend reduces with sum, product, min or max, not {op}")


def work_of(future: Future) -> dist.Work:
    """A torch.distributed Work that completes with `future`."""
    from torch._C._distributed_c10d import _create_work_from_future  # type: ignore[attr-defined]

    return _create_work_from_future(future)


class ShmProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group over one shared segment (see the module docstring)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        key = "armillary-shm-path"
        if rank == 0:
            path = segment_path()
            self.engine = ShmGroup(rank, size, path, create=True, timeout_s=timeout.total_seconds())
            store.set(key, path)
        else:
            path = store.get(key).decode()
            self.engine = ShmGroup(rank, size, path, create=False, timeout_s=timeout.total_seconds())
        attached = store.add("armillary-shm-attached", 1)
        if rank == 0:  # unlink once every rank has mapped it: the memory lives until the last unmaps
            while attached < size:
                time.sleep(1e-3)
                attached = store.add("armillary-shm-attached", 0)
            os.unlink(path)
        self._collectives = ThreadPoolExecutor(1, thread_name_prefix="shm-coll")
        self._sends = ThreadPoolExecutor(1, thread_name_prefix="shm-send")
        self._recvs = ThreadPoolExecutor(1, thread_name_prefix="shm-recv")
        self._last: PyFuture[None] | None = None
        self._lock = threading.Lock()

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return BACKEND_NAME

    # --- issuing --------------------------------------------------------------------------------------------

    def run(self, call: Callable[[], object], async_op: bool, result: object = None) -> dist.Work | None:
        """Run a collective in program order: inline when synchronous (after the last asynchronous one),
        on the worker thread when not. Returns a Work for asynchronous calls."""
        if not async_op:
            if self._last is not None:
                self._last.result()
            with self._lock:
                call()
            return None
        return self._submit(self._collectives, call, result, collective=True)

    def _submit(self, pool: ThreadPoolExecutor, call: Callable[[], object], result: object,
                collective: bool = False) -> dist.Work:
        done: Future = Future()

        def task() -> None:
            try:
                with self._lock if collective else _NO_LOCK:
                    call()
            except BaseException as exc:
                done.set_exception(exc)
                raise
            done.set_result(result)

        future = pool.submit(task)
        if collective:
            self._last = future
        return work_of(done)

    def _work(self, call: Callable[[], object], result: object) -> dist.Work:
        """What torch.distributed calls get: always a Work (the caller waits for synchronous calls)."""
        return self._submit(self._collectives, call, result, collective=True)

    # --- torch.distributed's ProcessGroup methods ----------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:  # type: ignore[override]
        kind = reduce_kind(opts.reduceOp)
        return self._work(lambda: _each(tensors, lambda t: self.engine.all_reduce(t, kind)), tensors)

    def allgather(self, outputs: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any) -> dist.Work:  # type: ignore[override]
        def call() -> None:
            inp = inputs[0]
            gathered = torch.empty(self.size() * inp.numel(), dtype=inp.dtype)
            self.engine.all_gather(gathered, inp.contiguous())
            for r, out in enumerate(outputs[0]):
                out.copy_(gathered[r * inp.numel():(r + 1) * inp.numel()].view_as(out))

        return self._work(call, outputs)

    def reduce_scatter(self, outputs: list[torch.Tensor], inputs: list[list[torch.Tensor]], opts: Any) -> dist.Work:  # type: ignore[override]
        kind = reduce_kind(opts.reduceOp)

        def call() -> None:
            stacked = torch.cat([t.reshape(-1) for t in inputs[0]])
            flat = torch.empty(outputs[0].numel(), dtype=stacked.dtype)
            self.engine.reduce_scatter(flat, stacked, kind)
            outputs[0].copy_(flat.view_as(outputs[0]))

        return self._work(call, outputs)

    def alltoall_base(  # type: ignore[override]
            self, output: torch.Tensor, inp: torch.Tensor, output_splits: list[int], input_splits: list[int],
            opts: Any) -> dist.Work:
        row = inp[0].numel() if inp.dim() > 1 else 1
        outs = [s * row for s in output_splits] if output_splits else None
        ins = [s * row for s in input_splits] if input_splits else None
        return self._work(lambda: self.engine.all_to_all(output, inp, outs, ins), [output])

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> dist.Work:  # type: ignore[override]
        return self._work(lambda: _each(tensors, lambda t: self.engine.broadcast(t, opts.rootRank)), tensors)

    def barrier(self, opts: Any = None) -> dist.Work:  # type: ignore[override]
        return self._work(self.engine.barrier, [])

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> dist.Work:  # type: ignore[override]
        return self._submit(self._sends, lambda: self.engine.send(tensors[0], dst), tensors)

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> dist.Work:  # type: ignore[override]
        return self._submit(self._recvs, lambda: self.engine.recv(tensors[0], src), tensors)


def _each(tensors: list[torch.Tensor], call: Callable[[torch.Tensor], None]) -> None:
    for t in tensors:
        call(t)


class _NoLock:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_LOCK = _NoLock()


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> ShmProcessGroup:
    return ShmProcessGroup(store, rank, size, timeout)


def register() -> None:
    """Make "shm" a torch.distributed backend (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])
