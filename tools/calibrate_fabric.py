"""Fit the outermost network dimension a measured nccl-tests sweep crosses (its latency, large-message
efficiency and size-efficiency ramp: `comm.calibration.fit_tier`) to the collective rows of the validation
CSV with one id prefix, and print the fitted fields to paste into the system preset: one calibrated
description per system, fitted on one sweep, then checked on every other row of that fabric.

Run: python tools/calibrate_fabric.py SYSTEM ROW-PREFIX [--then ROW-PREFIX] [--csv PATH]
     python tools/calibrate_fabric.py --fabric NAME ROW-PREFIX [ROW-PREFIX ...] [--csv PATH]
     python tools/calibrate_fabric.py --nvlink-domain ROW-PREFIX [ROW-PREFIX ...] [--csv PATH]
     python tools/calibrate_fabric.py --residuals [--csv PATH]
     python tools/calibrate_fabric.py --incast NAME ROW-PREFIX [ROW-PREFIX ...] [--csv PATH]
  --incast one fabric's all-to-all incast (fabrics.yaml all_to_all_incast; comm/fabrics.all_to_all_slowdown: the
           scale-out phase's transfer time times 1 + incast x (remote hosts - 1)) fitted on the listed
           all-to-all sweeps on that fabric, each sweep weighing the same (least absolute log error), the
           fabric's efficiency kept; prints the incast and each sweep's mean |error| with and without it
  --nvlink-domain ROW-PREFIX [...]  the NVLink hops of a ring across rack-scale NVLink domains (NVL72 racks):
           LL and LL128 per-hop latency and LL128's bus-bandwidth ceiling, fitted on sweeps across racks
  --residuals  run every collective row, write validation/data/collective_residuals.json (the error bands of
           `armillary collective`, by fabric class and latency regime: each row's modelled latency share) and
           print per class and regime the mean / median |error| and band, the bands' coverage when each sweep is
           left out (all 134 InfiniBand rows come from one issue thread, so a publication is too coarse a unit
           to leave out) and the median band over the median |error|
  --fabric one fabric preset (presets/network/fabrics.yaml) fitted on every listed sweep at once, each row read
           by the harness (validation/collective_rows.py: its system, NICs and NVLink domain): the
           large-message efficiency on the rows of 1 MiB and above, the per-step latency on the rows below
           (least absolute log error, alternated: the mean |error| the acceptance reads, and one odd sweep
           cannot drag it), for each of the algorithm sets the library could run
           across nodes there (ring only, or ring and the pipelined tree); prints the fields and the mean
           |error| per sweep of each, so the choice is recorded with its evidence
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
(the CSV notes say so for these sweeps). Times are read as given (us) or from busbw through the bus factor, each
size as the faster of nccl-tests' out-of-place and in-place runs where the row states both (`best_of_runs`, the
harness's reading).

What the shipped presets were calibrated on (README, "Cloud fabrics and calibrated scale-out"):
  dgx-h100 (InfiniBand NDR):     CO-H100-IBNDR-2N-AR-qoofyk --then CO-H100-IBNDR-2N-AR-gj-ring
                                 --channel-rate CO-H100-IBNDR-4N-AR-gj CO-H100-IBNDR-8N-AR-gj
  gcp-a3-mega (GPUDirect-TCPXO): CO-H100-GCPA3M-2N-AR
  gcp-a4 (RoCE, gIB plugin):     CO-B200-GCPA4-2N-AG
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import yaml

import armillary.comm.fabrics as fabrics_module
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
from armillary.comm.fabrics import fabric_dimension
from armillary.comm.sweep import bus_factor
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.units import MIB
from armillary.validation.collective_bands import (
    band_to_error_ratio,
    leave_one_source_out_coverage,
    regime_band,
)
from armillary.validation.collective_reading import best_of_runs, channel_settings, pinned_algorithm, read_op
from armillary.validation.collective_residuals import (
    REGIMES,
    CollectiveResidual,
    write_collective_residuals,
)
from armillary.validation.collective_rows import predict_collective, row_latency_share
from armillary.validation.collective_system import fabric_class, read_system
from armillary.validation.flagged_sweeps import monotone_rows, sweep_of
from armillary.validation.run import DEFAULT_CSV, read_rows, run_row

_SHIPPED_INCAST = fabrics_module._incast_by_dimension


def rows_of(csv: Path, prefix: str) -> list[dict[str, str]]:
    rows = [r for r in read_rows(csv) if r["id"].startswith(prefix + "-")]
    if not rows:
        raise SystemExit(f"no rows start with {prefix!r}")
    return rows


def sweep(rows: list[dict[str, str]]) -> tuple[Collective, int, list[Measurement]]:
    """The collective, its ranks and its (size, time) points, smallest size left out. Each size is read as the
    harness reads it (`best_of_runs`): the faster of nccl-tests' out-of-place and in-place runs where the row
    states both, so the fit and the validation compare against the same figure."""
    op = Collective(re.split(r"[\s(]", rows[0]["op"].strip().lower(), maxsplit=1)[0])
    gpus = int(rows[0]["n_gpus"])
    points = []
    for r in rows:
        size, metric = float(r["msg_bytes"]), r["metric"].lower()
        value, _ = best_of_runs(r, float(r["value"]))
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


def _fabric_errors(rows: list[dict[str, str]], trial: dict[str, object]) -> list[float]:
    """log(predicted / measured) of each row with the fabric's dimension fields `trial`."""
    out = []
    for row in rows:
        measured, _ = best_of_runs(row, float(row["value"]))
        _, predicted, _ = predict_collective(row, trial)
        out.append(float(np.log(predicted / measured)))
    return out


