"""A comparison (`estimate.compare`) and a sweep (`search.sweep`) as tables and JSON-ready data."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from armillary.estimate.compare import ComparedRow, Comparison, Section, Unit
from armillary.estimate.inference_result import InferenceEstimate
from armillary.units import GIB, GIGA

if TYPE_CHECKING:
    from armillary.search.sweep import Sweep, SweepPoint

_TITLES = {Section.SUMMARY: "Summary", Section.TIME: "Where the time goes [s]", Section.PREFILL: "Prefill [ms]",
           Section.DECODE: "Decode, all steps [ms]", Section.MEMORY: "Memory per device [GiB]",
           Section.TRAFFIC: "Traffic per device and iteration [GB]"}


def _scale(row: ComparedRow) -> tuple[float, str]:
    """Divide by this and print with this suffix: GiB for memory, GB for traffic, ms for inference passes."""
    if row.unit is Unit.BYTES:
        return (GIGA, "") if row.section is Section.TRAFFIC else (GIB, "")
    if row.unit is Unit.SECONDS and row.section in (Section.PREFILL, Section.DECODE):
        return 1e-3, ""
    if row.unit is Unit.SECONDS and row.section is Section.SUMMARY:
        return (1e-3, " ms") if max(row.values) < 1 else (1.0, " s")
    return 1.0, ""


def _value(row: ComparedRow, v: float) -> str:
    if row.name == "error_band":
        return f"+-{100 * v:.0f}%" if math.isfinite(v) else "-"
    if row.unit is Unit.FRACTION:
        return f"{100 * v:.1f}%"
    if row.unit is Unit.TOKENS_PER_S:
        return f"{v:,.0f}"
    if row.unit is Unit.COUNT:
        return f"{v:g}"
    if row.unit in (Unit.JOULES_PER_TOKEN, Unit.USD_PER_MILLION_TOKENS):
        return f"{v:.4g}" if math.isfinite(v) else "-"
    div, suffix = _scale(row)
    return f"{v / div:.4g}{suffix}"


def _delta(row: ComparedRow, i: int) -> str:
    d, ratio = row.deltas[i], row.ratios[i]
    if d == 0:
        return "="
    if not math.isfinite(d):
        return "-"
    shown = f"{100 * d:+.1f} pt" if row.unit is Unit.FRACTION else (
        f"{d:+,.0f}" if row.unit in (Unit.TOKENS_PER_S, Unit.COUNT) else
        f"{d / _scale(row)[0]:+.4g}{_scale(row)[1]}")
    return shown + (f" ({100 * (ratio - 1):+.1f}%)" if math.isfinite(ratio) and row.unit is not Unit.FRACTION else "")


def comparison_tables(c: Comparison) -> list[Table | str]:
    """A table per section: each run's value and, for the runs after the first, the difference from it."""
    out: list[Table | str] = []
    for section in Section:
        rows = c.section(section)
        if not rows:
            continue
        table = Table(title=escape(_TITLES[section]))
        table.add_column("figure")
        for i, name in enumerate(c.names):
            table.add_column(escape(name), justify="right")
            if i:
                table.add_column(f"Δ vs {escape(c.names[0])}", justify="right")
        for row in rows:
            if section is not Section.SUMMARY and row.name != "total" and not any(row.values):
                continue  # a component no run has
            cells = [row.name.replace("_", " ")]
            for i, v in enumerate(row.values):
                cells += [_value(row, v)] + ([_delta(row, i)] if i else [])
            table.add_row(*cells)
        if section is Section.SUMMARY:
            table.add_row("feasible", *[cell for i, ok in enumerate(c.feasible)
                                        for cell in (["yes" if ok else "[red]no[/red]"] + ([""] if i else []))])
        out.append(table)
    for name, band in zip(c.names, c.bands, strict=False):
        out.append(f"{escape(name)}: {escape(band)}")
    for name, ok, reasons in zip(c.names, c.feasible, c.infeasible_reasons, strict=True):
        if not ok:
            out.append(f"[red]{escape(name)} is infeasible:[/red] {escape('; '.join(reasons))}")
    return out


def comparison_record(c: Comparison) -> dict[str, Any]:
    """Values and differences from the first run, in SI units (fractions for MFU/HFU; null where unknown),
    and each run's error band with the regime (calibration status) it was drawn from."""
    def finite(values: tuple[float, ...]) -> list[float | None]:
        return [v if math.isfinite(v) else None for v in values]

    return {"runs": list(c.names), "kind": c.kind.value, "baseline": c.names[0], "feasible": list(c.feasible),
            "infeasible_reasons": [list(r) for r in c.infeasible_reasons], "bands": list(c.bands),
            "rows": [{"section": r.section.value, "name": r.name, "unit": r.unit.value, "values": finite(r.values),
                      "deltas": finite(r.deltas)} for r in c.rows]}


def _point_figures(p: SweepPoint) -> dict[str, Any]:
    r = p.result
    if r is None:
        return {"feasible": False, "infeasible_reasons": [p.error]}
    if isinstance(r, InferenceEstimate):
        return {"ttft_s": float(r.ttft_s), "tpot_s": float(r.tpot_s),
                "output_tokens_per_s": float(r.output_tokens_per_s), "memory_gib": float(r.memory.total) / GIB,
                "feasible": bool(r.feasible),
                "infeasible_reasons": list(r.infeasible_reasons)}
    return {"step_time_s": float(r.step_time_s), "mfu": float(r.mfu), "tokens_per_s": float(r.tokens_per_s),
            "memory_gib": float(r.memory_hbm.total) / GIB, "feasible": bool(r.feasible),
            "infeasible_reasons": list(r.infeasible_reasons)}


def sweep_rows(s: Sweep) -> list[dict[str, Any]]:
    """One row per point: the varied values, then step time / MFU / tokens/s (or TTFT / TPOT / output
    tokens/s), HBM per device and feasibility."""
    return [{**{a.field: a.shown(v) for a, v in zip(s.axes, p.values, strict=True)}, **_point_figures(p)}
            for p in s.points]


def sweep_table(s: Sweep, title: str) -> Table:
    rows = sweep_rows(s)
    table = Table(title=escape(title))
    for a in s.axes:
        table.add_column(escape(a.field), justify="right")
    inference = any(isinstance(p.result, InferenceEstimate) for p in s.points)
    heads = (("TTFT [ms]", "ttft_s", 1e3, ".4g"), ("TPOT [ms]", "tpot_s", 1e3, ".4g"),
             ("output tokens/s", "output_tokens_per_s", 1.0, ",.0f")) if inference else (
        ("step time [s]", "step_time_s", 1.0, ".4g"), ("MFU", "mfu", 100.0, ".1f"),
        ("tokens/s", "tokens_per_s", 1.0, ",.0f"))
    for head, *_ in heads:
        table.add_column(head, justify="right")
    table.add_column("HBM [GiB]", justify="right")
    table.add_column("feasible")
    for row in rows:
        cells = [escape(str(row[a.field])) for a in s.axes]
        cells += [format(row[k] * scale, fmt) + ("%" if k == "mfu" else "") if k in row else "-"
                  for _, k, scale, fmt in heads]
        cells.append(f"{row['memory_gib']:.2f}" if "memory_gib" in row else "-")
        cells.append("yes" if row["feasible"] else "[red]no[/red]: " + escape("; ".join(
            str(x) for x in row["infeasible_reasons"])))
        table.add_row(*cells)
    return table


def sweep_record(s: Sweep) -> dict[str, Any]:
    return {"axes": [{"field": a.field, "values": [a.shown(v) for v in a.values]} for a in s.axes],
            "points": sweep_rows(s)}
