"""A search's results as console tables: the top training strategies (ties within the first's error band
said as ties), the best system per co-design point and by each goal, the best inference configurations; and
the warning when a winner sits in a poorly validated regime."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from armillary.report.formatting import fixed, percent
from armillary.report.records import (
    codesign_best,
    design_label,
    design_name,
    design_values,
    inference_search_rows,
    on_devices,
    overlap_label,
    search_rows,
    tied_with_first,
    varied_axes,
)
from armillary.search.run import Objective
from armillary.search.systems import DIMENSION

if TYPE_CHECKING:
    from armillary.estimate.result import ErrorBand
    from armillary.search.inference import InferenceSearchResult
    from armillary.search.run import SearchResult
    from armillary.search.systems import CoDesignResult
    from armillary.specs.model import Model
    from armillary.specs.system import System


def search_report(result: SearchResult, model: Model, system: System, objective: Objective) -> list[Table | str]:
    """The top strategies of a training search, and what the search did."""
    rows = search_rows(result)
    table = Table(title=f"{on_devices(model, system)}: top {len(rows)} by {objective.value}")
    formats = any(r["block_format"] != "none" for r in rows)  # the GEMMs' block format, where a row has one
    for c in ("rank", "tp", "pp", "dp", "vpp", "cp", "ep", "mb", "attention", "SP", "recompute", "ZeRO", "overlap",
              "offload", "rank order", *(("GEMMs",) if formats else ()), "step s", "±", "MFU", "GiB"):
        table.add_column(c, justify="left" if c in ("attention", "recompute", "overlap", "offload", "rank order",
                                                    "GEMMs") else "right")
    for r in rows:
        overlap = overlap_label(r["overlap"], compact=True)
        band = r["error_band"]
        table.add_row(str(r["rank"]), str(r["tp"]), str(r["pp"]), str(r["dp"]), str(r["vpp"]), str(r["cp"]),
                      str(r["ep"]), str(r["micro_batch"]), r["attention"], "yes" if r["sequence_parallel"] else "no",
                      r["recompute"], str(r["zero"]), overlap, r["offload"] or "-", r["rank_order"],
                      *((r["block_format"],) if formats else ()),
                      f"{r['step_time_s']:.4g}",
                      f"{band['relative']:.0%}{'!' if band['poorly_validated'] else ''}" if band else "-",
                      percent(r["mfu"]), f"{r['memory_gib']:.1f}")
    summary = (f"{result.points:,} points: {result.pruned:,} pruned (degrees that do not divide, memory "
               f"floor, {result.bounded:,} of them by the lower bound of the objective), {result.evaluated:,} "
               f"evaluated, {result.feasible:,} feasible, in {result.elapsed_s:.2f} s "
               f"({result.points_per_s:,.0f} points/s)")
    if not rows:
        return [f"infeasible: no strategy of the space runs {on_devices(model, system)} ({no_strategy_reason(result)})",
                summary]
    ties = tied_with_first(result) if objective is Objective.TIME else 0
    tie_line = [f"ranks 1-{ties + 1} lie within the first's +-{result.top[0].error_band.relative:.0%} error band "
                "(step time): a tie under the model's accuracy, not a ranking"] if ties and result.top[0].error_band \
        else []
    return [table, summary, *tie_line, *poorly_validated_warning(
        "the fastest strategy" if objective is Objective.TIME else "the first strategy", result.top[0].error_band)]


def poorly_validated_warning(what: str, band: ErrorBand | None) -> list[str]:
    """A line that says when a winner's prediction sits in a poorly validated regime (else nothing)."""
    if band is None or not band.poorly_validated:
        return []
    return [f"[yellow]warning[/yellow]: {escape(what)} sits in a poorly validated regime: "
            f"{escape(band.describe())}; check it against a measurement before relying on the ranking "
            "(! in the ± column)"]


def no_strategy_reason(result: SearchResult) -> str:
    if result.evaluated == 0:
        return ("every layout was pruned: its degrees do not divide the GPUs, or its model states alone exceed "
                "HBM; try more GPUs, ZeRO-3 or offload")
    return f"all {result.evaluated:,} evaluated points are out of memory or break a rule"


def codesign_report(designs: CoDesignResult, model: Model, budget: float | None) -> list[Table | str]:
    """Every system with its best strategy (fastest first, * on the front), and the best by each goal."""
    table = Table(title=f"{model.name}: best strategy per system")
    dims = [k for k in (designs.points[0].values if designs.points else {}) if k.startswith(DIMENSION)]
    for c in ("", "GPUs", "HBM GiB", "tier 2 GiB", "scale-up GB/s", "scale-out GB/s",
              *(f"{k[len(DIMENSION):]} GB/s" for k in dims), "per node", "best tp/pp/vpp/mb", "step s", "cost M$",
              "power kW"):
        table.add_column(c, justify="right")
    for i, p in sorted(enumerate(designs.points), key=lambda ip: ip[1].step_time_s):
        v, st = design_values(p), p.best.strategy if p.best else None
        table.add_row("*" if i in designs.pareto else "", str(v["gpus"]), f"{v['hbm_capacity']:.0f}",
                      f"{v.get('tier2_capacity', 0):.0f}", f"{v['scale_up_bandwidth']:.0f}",
                      f"{v['scale_out_bandwidth']:.0f}", *(f"{v[k]:.0f}" for k in dims), str(v["devices_per_node"]),
                      f"{st.tp}/{st.pp}/{st.vpp}/{st.micro_batch}" if st else "nothing fits",
                      f"{p.step_time_s:.4g}", f"{p.cost / 1e6:.2f}", f"{p.power / 1e3:.0f}")
    lines: list[Table | str] = [table, f"{len(designs.points)} systems, {designs.strategies_evaluated:,} strategies "
                                       f"evaluated; {len(designs.pareto)} on the time / cost / power front (*)"]
    within = f" within ${budget:,.0f}" if budget is not None else ""
    axes = varied_axes(designs)
    lines.append("varied: " + (", ".join(design_name(k) for k in axes) if axes else "nothing (one system)"))
    for goal, best in codesign_best(designs, budget).items():
        band = best.best.error_band if best and best.best else None
        text = (f"{design_label(best, axes)}: {best.step_time_s:.4g} s {f'(+-{band.relative:.0%})' if band else ''}, "
                f"${best.cost / 1e6:.2f}M, {best.power / 1e3:.0f} kW" if best else "none")
        lines.append(f"best by {goal}{within}: {text}")
        lines += poorly_validated_warning(f"the best system by {goal}", band)
    return lines


def inference_search_report(result: InferenceSearchResult, model: Model, system: System,
                            tpot_limit_s: float) -> list[Table | str]:
    """The configurations with the most output tokens/s per device within the limits."""
    table = Table(title=f"{on_devices(model, system)}: most tokens/s per device with TPOT <= {tpot_limit_s * 1e3:g} ms")
    for c in ("rank", "tp", "pp", "batch", "weights", "prefill replicas", "tok/s/device", "TTFT ms", "TPOT ms",
              "GiB"):
        table.add_column(c, justify="right")
    for r in inference_search_rows(result):
        table.add_row(str(r["rank"]), str(r["tp"]), str(r["pp"]), str(r["batch"]), r["weights"] or "default",
                      str(r["prefill_replicas"] or "-"), f"{r['output_tokens_per_s_per_device']:,.0f}",
                      fixed(r["ttft_s"] * 1e3), fixed(r["tpot_s"] * 1e3), f"{r['memory_gib']:.1f}")
    return [table, f"{result.points} points, {result.feasible} fit, {result.within_limits} within the limits"]