def write_residuals(csv: Path) -> None:
    """Every collective row that runs, as a residual of its fabric class with its modelled latency share; per
    class and latency regime the rows, mean and median |error| and band; the bands' coverage when each sweep is
    left out, per class and per regime; and the median band over the median |error| (issue 43 asks < 3x)."""
    residuals = []
    for row in read_rows(csv):
        if row.get("kind") != "collective":
            continue
        result = run_row(row)
        if result.error is None:
            continue
        residuals.append(CollectiveResidual(row["id"], sweep_of(row["id"]), fabric_class(read_system(row)),
                                            float(row["msg_bytes"]) < MIB, round(result.error, 6),
                                            int(row["n_gpus"]), round(row_latency_share(row), 4),
                                            read_op(row["op"]).value))
    write_collective_residuals(residuals)
    for by in ("fabric_class", "regime"):
        coverage = leave_one_source_out_coverage(residuals, by)
        ratios = band_to_error_ratio(residuals, by)
        for name in sorted(coverage):
            if by == "fabric_class":
                for regime in sorted({str(r.regime) for r in residuals}, key=_regime_order):
                    mine = [abs(r.error) for r in residuals if r.fabric_class == name and r.regime == regime]
                    if mine:
                        band = regime_band(name, regime, residuals)
                        print(f"{name:20s} {regime:28s} {len(mine):4d} rows, |error| mean {100 * np.mean(mine):6.1f}%"
                              f" median {100 * np.median(mine):5.1f}%, band +-{100 * band.relative:.1f}%")
            hit, total = coverage[name]
            print(f"{name:28s} leave-one-sweep-out coverage {hit}/{total} = {hit / total:.0%}, median band / median "
                  f"|error| {ratios[name]:.2f}")
    print(f"all rows: median band / median |error| {band_to_error_ratio(residuals)['all']:.2f}")


def _regime_order(regime: str) -> tuple[int, str]:
    return REGIMES.index(regime.split(",")[0]), regime


monotone = monotone_rows


def _loss(rows: list[dict[str, str]], trial: dict[str, object], field: str, value: float) -> float:
    """|log error| of `rows` with `field` of the fabric's dimension at `value`, averaged per sweep and summed
    over the sweeps: each measured sweep weighs the same, however many sizes it printed."""
    errors = _fabric_errors(rows, {**trial, field: value})
    sweeps: dict[str, list[float]] = {}
    for row, x in zip(rows, errors, strict=True):
        sweeps.setdefault(re.sub(r"-\d+$", "", row["id"]), []).append(abs(x))
    return sum(float(np.mean(v)) for v in sweeps.values())


