"""Fit a network tier to measured collective sweeps: nccl-tests logs in, a calibrated system out.

The tier the collective crosses (scale-up within one node, scale-out beyond) gets three things, fitted in
order: its asymptotic efficiency (the largest message's bus bandwidth), its per-step latency (the smallest
messages, least squares in log time), and a size-efficiency curve (for each measured size, the bandwidth
multiplier that reproduces the measured time: the ramp-up of mid-size messages, which NCCL drives with its
channel count), kept non-decreasing in size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from armillary.comm.collectives import collective
from armillary.comm.cost_types import ALGORITHMS
from armillary.comm.phase_net import phase_message
from armillary.comm.sweep import group_of
from armillary.fitting import bisect, golden_section, non_decreasing_ramp
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.system import System


@dataclass(frozen=True)
class Measurement:
    size_bytes: float
    time_s: float


_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+\S+")


def parse_nccl_tests(text: str) -> list[Measurement]:
    """The (size, time) pairs of an nccl-tests log (the table it prints: size, count, type, [redop, root,]
    time, algbw, busbw, #wrong, then the same for in-place): each size's faster run of the two, as the
    validation harness reads a row (validation/collective_reading.best_of_runs: noise and warm-up only ever slow
    a run). Times carry more digits than the printed bandwidths, so the fit works on times."""
    rows = []
    for line in text.splitlines():
        if line.lstrip().startswith("#") or not _ROW.match(line):
            continue
        tokens = line.split()
        try:
            # out-of-place time, algbw, busbw, #wrong come before the 4 in-place columns
            time_us = float(tokens[-8])
            size = float(tokens[0])
        except (ValueError, IndexError):
            continue
        try:
            in_place = float(tokens[-4])
        except ValueError:
            in_place = 0.0
        if 0 < in_place < time_us:
            time_us = in_place
        if size > 0 and time_us > 0:
            rows.append(Measurement(size, time_us * 1e-6))
    if not rows:
        raise ValueError("no nccl-tests result rows found (expected lines: size count type ... busbw #wrong ...)")
    return rows


def fitted_dimension(system: System, gpus: int) -> int:
    """The dimension a calibration over `gpus` devices fits: the outermost one the group spans."""
    return int(group_of(system, gpus).outermost)


def _time(op: Collective, size: float, system: System, gpus: int, algorithm: Algorithm) -> tuple[float, int]:
    """Model time of the collective and the index of the algorithm the fitted dimension runs."""
    result = collective(op, size, group_of(system, gpus), system, algorithm)
    return float(result.cost.time), int(result.dimensions[fitted_dimension(system, gpus)].algorithm)


def _with(system: System, tier: int, **update: object) -> System:
    return system.with_dimension(tier, **update)


def _fit_asymptote(base: System, tier: int, field: str, chosen: Algorithm, largest: Measurement,
                   op: Collective, gpus: int) -> System:
    """Bisection on `field`: the time falls as the efficiency rises. The algorithm is pinned so that a
    switch to another one cannot stall the bisection."""
    lo, hi = bisect(lambda mid: _time(op, largest.size_bytes, _with(base, tier, **{field: mid}), gpus, chosen)[0]
                    > largest.time_s, 1e-3, 1.0)
    if hi < 2e-3 or lo > 0.999:
        raise ValueError(f"the largest message ({largest.size_bytes:.0f} B in {largest.time_s * 1e6:.1f} us) cannot "
                         f"be matched by any {field} of {chosen.value} on {base.network[tier].name}: check --gpus, "
                         "--op and --system")
    return _with(base, tier, **{field: (lo + hi) / 2})


def _efficiency_field(algorithm: Algorithm) -> str:
    """The dimension field that sets `algorithm`'s achievable share of the bandwidth."""
    fields = {Algorithm.IN_NETWORK: "in_network_efficiency", Algorithm.TREE: "tree_efficiency"}
    return fields.get(algorithm, "efficiency")


def _fit_latency(base: System, tier: int, small: list[Measurement], op: Collective, gpus: int,
                 algorithm: Algorithm) -> System:
    """Least squares in log time over `small` (grid, then golden-section refinement)."""

    def log_error(latency: float) -> float:
        trial = _with(base, tier, latency=float(latency))
        return sum(np.log(_time(op, m.size_bytes, trial, gpus, algorithm)[0] / m.time_s) ** 2 for m in small)

    grid = np.geomspace(0.1e-6, 0.1, 120)  # NVLink hops (us) up to TCP loopback (ms)
    return _with(base, tier, latency=golden_section(log_error, grid))


def fit_tier(measurements: Sequence[Measurement], op: Collective, gpus: int, system: System,
             algorithm: Algorithm = Algorithm.AUTO) -> System:
    """`system` with the crossed tier's efficiency, latency and size-efficiency curve fitted (returned at
    the size it was given)."""
    given = system
    system = system.with_devices(gpus) if gpus != system.devices else system
    tier = fitted_dimension(system, gpus)
    points = sorted(measurements, key=lambda m: m.size_bytes)
    base = _with(system, tier, size_efficiency=None, tree_size_efficiency=None)

    # 1. asymptote: the efficiency of the algorithm the largest message uses, so that it takes its measured
    # time; 2. latency: least squares in log time over the small messages. Each shifts the other a little:
    # alternate until both settle.
    largest = points[-1]
    chosen = ALGORITHMS[_time(op, largest.size_bytes, base, gpus, algorithm)[1]]
    field = _efficiency_field(chosen)
    # a sweep that starts above the latency-bound sizes (<= 64 KiB) says little about the latency: it keeps
    # the given one unless the sweep has no more than its smallest message to go by
    small = [m for m in points if m.size_bytes <= 64 * 1024] or (
        [points[0]] if len(points) < 4 else [])
    for _ in range(6 if small else 1):
        base = _fit_asymptote(base, tier, field, chosen, largest, op, gpus)
        if small:
            base = _fit_latency(base, tier, small, op, gpus, algorithm)
    base = _fit_asymptote(base, tier, field, chosen, largest, op, gpus)  # the largest message exactly

    # 3. size efficiency: the bandwidth multiplier that reproduces each measured time (bisection)
    base = _fit_ramp(base, tier, points, op, gpus, algorithm)
    return base.resized(given.sizes)


def _fit_ramp(base: System, tier: int, points: Sequence[Measurement], op: Collective, gpus: int,
              algorithm: Algorithm) -> System:
    """`size_efficiency` of the tier: per measured size, the bandwidth multiplier (bisection) that gives the
    measured time, forced non-decreasing; none where every size is met at full rate."""
    def too_low(mid: float, m: Measurement) -> bool:
        trial = _with(base, tier, size_efficiency=EfficiencyCurve(points=((1.0, mid),)))
        return _time(op, m.size_bytes, trial, gpus, algorithm)[0] >= m.time_s

    base = _with(base, tier, size_efficiency=None)
    ramp = []
    for m in points:
        if _time(op, m.size_bytes, base, gpus, algorithm)[0] >= m.time_s:
            ramp.append(1.0)
            continue
        lo, hi = bisect(partial(too_low, m=m), 0.01, 1.0, iterations=40, geometric=True)
        ramp.append((lo * hi) ** 0.5)
    # a message's share of the bandwidth does not shrink as it grows, and a larger message is never faster
    ramp = non_decreasing_ramp([m.size_bytes for m in points], ramp)
    if min(ramp) < 0.999:
        # the curve is read at the bytes the fitted tier handles
        group = group_of(base, gpus)
        at = [float(phase_message(op, m.size_bytes, group, tier)) for m in points]
        curve = EfficiencyCurve(points=tuple((x, float(r)) for x, r in zip(at, ramp, strict=True)))
        base = _with(base, tier, size_efficiency=curve)
    return base


def fit_ring_after_tree(measurements: Sequence[Measurement], op: Collective, gpus: int, system: System) -> System:
    """`system`, calibrated on a sweep whose large messages ran the tree, with a pinned-ring sweep's own
    figures: the first sweep's size curve becomes the tree's (`tree_size_efficiency`; NCCL corrects its
    model by size for trees only, tuning.cc treeCorrectionFactor), and the ring's efficiency and size
    curve are fitted on `measurements` (the latency stays)."""
    given = system
    system = system.with_devices(gpus) if gpus != system.devices else system
    tier = fitted_dimension(system, gpus)
    dim = system.network[tier]
    split = _with(system, tier, tree_size_efficiency=dim.tree_size_efficiency or dim.size_efficiency,
                  size_efficiency=None)
    points = sorted(measurements, key=lambda m: m.size_bytes)
    fitted = _fit_asymptote(split, tier, "efficiency", Algorithm.RING, points[-1], op, gpus)
    fitted = _fit_ramp(fitted, tier, points, op, gpus, Algorithm.RING)
    return _fit_asymptote(fitted, tier, "efficiency", Algorithm.RING, points[-1], op, gpus).resized(given.sizes)


def fit_efficiency(measurements: Sequence[Measurement], op: Collective, gpus: int, system: System,
                   algorithm: Algorithm) -> System:
    """`system` with only the asymptotic efficiency of `algorithm` on the crossed tier fitted to the largest
    message (its latency and size-efficiency curve kept): a second sweep that pins another algorithm
    (e.g. NCCL_ALGO=Ring after an auto sweep that ran the tree) calibrates that algorithm's share."""
    given = system
    system = system.with_devices(gpus) if gpus != system.devices else system
    tier = fitted_dimension(system, gpus)
    largest = max(measurements, key=lambda m: m.size_bytes)
    fitted = _fit_asymptote(system, tier, _efficiency_field(algorithm), algorithm, largest, op, gpus)
    return fitted.resized(given.sizes)


def chosen_algorithm(measurements: Sequence[Measurement], op: Collective, gpus: int, system: System) -> Algorithm:
    """The algorithm the crossed tier runs for the largest message (auto)."""
    largest = max(measurements, key=lambda m: m.size_bytes)
    sized = system.with_devices(gpus) if gpus != system.devices else system
    return ALGORITHMS[_time(op, largest.size_bytes, sized, gpus, Algorithm.AUTO)[1]]


def fit_channel_bandwidth(sweeps: Sequence[tuple[Sequence[Measurement], Collective, int]], system: System) -> System:
    """`system` with the crossed tier's per-channel rate (`channel_bandwidth`) fitted on sweeps run with
    NCCL's default channel count whose plateau sits below the NICs' rate: for each sweep, the rate at which
    its largest message takes its measured time (ring; comm/channels.py), then their geometric mean."""
    fits, tiers = [], set()
    for measurements, op, gpus in sweeps:
        sized = system.with_devices(gpus) if gpus != system.devices else system
        tier = fitted_dimension(sized, gpus)
        tiers.add(tier)
        if sized.network[tier].channels is None:
            raise ValueError(f"{sized.network[tier].name}: set `channels` (NCCL's default count) before fitting "
                             "channel_bandwidth")
        largest = max(measurements, key=lambda m: m.size_bytes)

        def too_slow(rate: float, s: System = sized, t: int = tier, m: Measurement = largest,
                     o: Collective = op, g: int = gpus) -> bool:
            return _time(o, m.size_bytes, _with(s, t, channel_bandwidth=rate), g, Algorithm.RING)[0] > m.time_s

        lo, hi = bisect(too_slow, 1e8, 1e12, iterations=60, geometric=True)
        if hi > 0.99e12:
            raise ValueError(f"the largest message of the {gpus}-GPU sweep runs faster than any channel limit "
                             "allows: its plateau is the NICs', not the channels'")
        fits.append((lo * hi) ** 0.5)
    if len(tiers) != 1:
        raise ValueError(f"the sweeps cross different dimensions ({sorted(tiers)}): fit one dimension at a time")
    return _with(system, tiers.pop(), channel_bandwidth=float(np.exp(np.mean(np.log(fits)))))
