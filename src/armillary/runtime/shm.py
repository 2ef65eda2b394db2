"""Shared-memory collectives for the ranks of one host: the project's own CPU backend.

One memory-mapped file in /dev/shm per group holds, per rank, a sequence flag and a slot in each of two
parities, plus a mailbox per ordered pair of ranks for send / receive. A collective step is: write my part
into my slot of the step's parity, publish the step number in my flag, wait until every flag has reached
it, read the others' slots. Every rank writes only its own flag and slot, so no atomics are needed; two
parities make one flag wait per step enough: a rank that overwrites a slot at step s + 2 has seen every
flag reach s + 1, which each rank publishes only after it finished reading step s. (Stores become visible
in program order on x86-64 (TSO); weaker memory models would need a fence between data and flag.)

Reductions run in rank order on every rank (or, for large messages, each slice on one rank followed by an
all-gather of the slices: reduce-scatter + all-gather, Rabenseifner 2004), so every rank holds the same
bits. Messages larger than a slot go in pieces. Waiting spins briefly, then yields the core, so that more
processes than cores still progress.
"""

from __future__ import annotations

import functools
import mmap
import os
import time
import uuid
from collections.abc import Callable, Sequence
from enum import StrEnum

import numpy as np
import torch

_LINE = 64  # one cache line per flag: ranks never share a line they write
_SPIN = int(os.environ.get("ARMILLARY_SHM_SPIN", 4))  # polls before yielding the core
_YIELDS = int(os.environ.get("ARMILLARY_SHM_YIELDS", 4))  # yields before napping
_NAP_S = float(os.environ.get("ARMILLARY_SHM_NAP", 100e-6))


class ReduceKind(StrEnum):
    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"


def _combine(acc: torch.Tensor, x: torch.Tensor, kind: ReduceKind) -> None:
    if kind is ReduceKind.SUM:
        acc.add_(x)
    elif kind is ReduceKind.PRODUCT:
        acc.mul_(x)
    elif kind is ReduceKind.MIN:
        torch.minimum(acc, x, out=acc)
    else:
        torch.maximum(acc, x, out=acc)


def _flat(t: torch.Tensor) -> torch.Tensor:
    if t.device.type != "cpu":
        raise ValueError(f"the shm backend holds CPU tensors only, got one on {t.device}")
    if not t.is_contiguous():
        raise ValueError("the shm backend needs contiguous tensors")
    return t.view(-1)


