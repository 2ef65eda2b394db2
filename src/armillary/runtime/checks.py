"""Rank programs that check the runtime (run them with `launch`): every operation through each backend and
through the mixer against the value it must have, and random interleavings of sync and async calls.

The data are small integers in every dtype, so sums are exact in any order: a result is right when it
equals the closed form (e.g. all-reduce of x + rank over p ranks = p x + p(p-1)/2), and every backend
must give the same bits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import torch

from armillary.runtime.communicator import Communicator, Ordering
from armillary.runtime.table import RuntimeOp, TableEntry, TuningTable, bucket_of

OPS = tuple(op for op in RuntimeOp if op is not RuntimeOp.BARRIER)
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64)


def alternating_table(size: int, top_bucket: int = 40) -> TuningTable:
    """A table that sends even size buckets to shm and odd ones to gloo, for every operation: the mixer
    then uses both backends within one sweep."""
    rows = [TableEntry(op=op, dtype="float32", bucket=b, group_size=size, backend="shm" if b % 2 == 0 else "gloo")
            for op in RuntimeOp for b in range(top_bucket + 1)]
    return TuningTable(default="gloo", entries=tuple(rows))


def _base(n: int, dtype: torch.dtype, rank: int) -> torch.Tensor:
    return ((torch.arange(n) % 7) + rank).to(dtype)


def _one(comm: Communicator, op: RuntimeOp, n: int, dtype: torch.dtype, rank: int, size: int,
         backend: str | None) -> tuple[torch.Tensor, torch.Tensor]:
    """(result, expected) of `op` on n elements per rank."""
    ranks_sum = size * (size - 1) // 2
    if op is RuntimeOp.ALL_REDUCE:
        t = _base(n, dtype, rank)
        comm.all_reduce(t, backend=backend)
        return t, (size * (torch.arange(n) % 7) + ranks_sum).to(dtype)
    if op is RuntimeOp.ALL_GATHER:
        out = torch.empty(n * size, dtype=dtype)
        comm.all_gather_into_tensor(out, _base(n, dtype, rank), backend=backend)
        return out, torch.cat([_base(n, dtype, r) for r in range(size)])
    if op is RuntimeOp.REDUCE_SCATTER:
        out = torch.empty(n, dtype=dtype)
        comm.reduce_scatter_tensor(out, _base(n * size, dtype, rank), backend=backend)
        whole = size * (torch.arange(n * size) % 7) + ranks_sum
        return out, whole[rank * n:(rank + 1) * n].to(dtype)
    if op is RuntimeOp.ALL_TO_ALL:  # uneven: rank i sends n + i + j elements to rank j
        sends = [n + rank + j for j in range(size)]
        recvs = [n + i + rank for i in range(size)]
        inp = torch.cat([torch.full((sends[j],), 10 * rank + j) for j in range(size)]).to(dtype)
        out = torch.empty(sum(recvs), dtype=dtype)
        comm.all_to_all_single(out, inp, recvs, sends, backend=backend)
        return out, torch.cat([torch.full((recvs[i],), 10 * i + rank) for i in range(size)]).to(dtype)
    if op is RuntimeOp.BROADCAST:
        t = _base(n, dtype, rank)
        comm.broadcast(t, size - 1, backend=backend)
        return t, _base(n, dtype, size - 1)
    # send / receive around a ring
    t, got = _base(n, dtype, rank), torch.empty(n, dtype=dtype)
    work = comm.isend(t, (rank + 1) % size, backend=backend)
    comm.recv(got, (rank - 1) % size, backend=backend)
    work.wait()
    return got, _base(n, dtype, (rank - 1) % size)


def correctness(rank: int, size: int, counts: Sequence[int], dtypes: Sequence[torch.dtype] = DTYPES,
                ops: Sequence[RuntimeOp] = OPS) -> list[str]:
    """Every (op, dtype, count) through gloo, shm and the mixer: the failures, as text."""
    comm = Communicator(("gloo", "shm"), alternating_table(size))
    failures = []
    for op in ops:
        for dtype in dtypes:
            for n in counts:
                results = {}
                for backend in ("gloo", "shm", None):
                    got, want = _one(comm, op, n, dtype, rank, size, backend)
                    results[backend or "mixer"] = got
                    if not torch.equal(got, want):
                        failures.append(f"rank {rank} {op.value} {dtype} n={n} via {backend or 'mixer'}")
                if not (torch.equal(results["gloo"], results["shm"]) and torch.equal(results["shm"], results["mixer"])):
                    failures.append(f"rank {rank} {op.value} {dtype} n={n}: backends differ")
        comm.barrier(backend="shm")
        comm.barrier(backend="gloo")
    return failures


def interleaved(rank: int, size: int, calls: int, seed: int) -> dict[str, int]:
    """`calls` random sync / async calls over both backends and two communicators (the world, and the
    world again with its own ordering), the same sequence on every rank; each result checked when it
    completes. Returns how many calls each backend ran and how often the ordering switched backends."""
    rng = random.Random(seed)  # the same program on every rank
    comms = (Communicator(("gloo", "shm")), Communicator(("gloo", "shm"), ordering=Ordering()))
    pending: list[tuple[object, torch.Tensor, torch.Tensor]] = []
    ranks_sum = size * (size - 1) // 2
    for _ in range(calls):
        comm = comms[rng.randrange(2)]
        backend = rng.choice(("gloo", "shm"))
        kind = rng.random()
        n = rng.choice((1, 5, 64, 1000, 40_000))
        async_op = rng.random() < 0.5
        if kind < 0.45:
            t = _base(n, torch.float32, rank)
            work = comm.all_reduce(t, async_op=async_op, backend=backend)
            want = (size * (torch.arange(n) % 7) + ranks_sum).float()
        elif kind < 0.7:
            out = torch.empty(n * size)
            work = comm.all_gather_into_tensor(out, _base(n, torch.float32, rank), async_op=async_op,
                                               backend=backend)
            t, want = out, torch.cat([_base(n, torch.float32, r) for r in range(size)])
        elif kind < 0.85:
            t = _base(n, torch.float32, rank)
            work = comm.broadcast(t, rng.randrange(size), async_op=async_op, backend=backend)
            want = None  # type: ignore[assignment]
        else:
            work, t, want = comm.barrier(async_op=async_op, backend=backend), torch.empty(0), torch.empty(0)
        if want is not None:
            pending.append((work, t, want))
        if rng.random() < 0.2 or len(pending) > 16:
            _drain(pending)
    _drain(pending)
    for comm in comms:
        comm.synchronize()
    totals = {name: sum(c.calls[name] for c in comms) for name in ("gloo", "shm")}
    totals["switches"] = sum(c.ordering.switches for c in comms)
    return totals


def _drain(pending: list[tuple[object, torch.Tensor, torch.Tensor]]) -> None:
    for work, got, want in pending:
        if work is not None:
            work.wait()  # type: ignore[attr-defined]
        if not torch.equal(got, want):
            raise AssertionError(f"interleaved call gave {got[:4].tolist()}..., expected {want[:4].tolist()}...")
    pending.clear()


__all__ = ["DTYPES", "alternating_table", "bucket_of", "correctness", "interleaved"]
