"""The collective rows' residuals the error bands are drawn from (`collective_bands`): the shipped residuals
(validation/data/collective_residuals.json, written by tools/calibrate_fabric.py --residuals), the latency regime
each falls in, their first untouched run (validation/data/out_of_sample.csv), and each row's out-of-fit residual:
the error of a model not fitted on its own sweep (`out_of_fit_residuals`, from the fits the presets were made by,
`CALIBRATIONS`, and the refits in validation/data/collective_refits.json, written by tools/error_bands.py
--refit)."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path

from armillary.comm.fabrics import fabric, nccl_network_hops
from armillary.specs.communication import Collective
from armillary.writing import replaced

COLLECTIVE_RESIDUALS = Path(str(resources.files("armillary.validation") / "data" / "collective_residuals.json"))

# The latency regimes, by the modelled latency share of the time. Under a tenth, a latency off by half moves the
# time by under 5%: the fabric's efficiency decides it (bandwidth-bound). From a half, latency is most of it
# (latency-bound). Between, NCCL's protocol crossovers (LL -> LL128 -> Simple) and tree / ring switches lie
# (crossover). Set from these meanings, not fitted: 0.05 for the lower bound gives an all-row ratio of median band
# to median |error| of 4.88, 0.3 or 0.7 for the upper 5.77 or 5.55, 0.1 and 0.5 5.41 (docs/collectives.md)
BANDWIDTH_BOUND_BELOW = 0.1
LATENCY_BOUND_FROM = 0.5
BANDWIDTH_BOUND, CROSSOVER, LATENCY_BOUND = "bandwidth-bound", "crossover", "latency-bound"
REGIMES = (BANDWIDTH_BOUND, CROSSOVER, LATENCY_BOUND)


def latency_regime(share: float) -> str:
    """The latency regime of a collective whose modelled time is `share` latency."""
    return BANDWIDTH_BOUND if share < BANDWIDTH_BOUND_BELOW else CROSSOVER if share < LATENCY_BOUND_FROM \
        else LATENCY_BOUND


# NCCL runs an all-to-all as grouped send / receive to every peer (src/enqueue.cc), not as a ring or tree: its
# error comes from incast and PXN's relay (comm/fabrics.all_to_all_slowdown, fitted on one or two sweeps), not
# from the ring's efficiency and latencies, so its band is its own (of 11 scale-out all-to-all rows, OCI's GB300
# pair is +292%, which had made the band of every bandwidth-bound NVL72 collective +-292%)
ALL_TO_ALL = "all-to-all"
_POINT_TO_POINT = (Collective.ALL_TO_ALL.value, Collective.SEND_RECV.value)


def regime_of(share: float, op: str | None) -> str:
    """The regime of a collective `op` (a `Collective` value; None: a ring / tree collective) whose modelled
    time is `share` latency: its latency regime, and whether it is an all-to-all (or send / receive)."""
    latency = latency_regime(share)
    return f"{latency}, {ALL_TO_ALL}" if op in _POINT_TO_POINT else latency


@dataclass(frozen=True)
class CollectiveResidual:
    id: str
    source: str  # the measured sweep: the row id without its running number
    fabric_class: str
    small: bool  # below SMALL_MESSAGE_BYTES (1 MiB)
    error: float  # predicted / measured - 1
    gpus: int = 0  # the ranks of the row's collective (0: not recorded)
    latency_share: float | None = None  # of the modelled time (`collective_rows.latency_share`; None: not recorded)
    op: str | None = None  # the `Collective` value

    @property
    def regime(self) -> str | None:
        return None if self.latency_share is None else regime_of(self.latency_share, self.op)


def write_collective_residuals(residuals: Sequence[CollectiveResidual], path: Path = COLLECTIVE_RESIDUALS) -> None:
    with replaced(path) as temporary:
        temporary.write_text("[\n" + ",\n".join(json.dumps(asdict(r)) for r in residuals) + "\n]\n")


@functools.cache
def shipped_collective_residuals() -> tuple[CollectiveResidual, ...]:
    return tuple(CollectiveResidual(**r) for r in json.loads(COLLECTIVE_RESIDUALS.read_text()))


@functools.cache
def first_run_residuals() -> tuple[CollectiveResidual, ...]:
    """The collective rows' first untouched run (validation/data/out_of_sample.csv): each on a fabric the model
    had not been calibrated on then (fabrics.yaml's fits came after), as residuals with its first-run error and
    its class, sweep, size, scale, op and latency share as the shipped residuals record them (rows the harness
    no longer runs are left out)."""
    from armillary.validation.out_of_sample import read_out_of_sample  # it reads the bands: imported on use

    now = {r.id: r for r in shipped_collective_residuals()}
    return tuple(replace(now[r.id], error=r.error) for r in read_out_of_sample()
                 if r.kind == "collective" and r.error is not None and r.id in now)


# --- out of fit: every row's residual from a model not fitted on its own sweep ----------------------------------


@dataclass(frozen=True)
class Calibration:
    """One fit of the shipped presets on measured sweeps (issue 43: bands from "leave-one-source-out for
    everything fitted by a tool"): what it fitted, on which sweeps (`sweep_of` ids), the fabric whose fields
    (`fields`) it set, and how a model without one of its sweeps is had (tools/error_bands.py --refit):
    "fabric" (tools/calibrate_fabric.py --fabric: efficiency and latency by least absolute log error, each sweep
    weighing the same), "incast" (--incast) and "channel" (--channel-rate) are redone on the other sweeps, or
    reset to the uncalibrated values (`uncalibrated_fields`, no incast) where it was fitted on one sweep; "tier"
    (fit_tier and the fits chained on it: one sweep each) is reset; "domain" (--nvlink-domain, one sweep) is
    reset to NCCL's tuning.cc NVLink hop latencies; None: a fit inside a node, which a row's trial fields do not
    reach (its sweep is left out of the bands where no first run is recorded)."""

    what: str
    sweeps: tuple[str, ...]
    refit: str | None = None
    fabric: str | None = None
    fields: tuple[str, ...] = ()

    @property
    def refittable(self) -> bool:
        """Whether the fit can be redone without one of its sweeps (on the others)."""
        return self.refit in ("fabric", "incast", "channel") and len(self.sweeps) > 1


# A scale-out tier no sweep calibrated: NCCL tuning.cc's network latency of the Simple ring, 14 us
# (docs/formulas.md section 1.3), and efficiency 0.9, no fitted tree efficiency, size curve or channel rate: what
# the presets give every fabric no sweep fitted (presets/systems/dgx-a100.yaml, fabrics.yaml omni-path). A fabric
# whose net plugin reports a latency to NCCL (EFA) takes NCCL's hops with it instead (`uncalibrated_fields`)
UNCALIBRATED_TIER: dict[str, object] = {"latency": 14e-6, "efficiency": 0.9, "tree_efficiency": None,
                                        "size_efficiency": None, "tree_size_efficiency": None,
                                        "channel_bandwidth": None}


def uncalibrated_fields(c: Calibration) -> dict[str, object]:
    """The fields fit `c` set, as its fabric is without it: `UNCALIBRATED_TIER`'s values, and where the fabric's
    net plugin reports a latency to NCCL (fabrics.yaml net_plugin_latency: aws-ofi-nccl on EFA) the per-step
    latencies NCCL's own tuner gives it (`comm.fabrics.nccl_network_hops`: LL / LL128 / Simple) instead of the
    14 us of a fabric whose transport reports none."""
    out = {f: UNCALIBRATED_TIER[f] for f in c.fields}
    plugin = fabric(c.fabric).net_plugin_latency if c.fabric is not None else None
    if plugin is not None and "latency" in c.fields:
        out.update(nccl_network_hops(plugin))
    return out

# What the shipped presets were fitted on, as their sources say (presets/network/fabrics.yaml `sources`,
# presets/systems/*.yaml `calibration` notes; tests/test_collective_out_of_fit.py checks every sweep named
# there is here and every sweep here is named there)
CALIBRATIONS = (
    Calibration("dgx-h100 InfiniBand NDR latency, tree efficiency and tree size curve (fit_tier)",
                ("CO-H100-IBNDR-2N-AR-qoofyk",), "tier", "infiniband-ndr",
                ("latency", "tree_efficiency", "tree_size_efficiency")),
    Calibration("dgx-h100 InfiniBand NDR ring efficiency and size curve (fit_ring_after_tree)",
                ("CO-H100-IBNDR-2N-AR-gj-ring",), "tier", "infiniband-ndr", ("efficiency", "size_efficiency")),
    Calibration("dgx-h100 InfiniBand NDR channel rate (fit_channel_bandwidth)",
                ("CO-H100-IBNDR-4N-AR-gj", "CO-H100-IBNDR-8N-AR-gj"), "channel", "infiniband-ndr",
                ("channel_bandwidth",)),
    Calibration("roce-oci all_to_all_incast", ("CO-GB200-OCI-32N-A2A",), "incast", "roce-oci"),
    Calibration("gcp-a3-mega GPUDirect-TCPXO tier (fit_tier)", ("CO-H100-GCPA3M-2N-AR",), "tier", "gcp-tcpxo",
                ("latency", "tree_efficiency", "size_efficiency")),
    Calibration("gcp-a4 RDMA tier (fit_tier)", ("CO-B200-GCPA4-2N-AG",), "tier", "gcp-rdma",
                ("latency", "efficiency", "size_efficiency")),
    Calibration("roce-oci latency and efficiency",
                ("CO-B300-OCI-2N-AR", "CO-B300-OCI-2N-A2A", "CO-MI300X-OCI-2N-AR", "CO-MI300X-OCIOKE-2N-AR",
                 "CO-A100-OCIOKE-2N-AR", "CO-H100-RoCE-128N-AR", "CO-GB200-OCIOKE-32N-AR", "CO-GB300-OCI-32N-AR",
                 "CO-GB300-OCI-32N-A2A"), "fabric", "roce-oci", ("efficiency", "latency")),
    Calibration("aws-p4d EFA v1 efficiency", ("CO-A100-AWSEFA-2N-AR", "CO-A100-AWSEFA-3N-AR", "CO-A100-AWSEFA-4N-AR"),
                "fabric", "efa-v1", ("efficiency",)),
    Calibration("efa-v4 latency and efficiency", ("CO-B200-4N",), "fabric", "efa-v4", ("efficiency", "latency")),
    Calibration("pollara efficiency", ("CO-MI355X-Pollara-OCI-2N-AR", "CO-MI355X-Pollara-OCI-2N-A2A",
                                       "CO-MI355X-Pollara-OCI-4N-AR", "CO-MI355X-Pollara-OCI-4N-A2A"),
                "fabric", "pollara", ("efficiency",)),
    Calibration("pollara all_to_all_incast", ("CO-MI355X-Pollara-OCI-2N-A2A", "CO-MI355X-Pollara-OCI-4N-A2A"),
                "incast", "pollara"),
    Calibration("nvl72 NVLink hops across racks", ("CO-GB200-OCIOKE-32N-AR",), "domain"),
    Calibration("hgx-h200 / dgx-h100 NVLink tier (calibrate-network)", ("CO-H200x8-NCCLTESTS",)),
    Calibration("dgx-b200 NVLink tier (calibrate-network)", ("CO-B200-1N",)),
)
COLLECTIVE_REFITS = COLLECTIVE_RESIDUALS.with_name("collective_refits.json")


@dataclass(frozen=True)
class OutOfFit:
    """A collective row's residual from a model not fitted on its sweep (None: none is known, the row is left
    out of the bands, counted and named), and why that one."""

    id: str
    residual: CollectiveResidual | None
    reason: str


def calibrations_of(sweep: str, calibrations: Sequence[Calibration] = CALIBRATIONS) -> list[Calibration]:
    return [c for c in calibrations if sweep in c.sweeps]


def out_of_fit_residuals(residuals: Sequence[CollectiveResidual], first_run: Sequence[CollectiveResidual],
                         refits: dict[str, dict[str, object]], calibrations: Sequence[Calibration] = CALIBRATIONS
                         ) -> tuple[OutOfFit, ...]:
    """Per residual, the one a model not fitted on its sweep gives: a sweep no preset was fitted on keeps its
    residual; one whose every fit can be redone on other sweeps (`Calibration.refittable`) takes the refit's
    (`refits`: row id -> {"error", "how": "refit"}, tools/error_bands.py --refit); else the model as it is now
    with the fits it alone set reset to uncalibrated (`refits` how "uncalibrated": today's mechanisms, none of
    its fitted values); else its first untouched run (`first_run`: an older model, before any fabric was
    calibrated on it); else it is left out (a fit inside a node, never run before)."""
    first = {r.id: r for r in first_run}
    out = []
    for r in residuals:
        fits = calibrations_of(r.source, calibrations)
        names = "; ".join(c.what for c in fits)
        stored = refits.get(r.id, {})
        if not fits:
            out.append(OutOfFit(r.id, r, "no preset fitted on its sweep"))
        elif all(c.refittable for c in fits) and stored.get("how") == "refit":
            out.append(OutOfFit(r.id, replace(r, error=float(stored["error"])),  # type: ignore[arg-type]
                                f"refit without its sweep: {names}"))
        elif stored.get("how") == "uncalibrated":
            out.append(OutOfFit(r.id, replace(r, error=float(stored["error"])),  # type: ignore[arg-type]
                                f"uncalibrated where fitted on its sweep alone, refit elsewhere: {names}"))
        elif r.id in first:
            out.append(OutOfFit(r.id, replace(r, error=first[r.id].error),
                                f"first run before calibration (out_of_sample.csv): {names}"))
        else:
            out.append(OutOfFit(r.id, None, f"left out: {names} fitted on its sweep, no first run recorded"))
    return tuple(out)


def read_refits(path: Path = COLLECTIVE_REFITS) -> dict[str, dict[str, object]]:
    """Row id -> the row's error with the fits it entered redone without its sweep ("how": "refit") or, where
    one of them was fitted on it alone, reset to uncalibrated ("uncalibrated"), and the values used
    (tools/error_bands.py --refit writes it; {} where not written)."""
    if not path.is_file():
        return {}
    return {str(k): dict(v) for k, v in json.loads(path.read_text()).items()}


@functools.cache
def band_residuals() -> tuple[CollectiveResidual, ...]:
    """The residuals the collective bands are drawn from: each shipped row's out-of-fit residual
    (`out_of_fit_residuals`), rows without one left out."""
    found = out_of_fit_residuals(shipped_collective_residuals(), first_run_residuals(), read_refits())
    return tuple(o.residual for o in found if o.residual is not None)
