"""Several communication libraries on a network, each call run by the fastest (MCR-DL, Anthony et al.,
IPDPS'23: per-operation, per-size backend choice).

A dimension may list libraries (`NetworkDimension.libraries`), each with its own latency, efficiency and
size-efficiency curve. Library L's view of the system has, on every dimension that lists L, L's figures
(on the others, the dimension's own); a call costs what it costs in the fastest library's view, and
`collective` reports which library that was. The figures of a library are fitted from its measured sweep
with the same calibration as a plain dimension (`comm/calibration.py`): `fit_library`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from armillary.numerics import Array, is_array
from armillary.specs.communication import Collective
from armillary.specs.network import LibraryProfile, NetworkDimension
from armillary.specs.system import System

if TYPE_CHECKING:
    from armillary.comm.calibration import Measurement

T = TypeVar("T")


def library_names(system: System) -> tuple[str, ...]:
    """Every library some dimension lists, in the order first listed."""
    for dim in system.network:  # most systems list none: told without building the tuple (every collective asks)
        if dim.libraries:
            break
    else:
        return ()
    return tuple(dict.fromkeys(lib.name for dim in system.network for lib in dim.libraries))


def _as(dim: NetworkDimension, name: str, op: Collective | None) -> NetworkDimension:
    """The dimension with library `name`'s figures for `op` (a profile for all operations, or for `op`)."""
    for lib in sorted(dim.libraries, key=lambda lib: lib.ops is None):  # a profile for the op comes first
        if lib.name == name and (lib.ops is None or op is None or op in lib.ops):
            update: dict[str, object] = {"latency": lib.latency, "efficiency": lib.efficiency,
                                         "size_efficiency": lib.size_efficiency, "libraries": ()}
            if lib.algorithms is not None:
                update["algorithms"] = lib.algorithms
            return dim.model_copy(update=update)
    return dim.model_copy(update={"libraries": ()})


def with_library(system: System, name: str, op: Collective | None = None) -> System:
    """The system as library `name` sees it for `op` (and no other library listed)."""
    if name not in library_names(system):
        raise ValueError(f"library {name!r}: the system lists {list(library_names(system))}")
    return system.model_copy(update={"network": tuple(_as(d, name, op) for d in system.network)})


def fastest(evaluate: Callable[[System], T], time_of: Callable[[T], Array], system: System,
            select: Callable[[Sequence[T], Array], T], op: Collective) -> tuple[T, Array]:
    """`evaluate` in every library's view for `op`; the fastest per point (`select` picks among the results
    by index array or int) and the index of its library."""
    names = library_names(system)
    results = [evaluate(with_library(system, n, op)) for n in names]
    times = [time_of(r) for r in results]
    if not any(is_array(t) for t in times):
        k = min(range(len(times)), key=lambda i: float(times[i]))
        return results[k], k
    index = np.argmin(np.stack(np.broadcast_arrays(*[np.asarray(t, dtype=float) for t in times])), axis=0)
    return select(results, index), index


def choose(index: Array, values: Sequence[Array]) -> Array:
    """values[index] per point (index an int or an array of ints)."""
    if not is_array(index):
        return values[int(index)]
    arrays = np.broadcast_arrays(*[np.asarray(v, dtype=float) for v in values], np.asarray(index))
    return np.choose(arrays[-1], arrays[:-1])


def fit_library(name: str, measurements: Sequence[Measurement], op: Collective, ranks: int,
                system: System, per_op: bool = False) -> LibraryProfile:
    """A library's figures on the dimension a sweep over `ranks` crosses, fitted from its measured sweep
    (`comm.calibration.Measurement`s, e.g. parsed from `armillary commbench --backends ... --out` files);
    `per_op`: the figures hold for `op` only."""
    from armillary.comm.calibration import Measurement, fit_tier, fitted_dimension

    # a message is never slower than a larger one: a noisy mid-size sample (a busy machine) is lowered to
    # the time of the fastest larger message, so that it cannot drag the fitted ramp of every smaller size
    points = sorted(measurements, key=lambda m: m.size_bytes)
    floor = np.minimum.accumulate([m.time_s for m in points][::-1])[::-1]
    measurements = [Measurement(m.size_bytes, float(t)) for m, t in zip(points, floor, strict=True)]

    plain = system.model_copy(update={"network": tuple(d.model_copy(update={"libraries": ()})
                                                        for d in system.network)})
    fitted = fit_tier(measurements, op, ranks, plain)
    dim = fitted.network[fitted_dimension(fitted.with_devices(ranks), ranks)]
    return LibraryProfile(name=name, latency=dim.latency, efficiency=dim.efficiency,
                          size_efficiency=dim.size_efficiency, ops=(op,) if per_op else None,
                          sources={"fit": f"armillary fit_library from a {ranks}-rank sweep of {len(measurements)} "
                                          "sizes"})


def with_libraries(system: System, dimension: int, libraries: Sequence[LibraryProfile]) -> System:
    """`system` with `libraries` listed on one dimension."""
    return system.with_dimension(dimension, libraries=tuple(libraries))
