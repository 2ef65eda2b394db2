"""The raw measurements of a compute calibration as a CSV dataset beside the device file, and the round
trip: every measured kernel predicted back with a device."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

from armillary.calibrate.compute_bench import Measurement
from armillary.calibrate.compute_kernels import Kernel, KernelKind
from armillary.errors import SpecError
from armillary.specs.device import Device, Precision
from armillary.writing import replaced

_COLUMNS = ("kind", "precision", "m", "n", "k", "batch", "label", "held_out", "flop", "time_s")


def measurements_path(device_file: Path) -> Path:
    """Where the raw measurements of a fitted device file live: beside it, `<stem>.kernels.csv`."""
    return device_file.with_name(device_file.stem + ".kernels.csv")


def write_measurements(measured: Sequence[Measurement], path: Path, header: str) -> None:
    """`header`: the machine, software and date, written as a leading `#` comment line."""
    with replaced(path) as temporary, temporary.open("w", newline="") as f:
        f.write(f"# {header}\n")
        w = csv.writer(f)
        w.writerow(_COLUMNS)
        for m in measured:
            k = m.kernel
            w.writerow((k.kind.value, k.precision.value, k.m, k.n, k.k, k.batch, k.label, int(k.held_out),
                        f"{k.flop:.6g}", f"{m.time_s:.6e}"))


def read_measurements(path: Path) -> tuple[Measurement, ...]:
    if not path.is_file():
        raise SpecError(f"{path} does not exist (the measurements `calibrate-compute` writes beside the device)")
    with path.open() as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    try:
        return tuple(Measurement(Kernel(KernelKind(r["kind"]), Precision(r["precision"]), int(r["m"]), int(r["n"]),
                                        int(r["k"]), int(r["batch"]), r["label"], r["held_out"] == "1"),
                                 float(r["time_s"])) for r in rows)
    except (KeyError, ValueError) as e:
        raise SpecError(f"{path}: not a kernel measurement CSV (columns {', '.join(_COLUMNS)}): {e}") from None


class Group(StrEnum):
    GEMM = "GEMMs (fitted)"
    HELD_OUT = "GEMMs (held out)"
    ATTENTION = "attention (standard)"
    FUSED = "attention (fused)"
    STREAMS = "memory-bound"
    LAUNCH = "launch"


@dataclass(frozen=True)
class RoundTrip:
    kernel: Kernel
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        """Signed relative error of the prediction."""
        return self.predicted_s / self.measured_s - 1

    @property
    def group(self) -> Group:
        kind = self.kernel.kind
        if kind is KernelKind.GEMM:
            return Group.HELD_OUT if self.kernel.held_out else Group.GEMM
        return {KernelKind.ATTENTION: Group.ATTENTION, KernelKind.FUSED_ATTENTION: Group.FUSED,
                KernelKind.LAUNCH: Group.LAUNCH}.get(kind, Group.STREAMS)


@dataclass(frozen=True)
class GroupError:
    group: Group
    kernels: int
    mean_abs: float  # mean |relative error|
    max_abs: float
    total: float  # relative error of the summed times (what a step made of these kernels sees)


def round_trip(measured: Sequence[Measurement], device: Device) -> tuple[RoundTrip, ...]:
    return tuple(RoundTrip(m.kernel, m.time_s, m.kernel.predict(device)) for m in measured)


def group_errors(rows: Sequence[RoundTrip]) -> tuple[GroupError, ...]:
    out = []
    for g in Group:
        sel = [r for r in rows if r.group is g]
        if sel:
            errors = np.abs([r.error for r in sel])
            total = sum(r.predicted_s for r in sel) / sum(r.measured_s for r in sel) - 1
            out.append(GroupError(g, len(sel), float(errors.mean()), float(errors.max()), float(total)))
    return tuple(out)
