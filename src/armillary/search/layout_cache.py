"""What a search's blocks estimated apart from the memory capacities, kept by layout and range of points, so
that the searches of systems that differ only in their HBM and second-tier capacities share one estimate of each
block (`systems.codesign`; `run.Problem.evaluate` reads and fills it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from armillary.search.space import Axes
from armillary.specs.system import System

Parts = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # per point: step time, HBM, second tier, fits
Key = tuple[tuple[Any, ...], int, int]  # a layout's labels and a range of its points
CACHE_POINTS = 2**22  # points a LayoutCache holds (25 bytes each: about 105 MB); blocks beyond run uncached


class LayoutCache:
    """What the blocks of one search estimated, apart from the memory capacities, by layout and range of its
    points: shared by the searches of systems that differ only in their HBM and second-tier capacities
    (`systems.codesign`). A training estimate's times and memory do not depend on the capacities, which
    enter only its feasibility (`estimate.feasibility.memory_fits`): a block is estimated once with
    capacities that hold anything, and each system judges its memory with `memory_fits` (exact: the same
    answer as its own search)."""

    def __init__(self, limit: int = CACHE_POINTS) -> None:
        self.held: dict[Key, Parts] = {}
        self.whole: dict[tuple[Key, ...], Parts] = {}  # blocks of several layouts as estimated (`held` views them)
        self.points = 0
        self.limit = limit
        self.estimated = 0  # blocks estimated (the rest were read from the cache)
        self.inputs: tuple[Any, ...] | None = None

    def bind(self, inputs: tuple[Any, ...]) -> None:
        """Refuse a search of other inputs than the first (its model, system without capacities, workload,
        base strategy and space)."""
        if self.inputs is None:
            self.inputs = inputs
        elif inputs != self.inputs:
            raise ValueError("LayoutCache: shared by searches that differ in more than the memory capacities")

    def parts(self, keys: list[Key], estimate: Callable[[], Parts]) -> Parts:
        """The block's parts (flat, in index order) from the cache, else from `estimate` (then kept while
        the cache has room)."""
        whole = self.whole.get(tuple(keys))  # the held arrays themselves: the blocks read them, never write
        if whole is not None:
            return whole
        held = [self.held.get(key) for key in keys]
        if all(h is not None for h in held):
            if len(held) == 1:
                return held[0]  # type: ignore[return-value]
            return tuple(np.concatenate(column) for column in zip(*held, strict=True))  # type: ignore[return-value]
        parts = estimate()
        self.estimated += 1
        size = sum(b - a for _, a, b in keys)
        if self.points + size <= self.limit:
            offset = 0
            for key in keys:
                n = key[2] - key[1]
                if key not in self.held:
                    self.held[key] = tuple(p[offset:offset + n] for p in parts)  # type: ignore[assignment]
                    self.points += n
                offset += n
            if len(keys) > 1:  # the same block of another system's search: no concatenation (no more memory)
                self.whole[tuple(keys)] = parts
        return parts


def layout_keys(axes: Axes, start: int, stop: int) -> list[Key] | None:
    """The (layout, range in it) of the points start..stop-1: one range of one layout, or whole layouts
    (blocks across layouts hold whole layouts); None for a range that is neither."""
    rows = axes.labels[0]
    per = axes.size // len(rows)
    first, last = start // per, (stop - 1) // per
    if first == last:
        return [(rows[first], start - first * per, stop - first * per)]
    if start % per or stop % per:
        return None
    return [(rows[k], 0, per) for k in range(first, last + 1)]


def unbounded(system: System) -> System:
    """`system` with HBM and second-tier capacities that hold anything (what `LayoutCache` estimates with)."""
    device, pool = system.device, system.memory_pool
    memory = tuple(tier.model_copy(update={"capacity": np.inf}) for tier in device.memory)
    return system.model_copy(update={"device": device.model_copy(update={"memory": memory}),
                                     "memory_pool": None if pool is None else pool.model_copy(
                                         update={"capacity": np.inf})})
