"""A communicator that mixes backends: one process group per backend over the same ranks, each call sent to
the backend that the tuning table names for its (operation, dtype, size bucket, group size) (MCR-DL,
Anthony et al., IPDPS'23).

Deadlock-free mixing (MCR-DL §IV-C): every rank issues a group's calls in one program order, and a call
that goes to another backend than the group's previous one first waits for the previous backend's
outstanding work (`Ordering`). So no two backends ever have work of the same group in flight at once, and
each backend sees its calls in the same order on every rank: a backend never waits on a peer that waits on
another backend. On CPUs (gloo, mpi, ucc, shm) the wait blocks the issuing thread. On GPUs the same call
is non-blocking: `Work.wait()` of a NCCL call makes the caller's current CUDA stream wait for an event
recorded on NCCL's stream, so the next backend's kernels queue behind it on the device without a host
synchronization (and a backend that runs on the current stream orders itself). Groups that must also be
ordered among themselves share one `Ordering`.

The shm backend holds CPU tensors only: a CUDA tensor is never dispatched to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from armillary.errors import SpecError
from armillary.runtime import shm_backend
from armillary.runtime.table import RuntimeOp, TuningTable, bucket_of, fingerprint

CPU_ONLY = frozenset({shm_backend.BACKEND_NAME})
SUM = dist.ReduceOp.SUM


@dataclass
class Ordering:
    """Which backend issued last and its outstanding work: waited before another backend issues."""

    last: str | None = None
    pending: list[dist.Work] = field(default_factory=list)
    switches: int = 0

    def before(self, backend: str) -> None:
        if backend != self.last:
            for work in self.pending:
                if not work.is_completed():  # a second wait on a finished gloo send / recv never returns
                    work.wait()
            self.pending.clear()
            if self.last is not None:
                self.switches += 1
            self.last = backend

    def track(self, work: dist.Work) -> None:
        self.pending = [w for w in self.pending if not w.is_completed()]
        self.pending.append(work)


@dataclass(frozen=True)
class _Handle:
    name: str
    group: dist.ProcessGroup

    @property
    def shm(self) -> shm_backend.ShmProcessGroup | None:
        return self.group if isinstance(self.group, shm_backend.ShmProcessGroup) else None


def _bytes(tensor: torch.Tensor) -> int:
    """The size of a call's message: what the table's rows are keyed by."""
    return tensor.numel() * tensor.element_size()


def _gather_single() -> Callable[..., dist.Work | None]:
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _scatter_single() -> Callable[..., dist.Work | None]:
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def same_table(mine: str | None, members: Sequence[int], problem: str = "") -> None:
    """Every rank of the world tells the others its table's fingerprint (or, with `problem`, why it has
    none); a rank whose table could not be loaded, or members given different tables, make every rank
    raise a SpecError naming them (ranks that dispatch one call to different backends wait on each other
    until the watchdog kills them). Every rank of the world must call it, the first thing after
    torch.distributed is initialized."""
    every: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(every, (dist.get_rank() in members, mine, problem[:200]))
    failed = [(rank, why) for rank, (_, _, why) in enumerate(every) if why]
    if failed:
        rank, why = failed[0]
        raise SpecError(f"tuning table: rank {rank} could not load its table ({why})")
    prints = {rank: fp for rank, (member, fp, _) in enumerate(every) if member}
    if len(set(prints.values())) > 1:
        shown = ", ".join(f"rank {r}: {fp}" for r, fp in list(prints.items())[:8])
        raise SpecError(f"tuning table: the ranks were given different tables (fingerprints {shown}); give every "
                        "rank the same table file")


class Communicator:
    """Mixes `backends` over `ranks` (default: all) per `table` (default: everything on the first backend).
    Every rank of the world must construct it, in the same order as its other groups (torch's rule for
    new_group). Calls mirror torch.distributed's, with `backend=` to force one; src / dst are global ranks."""

    def __init__(self, backends: Sequence[str] = ("gloo", "shm"), table: TuningTable | None = None,
                 ranks: Sequence[int] | None = None, ordering: Ordering | None = None,
                 timeout: timedelta = timedelta(minutes=5)) -> None:
        if not dist.is_initialized():
            raise RuntimeError("initialize torch.distributed first (dist.init_process_group)")
        if shm_backend.BACKEND_NAME in backends:
            shm_backend.register()
        members = list(range(dist.get_world_size())) if ranks is None else list(ranks)
        table = table or TuningTable(default=backends[0])
        same_table(fingerprint(table), members)  # before any group is made: ranks dispatching apart deadlock
        self.handles: dict[str, _Handle] = {}
        for name in backends:
            group = dist.new_group(members, backend=name, timeout=timeout)
            if group is not None and group is not dist.GroupMember.NON_GROUP_MEMBER:
                self.handles[name] = _Handle(name, group)
        self.member = dist.get_rank() in members
        self.size = len(members)
        self.table = table
        self.ordering = ordering or Ordering()
        self.calls: dict[str, int] = dict.fromkeys(self.handles, 0)
        self._chosen: dict[tuple[RuntimeOp, torch.dtype, int, str], str] = {}

    # --- dispatch ------------------------------------------------------------------------------------------

    def choose(self, op: RuntimeOp, dtype: torch.dtype, n_bytes: float, device: torch.device) -> str:
        """The backend for one call: the table's, where this group has it and it holds the device."""
        key = (op, dtype, bucket_of(n_bytes), device.type)
        chosen = self._chosen.get(key)
        if chosen is None:  # the table's rows are scanned once per key, not once per call
            name = self.table.choose(op, str(dtype).removeprefix("torch."), n_bytes, self.size)
            usable = [h for h in self.handles if device.type == "cpu" or h not in CPU_ONLY]
            chosen = name if name in usable else (self.table.default if self.table.default in usable else usable[0])
            self._chosen[key] = chosen
        return chosen

    def _issue(self, op: RuntimeOp, sample: torch.Tensor, n_bytes: float, backend: str | None) -> _Handle:
        """The handle of one call's backend (`backend`, else `choose`'s), once the other backends' outstanding
        work is waited for; the call counted."""
        name = backend or self.choose(op, sample.dtype, n_bytes, sample.device)
        handle = self.handles[name]
        self.ordering.before(name)
        self.calls[name] += 1
        return handle

    def _call(self, op: RuntimeOp, sample: torch.Tensor, n_bytes: float, async_op: bool, backend: str | None,
              torch_call: Callable[[dist.ProcessGroup, bool], dist.Work | None],
              shm_call: Callable[[shm_backend.ShmProcessGroup], Callable[[], object]],
              result: object = None) -> dist.Work | None:
        handle = self._issue(op, sample, n_bytes, backend)
        pg = handle.shm
        if pg is not None:
            engine_call = shm_call(pg)
            work = pg.run(engine_call, async_op, result)
        else:
            work = torch_call(handle.group, async_op)
        if async_op and work is not None:
            self.ordering.track(work)
        return work

    def _local(self, pg: dist.ProcessGroup, global_rank: int) -> int:
        return dist.get_group_rank(pg, global_rank)

    # --- collectives ---------------------------------------------------------------------------------------

    def all_reduce(self, tensor: torch.Tensor, op: Any = SUM, async_op: bool = False,
                   backend: str | None = None) -> dist.Work | None:
        return self._call(
            RuntimeOp.ALL_REDUCE, tensor, _bytes(tensor), async_op, backend,
            lambda g, a: dist.all_reduce(tensor, op, group=g, async_op=a),
            lambda pg: lambda: pg.engine.all_reduce(tensor, shm_backend.reduce_kind(op)), [tensor])

    def all_gather_into_tensor(self, output: torch.Tensor, tensor: torch.Tensor, async_op: bool = False,
                               backend: str | None = None) -> dist.Work | None:
        return self._call(
            RuntimeOp.ALL_GATHER, tensor, _bytes(output), async_op, backend,
            lambda g, a: _gather_single()(output, tensor, group=g, async_op=a),
            lambda pg: lambda: pg.engine.all_gather(output, tensor), [output])

    def reduce_scatter_tensor(self, output: torch.Tensor, tensor: torch.Tensor, op: Any = SUM,
                              async_op: bool = False, backend: str | None = None) -> dist.Work | None:
        return self._call(
            RuntimeOp.REDUCE_SCATTER, tensor, _bytes(tensor), async_op, backend,
            lambda g, a: _scatter_single()(output, tensor, op, group=g, async_op=a),
            lambda pg: lambda: pg.engine.reduce_scatter(output, tensor, shm_backend.reduce_kind(op)), [output])

    def all_to_all_single(self, output: torch.Tensor, tensor: torch.Tensor,
                          output_split_sizes: Sequence[int] | None = None,
                          input_split_sizes: Sequence[int] | None = None, async_op: bool = False,
                          backend: str | None = None) -> dist.Work | None:
        row = tensor[0].numel() if tensor.dim() > 1 else 1
        outs = [s * row for s in output_split_sizes] if output_split_sizes is not None else None
        ins = [s * row for s in input_split_sizes] if input_split_sizes is not None else None
        n_bytes = _bytes(tensor)
        if backend is None and (input_split_sizes is not None or output_split_sizes is not None):
            # uneven: the ranks' buffers differ, and so might their table rows; agree on the largest first
            # (one 8-byte all-reduce), so that every rank picks the same backend
            agreed = torch.tensor([n_bytes], dtype=torch.int64)
            self.all_reduce(agreed, dist.ReduceOp.MAX)
            n_bytes = int(agreed)
        return self._call(
            RuntimeOp.ALL_TO_ALL, tensor, n_bytes, async_op, backend,
            lambda g, a: dist.all_to_all_single(output, tensor, output_split_sizes, input_split_sizes,
                                                group=g, async_op=a),
            lambda pg: lambda: pg.engine.all_to_all(output, tensor, outs, ins), [output])

    def broadcast(self, tensor: torch.Tensor, src: int, async_op: bool = False,
                  backend: str | None = None) -> dist.Work | None:
        return self._call(
            RuntimeOp.BROADCAST, tensor, _bytes(tensor), async_op, backend,
            lambda g, a: dist.broadcast(tensor, src, group=g, async_op=a),
            lambda pg: lambda: pg.engine.broadcast(tensor, self._local(pg, src)), [tensor])

    def barrier(self, async_op: bool = False, backend: str | None = None) -> dist.Work | None:
        return self._call(
            RuntimeOp.BARRIER, torch.empty(0), 0, async_op, backend,
            lambda g, a: dist.barrier(group=g, async_op=a), lambda pg: lambda: pg.engine.barrier())

    # --- point to point -------------------------------------------------------------------------------------

    def isend(self, tensor: torch.Tensor, dst: int, backend: str | None = None) -> dist.Work:
        return self._p2p(tensor, dst, True, backend)

    def irecv(self, tensor: torch.Tensor, src: int, backend: str | None = None) -> dist.Work:
        return self._p2p(tensor, src, False, backend)

    def send(self, tensor: torch.Tensor, dst: int, backend: str | None = None) -> None:
        self._p2p(tensor, dst, True, backend, track=False).wait()

    def recv(self, tensor: torch.Tensor, src: int, backend: str | None = None) -> None:
        self._p2p(tensor, src, False, backend, track=False).wait()

    def _p2p(self, tensor: torch.Tensor, peer: int, sending: bool, backend: str | None,
             track: bool = True) -> dist.Work:
        """Sender and receiver must agree on the backend: the table's choice depends only on the message."""
        handle = self._issue(RuntimeOp.SEND_RECV, tensor, _bytes(tensor), backend)
        pg = handle.shm
        if pg is not None:
            local = self._local(pg, peer)
            work = pg.send([tensor], local) if sending else pg.recv([tensor], local)
        else:
            issued = (dist.isend(tensor, peer, group=handle.group) if sending
                      else dist.irecv(tensor, peer, group=handle.group))
            assert issued is not None
            work = issued
        if track:
            self.ordering.track(work)
        return work

    def synchronize(self) -> None:
        """Wait for every outstanding call of this communicator."""
        for work in self.ordering.pending:
            if not work.is_completed():
                work.wait()
        self.ordering.pending.clear()