class ShmGroup:
    """The shared segment of one group and the collectives over it (blocking; see ShmProcessGroup for the
    asynchronous torch.distributed face)."""

    def __init__(self, rank: int, size: int, path: str, create: bool, slot_bytes: int = 1 << 20,
                 mailbox_bytes: int = 1 << 20, timeout_s: float = 300.0) -> None:
        self.rank, self.size, self.timeout_s = rank, size, timeout_s
        self.slot_bytes, self.mailbox_bytes = slot_bytes, mailbox_bytes
        flags = _LINE * (size + 2 * size * size)
        self._slots_at = flags
        self._mail_at = flags + 2 * size * slot_bytes
        total = self._mail_at + size * size * mailbox_bytes
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, total)
            self._map = mmap.mmap(fd, total)
        finally:
            os.close(fd)
        words = np.frombuffer(self._map, dtype=np.int64, count=flags // 8)
        self._flags = words[: size * _LINE // 8 : _LINE // 8]  # collective step reached, per rank
        pairs = words[size * _LINE // 8:].reshape(2, size, size, _LINE // 8)
        self._sent, self._acked = pairs[0, :, :, 0], pairs[1, :, :, 0]  # [src, dst] pieces sent / consumed
        self._bytes = torch.frombuffer(self._map, dtype=torch.uint8)
        self._step = 0
        self._sent_here = [0] * size
        self._received_here = [0] * size

    # --- the step protocol -------------------------------------------------------------------------------

    def _wait(self, check: Callable[[], bool], what: str) -> None:
        """Spin, then yield, then nap, until `check()`; a timeout names what was awaited (a deadlock shows)."""
        polls = 0
        start = time.monotonic()
        while not check():
            polls += 1
            if polls > _SPIN:
                if polls > _SPIN + _YIELDS:  # still waiting: sleep a little (the peers may need this core)
                    time.sleep(_NAP_S)
                else:
                    os.sched_yield()
                if polls % 1024 == 0 and time.monotonic() - start > self.timeout_s:
                    raise RuntimeError(f"shm rank {self.rank}: no progress for {self.timeout_s:.0f} s waiting "
                                       f"for {what} (flags {self._flags.tolist()})")

    def _slot(self, rank: int, parity: int, offset: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        start = self._slots_at + (parity * self.size + rank) * self.slot_bytes + offset
        return self._bytes[start:start + count * dtype.itemsize].view(dtype)

    def _next_parity(self) -> int:
        return (self._step + 1) % 2

    def _publish(self) -> None:
        """End a step: my slot is written; wait until every rank's is."""
        self._step += 1
        step = self._step
        self._flags[self.rank] = step
        flags = self._flags
        self._wait(lambda: int(flags.min()) >= step, f"collective step {step}")

    def _capacity(self, dtype: torch.dtype, parts: int = 1) -> int:
        """Elements of `dtype` per part when a slot is cut into `parts` aligned parts."""
        return max(self.slot_bytes // parts // _LINE * _LINE // dtype.itemsize, 1)

    # --- collectives ---------------------------------------------------------------------------------------

    def barrier(self) -> None:
        self._publish()

    def all_reduce(self, tensor: torch.Tensor, kind: ReduceKind = ReduceKind.SUM, one_shot_bytes: int = 1 << 15,
                   ) -> None:
        """In place. Small messages: one step, every rank reduces all (in rank order); larger: each rank
        reduces one slice of every piece, then the slices are gathered."""
        flat = _flat(tensor)
        n, dt = flat.numel(), flat.dtype
        if n * dt.itemsize <= one_shot_bytes:
            parity = self._next_parity()
            self._slot(self.rank, parity, 0, n, dt).copy_(flat)
            self._publish()
            flat.copy_(self._slot(0, parity, 0, n, dt))
            for r in range(1, self.size):
                _combine(flat, self._slot(r, parity, 0, n, dt), kind)
            return
        cap = self._capacity(dt, self.size) * self.size
        for lo in range(0, n, cap):
            piece = flat[lo:lo + cap]
            m = piece.numel()
            share = -(-m // self.size)
            mine = slice(min(self.rank * share, m), min((self.rank + 1) * share, m))
            parity = self._next_parity()
            self._slot(self.rank, parity, 0, m, dt).copy_(piece)
            self._publish()
            count = mine.stop - mine.start
            acc = self._slot(0, parity, mine.start * dt.itemsize, count, dt).clone()
            for r in range(1, self.size):
                _combine(acc, self._slot(r, parity, mine.start * dt.itemsize, count, dt), kind)
            parity = self._next_parity()
            self._slot(self.rank, parity, 0, count, dt).copy_(acc)
            self._publish()
            for r in range(self.size):
                a, b = min(r * share, m), min((r + 1) * share, m)
                piece[a:b].copy_(self._slot(r, parity, 0, b - a, dt))

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        flat = _flat(tensor)
        dt, cap = flat.dtype, self._capacity(flat.dtype)
        for lo in range(0, flat.numel(), cap):
            piece = flat[lo:lo + cap]
            parity = self._next_parity()
            if self.rank == src:
                self._slot(src, parity, 0, piece.numel(), dt).copy_(piece)
            self._publish()
            if self.rank != src:
                piece.copy_(self._slot(src, parity, 0, piece.numel(), dt))

    def all_gather(self, output: torch.Tensor, tensor: torch.Tensor) -> None:
        """`output` (p x n) receives every rank's `tensor` (n), rank order."""
        out, flat = _flat(output), _flat(tensor)
        n, dt = flat.numel(), flat.dtype
        if out.numel() != n * self.size:
            raise ValueError(f"all_gather output holds {out.numel()} elements, needs {n * self.size}")
        cap = self._capacity(dt)
        for lo in range(0, n, cap):
            m = min(cap, n - lo)
            parity = self._next_parity()
            self._slot(self.rank, parity, 0, m, dt).copy_(flat[lo:lo + m])
            self._publish()
            for r in range(self.size):
                out[r * n + lo:r * n + lo + m].copy_(self._slot(r, parity, 0, m, dt))

    def reduce_scatter(self, output: torch.Tensor, tensor: torch.Tensor, kind: ReduceKind = ReduceKind.SUM) -> None:
        """`output` (n) receives the reduction of block `rank` of every rank's `tensor` (p x n)."""
        out, flat = _flat(output), _flat(tensor)
        n, dt, p = out.numel(), flat.dtype, self.size
        if flat.numel() != n * p:
            raise ValueError(f"reduce_scatter input holds {flat.numel()} elements, needs {n * p}")
        cap = self._capacity(dt, p)
        part = cap * dt.itemsize
        for lo in range(0, n, cap):
            m = min(cap, n - lo)
            parity = self._next_parity()
            for j in range(p):
                self._slot(self.rank, parity, j * part, m, dt).copy_(flat[j * n + lo:j * n + lo + m])
            self._publish()
            acc = out[lo:lo + m]
            acc.copy_(self._slot(0, parity, self.rank * part, m, dt))
            for r in range(1, p):
                _combine(acc, self._slot(r, parity, self.rank * part, m, dt), kind)

    def all_to_all(self, output: torch.Tensor, tensor: torch.Tensor, output_splits: Sequence[int] | None = None,
                   input_splits: Sequence[int] | None = None) -> None:
        """Rank i's block j of `tensor` lands in rank j's block i of `output`; splits count elements
        (None: equal blocks). Uneven splits are exchanged first so that every rank knows the rounds."""
        out, flat = _flat(output), _flat(tensor)
        dt, p = flat.dtype, self.size
        sends = list(input_splits) if input_splits is not None else [flat.numel() // p] * p
        recvs = list(output_splits) if output_splits is not None else [out.numel() // p] * p
        if input_splits is None and output_splits is None:
            matrix = np.full((p, p), flat.numel() // p, dtype=np.int64)
        else:
            parity = self._next_parity()
            self._slot(self.rank, parity, 0, p, torch.int64).copy_(torch.tensor(sends, dtype=torch.int64))
            self._publish()
            matrix = np.stack([self._slot(r, parity, 0, p, torch.int64).numpy() for r in range(p)])
        if [int(x) for x in matrix[:, self.rank]] != recvs:
            raise ValueError(f"all_to_all rank {self.rank}: output splits {recvs} differ from what the ranks "
                             f"send it {matrix[:, self.rank].tolist()}")
        send_at = np.concatenate([[0], np.cumsum(sends)]).astype(int)
        recv_at = np.concatenate([[0], np.cumsum(recvs)]).astype(int)
        q = self._capacity(dt, p)
        part = q * dt.itemsize
        rounds = -(-int(matrix.max()) // q)
        for k in range(rounds):
            parity = self._next_parity()
            for j in range(p):
                m = max(min(sends[j] - k * q, q), 0)
                if m:
                    start = send_at[j] + k * q
                    self._slot(self.rank, parity, j * part, m, dt).copy_(flat[start:start + m])
            self._publish()
            for r in range(p):
                m = max(min(recvs[r] - k * q, q), 0)
                if m:
                    start = recv_at[r] + k * q
                    out[start:start + m].copy_(self._slot(r, parity, self.rank * part, m, dt))

    # --- point to point --------------------------------------------------------------------------------------

    def _mailbox(self, src: int, dst: int, count: int, dtype: torch.dtype) -> torch.Tensor:
        start = self._mail_at + (src * self.size + dst) * self.mailbox_bytes
        return self._bytes[start:start + count * dtype.itemsize].view(dtype)

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        """Eager up to one mailbox; a larger message waits for the receiver to drain each piece."""
        flat = _flat(tensor)
        dt, cap = flat.dtype, max(self.mailbox_bytes // flat.dtype.itemsize, 1)
        acked = self._acked
        for lo in range(0, max(flat.numel(), 1), cap):
            done = self._sent_here[dst]
            self._wait(functools.partial(_reached, acked, (self.rank, dst), done), f"rank {dst} to drain a send")
            piece = flat[lo:lo + cap]
            self._mailbox(self.rank, dst, piece.numel(), dt).copy_(piece)
            self._sent_here[dst] = done + 1
            self._sent[self.rank, dst] = done + 1

    def recv(self, tensor: torch.Tensor, src: int) -> None:
        flat = _flat(tensor)
        dt, cap = flat.dtype, max(self.mailbox_bytes // flat.dtype.itemsize, 1)
        sent = self._sent
        for lo in range(0, max(flat.numel(), 1), cap):
            want = self._received_here[src] + 1
            self._wait(functools.partial(_reached, sent, (src, self.rank), want), f"a send from rank {src}")
            piece = flat[lo:lo + cap]
            piece.copy_(self._mailbox(src, self.rank, piece.numel(), dt))
            self._received_here[src] = want
            self._acked[src, self.rank] = want


def _reached(flags: np.ndarray, at: tuple[int, int], value: int) -> bool:
    return int(flags[at]) >= value


def segment_path() -> str:
    """A fresh path for a group's segment: /dev/shm where it exists (memory-backed), else the temp dir."""
    import tempfile

    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(base, f"armillary-shm-{uuid.uuid4().hex}")