def _golden(f: Callable[[float], float], lo: float, hi: float, iterations: int = 40) -> float:
    """Minimum of f on [lo, hi] in log space (golden section)."""
    a, b = np.log(lo), np.log(hi)
    g = (np.sqrt(5) - 1) / 2
    for _ in range(iterations):
        c, d = b - g * (b - a), a + g * (b - a)
        if f(float(np.exp(c))) < f(float(np.exp(d))):
            b = d
        else:
            a = c
    return float(np.exp((a + b) / 2))


def fit_fabric(name: str, prefixes: list[str], csv: Path) -> None:
    """Efficiency (rows >= 1 MiB) and latency (rows < 1 MiB) of fabric `name` on the listed sweeps, for each
    algorithm set; busbw and time rows alike (a time row is compared as a time, `predict_collective`)."""
    rows = [r for p in prefixes for r in monotone(rows_of(csv, p))]
    rows = [r for r in rows if read_system(r).fabric == name]
    if not rows:
        raise SystemExit(f"none of the rows of {prefixes} runs on the fabric {name!r}")
    big = [r for r in rows if float(r["msg_bytes"]) >= MIB]
    small = [r for r in rows if float(r["msg_bytes"]) < MIB]
    own = fabric_dimension(name)
    for algorithms in ((Algorithm.RING,), tuple(a for a in own.algorithms if a is not Algorithm.IN_NETWORK)):
        trial: dict[str, object] = {"algorithms": algorithms, "latency": own.latency}
        for _ in range(3 if small else 1):
            if big:
                trial["efficiency"] = _golden(partial(_loss, big, trial, "efficiency"), 0.05, 1.0)
            if small:
                trial["latency"] = _golden(partial(_loss, rows, trial, "latency"), 1e-7, 1e-2)
        efficiency, latency = trial.get("efficiency", own.efficiency), float(trial["latency"]) * 1e6  # type: ignore[arg-type]
        print(f"# fabric {name}, algorithms across nodes {[a.value for a in algorithms]}: "
              f"efficiency {efficiency:.4f}, latency {latency:.3g} us")
        for p in prefixes:
            for label, part in (("  >=1MiB", big), ("  <1MiB", small)):
                mine = [r for r in part if r["id"].startswith(p + "-")]
                if mine:
                    errors = np.abs(np.expm1(_fabric_errors(mine, trial)))
                    print(f"{label} {p}: {len(mine)} rows, mean |error| {100 * errors.mean():.1f}%")


def _domain_loss(rows: list[dict[str, str]], fields: dict[str, dict[str, float]], key: tuple[str, str],
                 value: float) -> float:
    """Mean |log error| of `rows` with the NVLink-domain field `key` = (field, protocol) at `value`."""
    trial = {name: dict(values) for name, values in fields.items()}
    trial[key[0]][key[1]] = value
    errors = []
    for row in rows:
        measured, _ = best_of_runs(row, float(row["value"]))
        _, predicted, _ = predict_collective(row, domain=trial)
        errors.append(abs(float(np.log(predicted / measured))))
    return float(np.mean(errors))


def fit_nvlink_domain(prefixes: list[str], csv: Path) -> None:
    """The NVLink hops of a ring across rack-scale domains (presets/network/fabrics.yaml nvlink_domains): LL and
    LL128 per-hop latency and LL128's bus-bandwidth ceiling, alternated (least absolute log error over the
    rows of the listed sweeps that no larger size beats: `monotone`)."""
    rows = [r for p in prefixes for r in monotone(rows_of(csv, p))]
    fields: dict[str, dict[str, float]] = {"protocol_latency": {"LL": 0.6e-6, "LL128": 1.9e-6},
                                           "ring_busbw": {"LL128": 1e12}}
    bounds = {("protocol_latency", "LL"): (0.1e-6, 3.4e-6), ("protocol_latency", "LL128"): (0.1e-6, 3.4e-6),
              ("ring_busbw", "LL128"): (50e9, 1e12)}
    for _ in range(3):
        for key, (lo, hi) in bounds.items():
            fields[key[0]][key[1]] = _golden(partial(_domain_loss, rows, fields, key), lo, hi, 30)
    print(f"# NVLink domain across racks, fitted on {len(rows)} rows of {', '.join(prefixes)}")
    print(f"ring_protocol_latency: {{LL: {fields['protocol_latency']['LL'] * 1e6:.3g} us, "
          f"LL128: {fields['protocol_latency']['LL128'] * 1e6:.3g} us}}")
    print(f"ring_busbw: {{LL128: {fields['ring_busbw']['LL128'] / 1e9:.3g} GB/s}}")
    for p in prefixes:
        for label, small in (("  >=1MiB", False), ("  <1MiB", True)):
            mine = [r for r in rows_of(csv, p) if (float(r["msg_bytes"]) < MIB) == small]
            if mine:
                errors = [abs(predict_collective(r, domain=fields)[1] / best_of_runs(r, float(r["value"]))[0] - 1)
                          for r in mine]
                print(f"{label} {p}: {len(mine)} rows, mean |error| {100 * np.mean(errors):.1f}%")


