"""Tables of the mixing runtime and of the model's communication libraries: the tuning table a sweep
wrote, and which library each call of a step uses."""

from __future__ import annotations

from rich.table import Table

from armillary.estimate.result import CommCall
from armillary.report.formatting import binary_size
from armillary.runtime.table import TuningTable


def tuning_table(table: TuningTable) -> Table:
    """Per (op, dtype, bucket, ranks): every backend's time, the choice and its margin."""
    machine = table.machine
    title = "tuning table" + (f" ({machine.host}, {machine.processor}, {machine.cores} cores, torch {machine.torch})"
                              if machine is not None else "")
    names = sorted({b for e in table.entries for b in e.times_s})
    out = Table(title=title)
    for column in ("op", "dtype", "bytes <=", "ranks", *(f"{n} (us)" for n in names), "fastest", "margin"):
        out.add_column(column, justify="left" if column in ("op", "dtype", "fastest") else "right")
    for e in table.entries:
        out.add_row(e.op.value, e.dtype, f"{2 ** e.bucket:,}", str(e.group_size),
                    *(f"{e.times_s[n] * 1e6:,.1f}" if n in e.times_s else "-" for n in names),
                    e.backend, f"{e.margin:.0%}")
    return out


def library_choice(calls: tuple[CommCall, ...], singles: dict[str, tuple[CommCall, ...]]) -> list[Table | str]:
    """Which library each call of a step uses (the one whose own run of the step is as fast as the mixed
    one for that call), and what mixing gains over the best single library."""
    out = Table(title="Communication libraries: each call's fastest")
    for column in ("dim", "operation", "message", "library", *(f"{n} (us)" for n in singles)):
        out.add_column(column, justify="left" if column in ("dim", "operation", "library") else "right")
    names = list(singles)
    for i, call in enumerate(calls):
        times = [float(singles[n][i].time_each_s) for n in names]
        best = names[min(range(len(names)), key=times.__getitem__)]
        out.add_row(call.dimension.value, call.operation.value, binary_size(float(call.message_bytes)), best,
                    *(f"{t * 1e6:,.1f}" for t in times))
    mixed = sum(float(c.time_s) for c in calls)
    totals = {n: sum(float(c.time_s) for c in singles[n]) for n in names}
    single = min(totals, key=totals.__getitem__)
    gain = totals[single] / mixed - 1 if mixed > 0 else 0.0
    return [out, f"communication per step (before overlap): mixed {mixed * 1e3:,.3f} ms; "
            + ", ".join(f"{n} alone {t * 1e3:,.3f} ms" for n, t in totals.items())
            + f"; mixing gains {gain:.1%} over the best single library ({single})"]
