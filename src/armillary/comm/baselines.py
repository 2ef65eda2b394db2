"""A synthesized collective next to the closed-form algorithms of the collective model on the same system:
ring, direct, halving-doubling, double binary tree, hierarchical multi-dimensional, and the lower bound."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from armillary.comm.sweep import collective_sweep, group_of
from armillary.comm.synthesis import Schedule, from_graph, synthesize_best
from armillary.comm.topology import topology_graph
from armillary.errors import SpecError
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_device, load_system
from armillary.specs.network import CollectiveLibrary, NetworkDimension, NetworkKind
from armillary.specs.system import System

_ALL = (Algorithm.RING, Algorithm.TREE, Algorithm.HALVING_DOUBLING, Algorithm.DIRECT)


@dataclass(frozen=True)
class Baseline:
    name: str
    time_s: float | None  # None: the algorithm cannot run on this system


def grid_system(kind: NetworkKind, shape: tuple[int, ...], link_bandwidth: float, latency: float,
                device: str = "h100-sxm") -> System:
    """A one-dimension system of `shape` whose every link carries `link_bandwidth` per direction (the
    dimension's per-device bandwidth is that times the links per device, as `comm.topology` divides it),
    at efficiency 1 so that it compares with synthesis."""
    if kind not in (NetworkKind.RING, NetworkKind.TORUS, NetworkKind.MESH):
        raise SpecError(f"topology kind {kind.value}: ring, torus or mesh")
    ring = kind is NetworkKind.RING
    dim = NetworkDimension(name=f"{kind.value} {'x'.join(map(str, shape))}", kind=kind,
                           bandwidth=(2 if ring else 2 * len(shape)) * link_bandwidth, latency=latency,
                           efficiency=1.0, algorithms=_ALL, size=math.prod(shape), shape=None if ring else shape)
    return System(name=dim.name, device=load_device(device), network=(dim,))


def synthesize_on(system: System, gpus: int, op: Collective, total_bytes: float, chunks_per_npu: int = 1,
                  seeds: int = 16, batch: int = 1) -> Schedule:
    """The best of `seeds` syntheses over the system's topology graph (switches unwound into links)."""
    sized = load_system(system, gpus)
    try:
        links = from_graph(topology_graph(sized))
        return synthesize_best(op, links, total_bytes, chunks_per_npu, seeds, sized.device.hbm.rate, batch=batch)
    except ValueError as err:
        raise SpecError(str(err)) from None


def _links(size: int) -> int:
    """Links a device has along a ring, torus or mesh axis of `size` positions as the topology graph wires it:
    none alone, one to its only neighbour (the wrap-around of two positions is that same link), else two."""
    return 0 if size < 2 else 1 if size == 2 else 2


def as_wired(system: System) -> System:
    """`system` with every ring, torus and mesh dimension's bandwidth the links its devices have in the
    topology graph (`comm.topology` wires two per axis, one on an axis of two positions, none on an axis of
    one; it divides the dimension's bandwidth by two per axis) and its axes of one position dropped: the
    closed-form algorithms then see the injection the synthesizer and its lower bound see (on axes of one and
    two positions they saw up to twice of it)."""
    for index, dim in enumerate(system.network):
        if dim.kind not in (NetworkKind.RING, NetworkKind.TORUS, NetworkKind.MESH):
            continue
        shape = (dim.size,) if dim.kind is NetworkKind.RING or not dim.shape else dim.shape
        wired = sum(_links(n) for n in shape)
        if wired == 0 or wired == 2 * len(shape):
            continue
        kept = tuple(n for n in shape if n > 1)
        changes: dict[str, object] = {"bandwidth": dim.bandwidth * wired / (2 * len(shape))}
        if dim.kind is not NetworkKind.RING and dim.shape:
            changes["shape"] = kept
        system = system.with_dimension(index, **changes)
    return system


def _time(op: Collective, total_bytes: float, system: System, gpus: int, algorithm: Algorithm,
          composition: Composition = Composition.AUTO) -> float | None:
    """The collective model's time (`comm.sweep`, as `armillary collective` prints it), None where the
    algorithm cannot run, on the links the topology graph wires (`as_wired`)."""
    sized = as_wired(load_system(system, gpus))
    try:
        row = collective_sweep(op, np.array([total_bytes]), group_of(sized, gpus), sized, algorithm, composition)[0]
    except ValueError:
        return None
    return row.time_s if np.isfinite(row.time_s) else None


def baselines(system: System, gpus: int, op: Collective, total_bytes: float) -> tuple[Baseline, ...]:
    """Each closed-form algorithm pinned (None where it cannot run), and the hierarchical library's
    pipelined phases."""
    out = [Baseline(a.value, _time(op, total_bytes, system, gpus, a)) for a in _ALL]
    hierarchical = system.model_copy(update={"collectives": CollectiveLibrary.HIERARCHICAL})
    out.append(Baseline("hierarchical", _time(op, total_bytes, hierarchical, gpus, Algorithm.AUTO,
                                              Composition.PIPELINED)))
    return tuple(out)


@dataclass(frozen=True)
class Recommendation:
    """The fastest of the synthesized schedule and the closed-form algorithms, and why."""

    use: str  # "synthesized" or a closed-form algorithm's name
    time_s: float
    runner_up: str | None  # None: nothing else runs here
    runner_up_s: float | None
    reason: str


def _overheads(schedule: Schedule) -> str:
    """What keeps a synthesized schedule above its lower bound (which pays no latency and divides the buffer
    finely): the latency its busiest link pays per transfer, and whole chunks: the busiest node's n chunks
    over its d incoming links take ceil(n / d) transfers in a row, not n / d."""
    links = schedule.links
    parts = [f"{schedule.time / schedule.bound:.3f}x its lower bound" if schedule.bound > 0 else "no bound"]
    first = np.ones(len(schedule.link), bool)
    if schedule.batch > 1:  # the chunks of one transfer share its link and start
        first = np.zeros(len(schedule.link), bool)
        first[np.unique(np.stack([schedule.link, schedule.start], axis=1), axis=0, return_index=True)[1]] = True
    sends = np.bincount(schedule.link[first], minlength=len(links.src))
    latency = float((sends * links.latency).max(initial=0.0))
    if schedule.time > 0 and latency > 0.01 * schedule.time:
        parts.append(f"{latency / schedule.time:.0%} of its time is the latency of the {int(sends.max())} "
                     "transfers on its busiest link (--batch carries several chunks per transfer)")
    if schedule.op is not Collective.ALL_TO_ALL and links.nodes > 1:
        v = int(np.argmin(links.incoming_bandwidth()))
        into = links.dst == v
        d = int(np.count_nonzero(into))
        n = schedule.chunks - int(np.count_nonzero(schedule.owner == v))
        alike = d > 0 and np.ptp(links.bandwidth[into]) == 0 and np.ptp(links.latency[into]) == 0
        if alike and n > 0 and math.ceil(n / d) * d > n * 1.01:  # (on links alike, whole transfers in a row)
            parts.append(f"whole chunks: its busiest device's {n} chunks over {d} links take {math.ceil(n / d)} "
                         f"transfers in a row, not {n / d:.3g} (--chunks divides the buffer finer)")
    if len(schedule.utilization):
        parts.append(f"its links are busy {float(schedule.utilization.mean()):.0%} of the time on average")
    return "; ".join(parts)


def recommend(schedule: Schedule, closed_form: tuple[Baseline, ...]) -> Recommendation:
    """The fastest way to run the collective of `schedule` on its topology: the synthesized schedule or
    the fastest closed-form algorithm (`baselines`, times from the collective model on the links the
    topology graph wires), with the runner-up and the reason."""
    runnable = sorted((b for b in closed_form if b.time_s is not None), key=lambda b: b.time_s or 0.0)
    if not runnable:
        return Recommendation("synthesized", schedule.time, None, None,
                              "no closed-form algorithm runs on this topology")
    best = runnable[0]
    assert best.time_s is not None
    if schedule.time <= best.time_s:
        return Recommendation("synthesized", schedule.time, best.name, best.time_s,
                              f"the synthesized schedule is {_faster(best.time_s, schedule.time)} than "
                              f"{best.name}, the fastest closed-form algorithm here ({_overheads(schedule)})")
    return Recommendation(best.name, best.time_s, "synthesized", schedule.time,
                          f"{best.name} is {_faster(schedule.time, best.time_s)} than the synthesized schedule, "
                          f"which is {_overheads(schedule)}")


def _faster(slow: float, fast: float) -> str:
    """'7.6% faster' below twice as fast, '4.28x faster' above."""
    ratio = slow / fast if fast > 0 else math.inf
    return f"{ratio:.3g}x faster" if ratio >= 2 else f"{ratio - 1:.1%} faster"