def _incast_loss(rows: list[dict[str, str]], dimension: str, value: float) -> float:
    """`_loss` of all-to-all rows with the incast of the fabric whose dimension is called `dimension` at
    `value` (the shipped table with that one entry replaced)."""
    shipped = _SHIPPED_INCAST()
    fabrics_module._incast_by_dimension = lambda: {**shipped, dimension: value}  # type: ignore[assignment]
    try:
        return _loss(rows, {}, "efficiency", float(fabric_dimension(rows[0]["_fabric"]).efficiency))
    finally:
        fabrics_module._incast_by_dimension = _SHIPPED_INCAST


def fit_incast(name: str, prefixes: list[str], csv: Path) -> None:
    """All-to-all incast of fabric `name` on the listed all-to-all sweeps (rows of 1 MiB and above)."""
    rows = [r for p in prefixes for r in rows_of(csv, p)
            if read_op(r["op"]) is Collective.ALL_TO_ALL and float(r["msg_bytes"]) >= MIB]
    rows = [{**r, "_fabric": name} for r in rows if read_system(r).fabric == name]
    if not rows:
        raise SystemExit(f"none of the all-to-all rows of {prefixes} runs on the fabric {name!r}")
    dimension = fabric_dimension(name).name
    incast = _golden(partial(_incast_loss, rows, dimension), 1e-4, 1.0)
    if _incast_loss(rows, dimension, 0.0) <= _incast_loss(rows, dimension, incast):
        incast = 0.0
    print(f"# fabric {name}: all_to_all_incast {incast:.4g}")
    for p in prefixes:
        mine = [r for r in rows if r["id"].startswith(p + "-")]
        for value in (0.0, incast) if mine else ():
            fabrics_module._incast_by_dimension = lambda v=value: {**_SHIPPED_INCAST(), dimension: v}  # type: ignore[misc]
            try:
                errors = np.abs(np.expm1(_fabric_errors(mine, {})))
            finally:
                fabrics_module._incast_by_dimension = _SHIPPED_INCAST
            print(f"  {p}: {len(mine)} rows, incast {value:.4g}: mean |error| {100 * errors.mean():.1f}%")


def main(argv: list[str]) -> None:
    if len(argv) < (1 if argv[:1] == ["--residuals"] else 2):
        raise SystemExit(__doc__)
    if argv[0] == "--residuals":
        write_residuals(Path(argv[argv.index("--csv") + 1]) if "--csv" in argv else DEFAULT_CSV)
        return
    if argv[0] == "--nvlink-domain":
        csv = Path(argv[argv.index("--csv") + 1]) if "--csv" in argv else DEFAULT_CSV
        fit_nvlink_domain([a for a in argv[1:] if not a.startswith("--") and a != str(csv)], csv)
        return
    if argv[0] == "--incast":
        csv = Path(argv[argv.index("--csv") + 1]) if "--csv" in argv else DEFAULT_CSV
        fit_incast(argv[1], [a for a in argv[2:] if not a.startswith("--") and a != str(csv)], csv)
        return
    if argv[0] == "--fabric":
        csv = Path(argv[argv.index("--csv") + 1]) if "--csv" in argv else DEFAULT_CSV
        names = [a for a in argv[2:] if not a.startswith("--") and a != str(csv)]
        fit_fabric(argv[1], names, csv)
        return
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
