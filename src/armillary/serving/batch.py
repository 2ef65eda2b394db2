"""The iteration's batch as the compiled steps read it: the running sequences in admission order
(`Running`) and the new tokens scheduled for each this iteration (`Schedule`), each held in numpy buffers
that grow as needed. `scheduler.ReplicaState` fills them."""

from __future__ import annotations

import numpy as np

from armillary.serving.kernels import drop


class Schedule:
    """New tokens of each sequence scheduled for an iteration, in order (numpy buffers: the compiled steps
    read and fill them as they are)."""

    def __init__(self, capacity: int) -> None:
        self.ids, self.want = np.empty(max(capacity, 1), np.int64), np.empty(max(capacity, 1), np.int64)
        self.n = self.total = 0

    def clear(self, capacity: int) -> Schedule:
        """Empty, with room for `capacity` sequences."""
        if capacity > len(self.ids):
            self.ids, self.want = np.empty(capacity, np.int64), np.empty(capacity, np.int64)
        self.n = self.total = 0
        return self

    def __len__(self) -> int:
        return self.n

    def __setitem__(self, idx: int, want: int) -> None:
        if self.n == len(self.ids):
            self.ids, self.want = (np.concatenate((a, np.empty(self.n, np.int64))) for a in (self.ids, self.want))
        self.ids[self.n], self.want[self.n] = idx, want
        self.n += 1
        self.total += want

    def pop(self, idx: int) -> None:
        """Unschedule sequence `idx` if it is scheduled."""
        at = np.flatnonzero(self.ids[:self.n] == idx)
        if len(at):
            i = int(at[0])
            self.total -= int(self.want[i])
            for a in (self.ids, self.want):
                a[i:self.n - 1] = a[i + 1:self.n]
            self.n -= 1

    def tokens(self) -> int:
        return self.total

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequences, their new tokens): views, valid until the schedule changes."""
        return self.ids[:self.n], self.want[:self.n]


class Running:
    """The running sequences in admission order, held in a numpy buffer (the compiled steps read it as is)."""

    def __init__(self, capacity: int) -> None:
        self.buffer, self.n = np.empty(max(capacity, 1), np.int64), 0

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return int(self.buffer[i if i >= 0 else self.n + i])

    def ids(self) -> np.ndarray:
        """The sequences (a view: valid until the list changes)."""
        return self.buffer[:self.n]

    def append(self, idx: int) -> None:
        if self.n == len(self.buffer):
            self.buffer = np.concatenate((self.buffer, np.empty(self.n, np.int64)))
        self.buffer[self.n] = idx
        self.n += 1

    def pop(self, i: int = -1) -> int:
        i = i if i >= 0 else self.n + i
        idx = int(self.buffer[i])
        self.buffer[i:self.n - 1] = self.buffer[i + 1:self.n]
        self.n -= 1
        return idx

    def remove(self, finished: np.ndarray) -> None:
        self.n = drop(self.buffer, self.n, finished)
