"""When every task of a simulated graph ran, and the chain of tasks that decided the end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Timeline:
    """When every task ran. `cause[i]`: the task whose end let task i start (-1: it started at time 0)."""

    start_ns: np.ndarray
    end_ns: np.ndarray
    cause: np.ndarray
    duration_ns: np.ndarray  # as run: after perturbations, before link sharing
    events: int  # task starts and ends, and rate changes of flows

    @property
    def makespan_ns(self) -> int:
        return int(self.end_ns.max()) if len(self.end_ns) else 0

    @property
    def makespan_s(self) -> float:
        """The simulated time, first start to last end, in seconds."""
        return self.makespan_ns / 1e9

    def critical_path(self) -> tuple[int, ...]:
        """The chain of tasks, first to last, that ends with the last task to finish."""
        if not len(self.end_ns):
            return ()
        chain = [int(np.argmax(self.end_ns))]
        while self.cause[chain[-1]] >= 0:
            chain.append(int(self.cause[chain[-1]]))
        return tuple(reversed(chain))
