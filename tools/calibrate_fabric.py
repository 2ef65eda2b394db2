"""Fit the outermost network dimension a measured nccl-tests sweep crosses (its latency, large-message
efficiency and size-efficiency ramp: `comm.calibration.fit_tier`) to the collective rows of the validation
CSV with one id prefix, and print the fitted fields to paste into the system preset: one calibrated
description per system, fitted on one sweep, then checked on every other row of that fabric.

Run: python tools/calibrate_fabric.py SYSTEM ROW-PREFIX [--then ROW-PREFIX] [--csv PATH]
  --then   a second sweep that runs another algorithm: its large-message efficiency is fitted on it
           (comm.calibration.fit_efficiency); the latency and size ramp stay those of the first sweep. Where the
           first sweep's largest message ran NCCL's tree and the second pins the ring, the first ramp becomes the
           tree's (tree_size_efficiency) and the ring's efficiency and ramp are fitted on the second
           (comm.calibration.fit_ring_after_tree)

  --channel-rate  one or more sweeps run with NCCL's default channel count whose plateau sits below the NICs'
           rate (e.g. the default 4- and 8-node rows): the tier's per-channel rate (channel_bandwidth) is
           fitted on their largest messages (comm.calibration.fit_channel_bandwidth), after the fits above.
           A sweep that states NCCL_MIN_NCHANNELS / NCCL_MIN_CTAS / NCCL_MAX_* runs with that many channels.

The smallest size of a sweep is left out: its out-of-place time carries NCCL's one-off start-up cost
(the CSV notes say so for these sweeps). Times are read as given (us) or from busbw through the bus factor.

What the shipped presets were calibrated on (README, "Cloud fabrics and calibrated scale-out"):
  dgx-h100 (InfiniBand NDR):     CO-H100-IBNDR-2N-AR-qoofyk --then CO-H100-IBNDR-2N-AR-gj-ring
                                 --channel-rate CO-H100-IBNDR-4N-AR-gj CO-H100-IBNDR-8N-AR-gj
  gcp-a3-mega (GPUDirect-TCPXO): CO-H100-GCPA3M-2N-AR
  gcp-a4 (RoCE, gIB plugin):     CO-B200-GCPA4-2N-AG
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

from armillary.comm.calibration import (
    Measurement,
    chosen_algorithm,
    fit_channel_bandwidth,
    fit_efficiency,
    fit_ring_after_tree,
    fit_tier,
    fitted_dimension,
)
from armillary.comm.channels import with_channels
from armillary.comm.sweep import bus_factor
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.validation.collective_rows import channel_settings, pinned_algorithm
from armillary.validation.run import DEFAULT_CSV, read_rows


def rows_of(csv: Path, prefix: str) -> list[dict[str, str]]:
    rows = [r for r in read_rows(csv) if r["id"].startswith(prefix + "-")]
    if not rows:
        raise SystemExit(f"no rows start with {prefix!r}")
    return rows


def sweep(rows: list[dict[str, str]]) -> tuple[Collective, int, list[Measurement]]:
    """The collective, its ranks and its (size, time) points, smallest size left out."""
    op = Collective(re.split(r"[\s(]", rows[0]["op"].strip().lower(), maxsplit=1)[0])
    gpus = int(rows[0]["n_gpus"])
    points = []
    for r in rows:
        size, value, metric = float(r["msg_bytes"]), float(r["value"]), r["metric"].lower()
        if metric.startswith("time"):
            time = value * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[r["unit"].strip().lower()]
        elif metric.startswith("busbw"):
            time = size * float(bus_factor(op, gpus)) / (value * 1e9)
        else:
            continue
        points.append(Measurement(size, time))
    points.sort(key=lambda m: m.size_bytes)
    return op, gpus, points[1:]


def stated_channels(system: System, rows: list[dict[str, str]]) -> System:
    """`system` with the channel count the sweep's stated NCCL settings give (comm/channels.py)."""
    return with_channels(system, channel_settings(f"{rows[0]['op']} {rows[0]['framework']}".lower()))


