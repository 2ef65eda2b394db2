"""`network-optimize`'s constraint options read into `BandwidthConstraints`: LIBRA's forms
(astra-sim/libra inputs/constraints/multiple_constraints.py) written on the command line.

- `--fix DIM=BW`: one dimension at exactly BW (`bw[0] == 500`): equal lower and upper bounds;
- `--sum DIM+DIM<=BW` or `--sum DIM+DIM=BW`: a sum of chosen dimensions (`bw[2] + bw[3] == 200`);
- `--order DIM>=DIM`: one pair of a partial order (`bw[0] >= bw[1]`), any number of them;
- `--total BW` with `--total-exact`: the sum of all dimensions at exactly BW (`quicksum(bw) == 1000`).

A dimension is named by its `name` in the system or by its index (0 = innermost).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from armillary.errors import SpecError
from armillary.search.network_bandwidth import BandwidthConstraints, DimensionSum
from armillary.specs.system import System
from armillary.units import parse_quantity


@dataclass(frozen=True)
class ConstraintOptions:
    total: str | None = None
    total_exact: bool = False
    budget: float | None = None
    minimum: str = "1GB/s"
    maximum: str | None = None
    ordered: bool = False
    fix: tuple[str, ...] = ()
    sums: tuple[str, ...] = ()
    order: tuple[str, ...] = ()
    cost: str | None = None
    power: str | None = None


def bandwidth(text: str, option: str) -> float:
    try:
        value = parse_quantity(text.strip(), "bytes_per_s")
    except ValueError as err:
        raise SpecError(f"{option}: {err}") from None
    if not np.isfinite(value) or value <= 0:
        raise SpecError(f"{option}: a bandwidth above 0, not {text!r}")
    return value


def dimension(ref: str, system: System, option: str) -> int:
    """A dimension by name or index."""
    names = [d.name for d in system.network]
    ref = ref.strip()
    if ref in names:
        return names.index(ref)
    if ref.isdigit() and int(ref) < len(names):
        return int(ref)
    raise SpecError(f"{option}: dimension {ref!r} is none of {', '.join(names)} (or 0..{len(names) - 1})")


def per_dimension(text: str | None, n: int, option: str) -> np.ndarray | None:
    """A comma list of n figures per GB/s, as per byte/s."""
    if text is None:
        return None
    try:
        values = np.array([float(x) for x in text.split(",")])
    except ValueError:
        raise SpecError(f"{option} {text!r}: {n} numbers separated by commas") from None
    if len(values) != n or np.any(~np.isfinite(values)) or np.any(values < 0):
        raise SpecError(f"{option}: {n} numbers >= 0 (one per network dimension), got {text!r}")
    return values / 1e9


_SUM = re.compile(r"^(?P<dims>[^<=]+?)\s*(?P<op><=|=)\s*(?P<bw>.+)$")


def constraints(options: ConstraintOptions, system: System) -> BandwidthConstraints:
    """The constraints the options describe, checked against the system's dimensions."""
    n = len(system.network)
    now = np.array([d.bandwidth for d in system.network])
    cap = bandwidth(options.total, "--total") if options.total else None
    if options.total_exact and cap is None:
        raise SpecError("--total-exact needs --total")
    top = bandwidth(options.maximum, "--max") if options.maximum else (cap or 4 * float(now.sum()))
    lower, upper = np.full(n, bandwidth(options.minimum, "--min")), np.full(n, top)
    for text in options.fix:
        ref, sep, value = text.partition("=")
        if not sep:
            raise SpecError(f"--fix {text!r}: DIMENSION=BANDWIDTH, e.g. ring=500GB/s")
        i = dimension(ref, system, "--fix")
        lower[i] = upper[i] = bandwidth(value, "--fix")
    sums = []
    for text in options.sums:
        m = _SUM.match(text.strip())
        if m is None:
            raise SpecError(f"--sum {text!r}: DIM+DIM<=BANDWIDTH or DIM+DIM=BANDWIDTH, e.g. 2+3=200GB/s")
        dims = tuple(dimension(r, system, "--sum") for r in m["dims"].split("+"))
        if len(set(dims)) != len(dims):
            raise SpecError(f"--sum {text!r}: each dimension once")
        sums.append(DimensionSum(dims, bandwidth(m["bw"], "--sum"), m["op"] == "="))
    order = []
    for text in options.order:
        first, sep, second = text.partition(">=")
        if not sep:
            raise SpecError(f"--order {text!r}: DIM>=DIM, e.g. ring>=switch")
        i, j = dimension(first, system, "--order"), dimension(second, system, "--order")
        if i == j:
            raise SpecError(f"--order {text!r}: two different dimensions")
        order.append((i, j))
    if np.any(upper < lower):
        raise SpecError("--fix / --min / --max: a dimension's bandwidth is above --max or below --min "
                        f"(--min {lower.min() / 1e9:g} GB/s, --max {top / 1e9:g} GB/s)")
    return BandwidthConstraints(lower, upper, cap, options.ordered, per_dimension(options.cost, n, "--cost"),
                                options.budget, per_dimension(options.power, n, "--power"), None, tuple(sums),
                                tuple(order), options.total_exact)