def default_channels(fitted: System, system: System) -> System:
    """`fitted` with `system`'s (default) channel counts back."""
    for i, dim in enumerate(system.network):
        if dim.channels != fitted.network[i].channels:
            fitted = fitted.with_dimension(i, channels=dim.channels)
    return fitted


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    system_name, prefix = argv[0], argv[1]
    csv = Path(argv[argv.index("--csv") + 1]) if "--csv" in argv else DEFAULT_CSV
    first = rows_of(csv, prefix)
    op, gpus, points = sweep(first)
    system = load_system(system_name, gpus)
    fitted = fit_tier(points, op, gpus, stated_channels(system, first),
                      pinned_algorithm(first[0]["op"].lower(), first[0]["metric"].lower()))
    fitted = default_channels(fitted, system)
    note = f"{len(points)} points of {prefix} ({op.value}, {gpus} GPUs)"
    if "--then" in argv:
        then = rows_of(csv, argv[argv.index("--then") + 1])
        op2, gpus2, points2 = sweep(then)
        algorithm = pinned_algorithm(then[0]["op"].lower(), then[0]["metric"].lower())
        stated = stated_channels(fitted, then)
        if algorithm is Algorithm.AUTO:  # what the fitted system runs for the largest message of that sweep
            algorithm = chosen_algorithm(points2, op2, gpus2, stated)
        if algorithm is Algorithm.RING and chosen_algorithm(points, op, gpus, fitted) is Algorithm.TREE:
            # the first sweep ran the tree, the second pins the ring: the first's size curve is the tree's,
            # the ring's efficiency and size curve come from its own sweep
            fitted = fit_ring_after_tree(points2, op2, gpus2, stated)
            note += f"; ring efficiency and size curve on {then[0]['id'].rsplit('-', 1)[0]} ({gpus2} GPUs)"
        else:
            fitted = fit_efficiency(points2, op2, gpus2, stated, algorithm)
            note += f"; {algorithm.value} efficiency on {then[0]['id'].rsplit('-', 1)[0]} ({gpus2} GPUs)"
        fitted = default_channels(fitted, system)
    if "--channel-rate" in argv:
        prefixes = [a for a in argv[argv.index("--channel-rate") + 1:] if not a.startswith("--")]
        prefixes = prefixes[:next((k for k, a in enumerate(prefixes) if a in ("--csv", "--then")), len(prefixes))]
        sweeps = []
        for name in prefixes:
            rows = rows_of(csv, name)
            if channel_settings(f"{rows[0]['op']} {rows[0]['framework']}".lower()).any:
                raise SystemExit(f"{name}: its NCCL settings change the channel count; fit on default-setting sweeps")
            sweeps.append(sweep(rows))
        fitted = fit_channel_bandwidth([(pts, o, g) for o, g, pts in sweeps], fitted)
        note += f"; channel rate on {', '.join(prefixes)}"
    tier = fitted_dimension(system, gpus)
    dim = fitted.network[tier]
    out: dict[str, object] = {"latency": f"{dim.latency * 1e6:.3g} us", "efficiency": round(dim.efficiency, 4)}
    if dim.tree_efficiency is not None:
        out["tree_efficiency"] = round(dim.tree_efficiency, 4)
    if dim.channel_bandwidth is not None:
        out["channels"] = dim.channels
        out["channel_bandwidth"] = f"{dim.channel_bandwidth / 1e9:.3g} GB/s"
    for field in ("size_efficiency", "tree_size_efficiency"):
        curve = getattr(dim, field)
        if curve is not None:
            out[field] = {"points": [[int(x), round(y, 4)] for x, y in curve.points]}
    print(f"# {system_name}, dimension {tier} ({dim.name}), fitted on {note}")
    print(yaml.safe_dump(out, sort_keys=False, default_flow_style=None, width=10_000), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
