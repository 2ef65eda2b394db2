"""Rich tables (and the lines printed under them) of results. Rendering only: no model logic here; the
figures come from the result objects, converted for output in `report.records`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table

from armillary.comm.calibration import fitted_dimension
from armillary.estimate.inference_result import InferenceEstimate
from armillary.presets.registry import preset_names
from armillary.report.formatting import binary_size, fixed, percent
from armillary.report.records import inference_simulation_rows, on_devices
from armillary.units import GIB

if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow
    from armillary.estimate.economics import Economics
    from armillary.estimate.result import CommCall, ErrorBand, StepEstimate
    from armillary.serving.benchmark import BenchmarkResult
    from armillary.serving.run import ServingResult
    from armillary.simulate.graph import TaskGraph
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult
    from armillary.simulate.timeline import Timeline
    from armillary.specs.model import Model
    from armillary.specs.system import System
    from armillary.validation.coverage import RegimeCoverage
    from armillary.validation.run import GroupSummary, RowResult


def _trust(band: ErrorBand | None) -> str:
    """How far to trust a figure, printed after it (dim)."""
    return f"  [dim]{escape(band.describe())}[/dim]" if band is not None else ""


def estimate_tables(r: StepEstimate, title: str) -> list[Table]:
    step = float(r.step_time_s)
    head = Table(title=title, show_header=False, min_width=len(title) + 4)
    head.add_row("step time", f"{step:.4g} s{_trust(r.error_band)}")
    head.add_row("tokens/s", f"{float(r.tokens_per_s):,.0f}")
    head.add_row("MFU / HFU", f"{percent(float(r.mfu))} / {percent(float(r.hfu))}")
    head.add_row("micro-batches", f"{float(r.microbatches):g}")
    moe = r.moe_layer
    if moe is not None and float(moe.expert_calls_s) > 0:
        kernels = float(moe.compute_s + moe.recompute.time_s)
        head.add_row("MoE layer kernels", f"{fixed(kernels * 1e3)} ms per micro-batch, of which "
                     f"{fixed(float(moe.expert_calls_s) * 1e3)} ms waiting on per-expert GEMM calls")
    head.add_row("feasible", "yes" if bool(r.feasible) else "[red]no[/red]: " + "; ".join(r.infeasible_reasons))

    time = Table(title="Where the time goes")
    time.add_column("component")
    time.add_column("seconds", justify="right")
    time.add_column("share", justify="right")
    for f in fields(r.breakdown):
        v = float(getattr(r.breakdown, f.name))
        time.add_row(f.name.replace("_", " "), f"{v:.4g}", percent(v / step))

    memory = Table(title="Memory per device [GiB]")
    memory.add_column("category")
    memory.add_column("HBM", justify="right")
    memory.add_column("tier 2", justify="right")
    for f in fields(r.memory_hbm):
        memory.add_row(f.name.replace("_", " "), f"{float(getattr(r.memory_hbm, f.name)) / GIB:.2f}",
                       f"{float(getattr(r.memory_tier2, f.name)) / GIB:.2f}")
    memory.add_row("[bold]total[/bold]", f"{float(r.memory_hbm.total) / GIB:.2f}",
                   f"{float(r.memory_tier2.total) / GIB:.2f}")
    memory.add_row("capacity", f"{float(r.hbm_capacity_bytes) / GIB:.2f}",
                   f"{float(r.tier2_capacity_bytes) / GIB:.2f}")

    traffic = Table(title="Traffic per device and iteration")
    traffic.add_column("network tier")
    traffic.add_column("GB sent", justify="right")
    traffic.add_row("scale-up", f"{float(r.traffic.scale_up_bytes) / 1e9:.3g}")
    traffic.add_row("scale-out", f"{float(r.traffic.scale_out_bytes) / 1e9:.3g}")
    return [head, time, memory, traffic]


def inference_tables(r: InferenceEstimate, title: str) -> list[Table]:
    head = Table(title=title, show_header=False, min_width=len(title) + 4)
    head.add_row("batch x (input + output)", f"{r.batch} x ({r.input_len} + {r.output_len}) tokens")
    head.add_row("replicas x devices", f"{r.replicas} x {r.devices_per_replica}")
    head.add_row("time to first token", f"{fixed(float(r.ttft_s) * 1e3)} ms")
    head.add_row("time per output token", f"{fixed(float(r.tpot_s) * 1e3)} ms")
    head.add_row("end to end", f"{float(r.e2e_s):.4g} s{_trust(r.error_band)}")
    per_device = float(r.output_tokens_per_s_per_device)
    head.add_row("output tokens/s", f"{float(r.output_tokens_per_s):,.0f} ({per_device:,.0f} per device)")
    head.add_row("largest batch / context that fit", f"{r.max_batch} / {r.max_context:,} tokens")
    head.add_row("feasible", "yes" if r.feasible else "[red]no[/red]: " + "; ".join(r.infeasible_reasons))
    for note in r.notes:
        head.add_row("note", note)

    time = Table(title="Where the time goes (ms)")
    for c in ("component", "prefill", "decode (all steps)"):
        time.add_column(c, justify="left" if c == "component" else "right")
    for f in fields(r.prefill):
        time.add_row(f.name, fixed(float(getattr(r.prefill, f.name)) * 1e3),
                     fixed(float(getattr(r.decode, f.name)) * 1e3))
    time.add_row("[bold]total[/bold]", fixed(float(r.prefill.total) * 1e3), fixed(float(r.decode.total) * 1e3))

    memory = Table(title="Memory per device [GiB]")
    memory.add_column("category")
    memory.add_column("bytes", justify="right")
    for name in ("weights", "kv_cache", "activations", "kv_cache_tier2"):
        memory.add_row(name.replace("_", " "), f"{float(getattr(r.memory, name)) / GIB:.2f}")
    memory.add_row("[bold]total HBM[/bold]", f"{float(r.memory.total) / GIB:.2f}")
    memory.add_row("capacity", f"{float(r.hbm_capacity_bytes) / GIB:.2f}")
    return [head, time, memory]


def estimate_report(r: StepEstimate | InferenceEstimate, model: Model, system: System) -> list[Table]:
    """A training iteration's or a static inference batch's tables."""
    if isinstance(r, InferenceEstimate):
        return inference_tables(r, on_devices(model, system))
    return estimate_tables(r, on_devices(model, system))


def serving_report(r: ServingResult, model: Model, system: System, max_rate: float | None = None,
                   trace: Path | str | None = None) -> list[Table]:
    """A served request stream (from the `trace` file, if named), with the largest rate meeting the SLOs."""
    title = f"Serving {trace}: {on_devices(model, system)}" if trace is not None else \
        f"Serving {on_devices(model, system)}"
    return serving_tables(r, title, max_rate)


def serving_tables(r: ServingResult, title: str, max_rate: float | None = None) -> list[Table]:
    head = Table(title=title, show_header=False, min_width=len(title) + 4)
    if max_rate is not None:
        head.add_row("largest rate meeting the SLOs", f"{max_rate:.3g} requests/s (P90 TTFT <= "
                     f"{r.ttft_slo_s * 1e3:g} ms, P99 TPOT <= {r.tpot_slo_s * 1e3:g} ms)")
    head.add_row("requests (completed / rejected)", f"{r.requests} ({r.completed} / {r.rejected})")
    # measured on the arrivals drawn: (requests - 1) / (last arrival - first), near the rate asked for
    head.add_row("offered rate (arrivals drawn)", f"{r.offered_rate:.3g} requests/s")
    head.add_row("replicas (prefill-only)", f"{r.replicas} ({r.prefill_replicas}), {r.devices} devices")
    per_device = r.output_tokens_per_s_per_device
    head.add_row("output tokens/s", f"{r.output_tokens_per_s:,.0f} ({per_device:,.0f} per device)"
                 f"{_trust(r.error_band)}")
    head.add_row("goodput", f"{r.goodput_requests_per_s:.3g} requests/s ({percent(r.slo_attainment)} meet both SLOs)")
    head.add_row("mean batch / iterations", f"{r.mean_batch:.1f} / {r.iterations}")
    if r.eager_steps:
        head.add_row("eager decode steps", f"{r.eager_steps:,} (outside the engine's CUDA graphs: each pays the "
                     "host's launch of its short kernels)")
    head.add_row("preemptions", f"{r.preemptions}")
    head.add_row("KV pages per device", f"{r.kv_blocks_per_device:,}")
    band = r.error_band
    # the serving band pools the engine's throughput and latency rows: it is each figure's band
    latency = Table(title="Latency (ms)", caption=f"each figure {band.describe()}" if band else None)
    for c in ("metric", "mean", "P50", "P90", "P99"):
        latency.add_column(c, justify="left" if c == "metric" else "right")
    for name, p in (("time to first token", r.ttft_s), ("time per output token", r.tpot_s),
                    ("end to end", r.e2e_s)):
        # no completed request: no percentile, shown as a dash rather than nan
        latency.add_row(name, *(fixed(v * 1e3) for v in (p.mean, p.p50, p.p90, p.p99)))
    return [head, latency]


def coverage_table(coverage: Sequence[RegimeCoverage]) -> Table:
    """Per regime: the band an estimate prints and how many of the regime's measured rows it covers."""
    table = Table(title="Error bands against their rows (80% of each regime's rows should lie inside)")
    for name in ("regime", "rows", "band", "covered", "mean abs. error"):
        table.add_column(name, justify="left" if name == "regime" else "right")
    for c in coverage:
        table.add_row(c.regime, str(c.rows), f"+-{c.band:.0%}", f"{c.covered} ({c.covered / c.rows:.0%})",
                      f"{c.mean_abs_error:.1%}")
    total, covered = sum(c.rows for c in coverage), sum(c.covered for c in coverage)
    if total:
        table.add_row("all", str(total), "", f"{covered} ({covered / total:.0%})", "")
    return table


def benchmark_lines(b: BenchmarkResult) -> list[str]:
    """What the benchmark reports: its mode and client, the output rate as it measures it, MLPerf's limits."""
    bench, client = b.benchmark, f"{b.served.requests:,} requests"
    if bench.rate is not None:
        client += f" at {bench.rate:g} requests/s"
    if bench.concurrency is not None:
        client += f", {bench.concurrency} outstanding"
    how = "over the whole run" if b.steady is None else (
        f"over the steady window {b.steady.start_s:.3g}-{b.steady.end_s:.3g} s (request count not stated)"
        if not b.steady.whole_run else "over the whole run (too few requests for a steady window)")
    lines = [f"benchmark {bench.mode.value}: {client}; {b.output_tokens_per_s:,.0f} output tokens/s {how}"]
    if bench.limits_s is not None:
        ttft, tpot = bench.limits_s
        lines.append(f"{bench.mode.value} limits P99 TTFT <= {ttft * 1e3:g} ms, P99 TPOT <= {tpot * 1e3:g} ms: "
                     + ("met" if b.meets_limits else "not met (the run would not be a valid result)"))
    return lines


def validation_tables(results: list[RowResult], summary: list[GroupSummary]) -> list[Table]:
    rows = Table(title="Validation: predicted vs measured")
    for c in ("id", "metric", "measured", "predicted", "error"):
        rows.add_column(c, justify="right" if c in ("measured", "predicted", "error") else "left")
    skipped = Table(title="Rows not run")
    skipped.add_column("id")
    skipped.add_column("reason")
    for r in results:
        if r.predicted is None:
            skipped.add_row(r.id, r.skipped or "")
            continue
        err = f"{100 * r.error:+.1f}%" if r.error is not None else ""
        flag = "" if r.feasible else " (infeasible)"
        rows.add_row(r.id, r.metric, f"{r.measured:.4g}", f"{r.predicted:.4g}", err + flag)
    groups = Table(title="Error per source")
    for c in ("source", "rows", "run", "mean |error|", "max |error|"):
        groups.add_column(c, justify="left" if c == "source" else "right")
    for g in summary:
        groups.add_row(g.group, str(g.rows), str(g.run), percent(g.mean_abs_error) if g.run else "-",
                       percent(g.max_abs_error) if g.run else "-")
    return [rows, skipped, groups]


def sweep_table(rows: list[SweepRow], op: str, system: System) -> Table:
    """nccl-tests-style table of a collective `op` over every device of `system`."""
    table = Table(title=f"{op} on {system.devices} x {system.device.name} ({system.name})")
    for c in ("size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "composition",
              *(f"dim {i}" for i in range(len(system.network)))):
        table.add_column(c, justify="right" if "(" in c else "left")
    for r in rows:
        table.add_row(f"{r.size_bytes:.0f}", f"{r.time_s * 1e6:.2f}", f"{r.algbw_bytes_per_s / 1e9:.2f}",
                      f"{r.busbw_bytes_per_s / 1e9:.2f}", r.composition, *r.dimensions)
    return table


def comm_profile_table(calls: tuple[CommCall, ...], model: Model, system: System) -> Table:
    """Every communication call of a step: count, size, bytes per tier and time (before overlap)."""
    table = Table(title=f"Communication of one step: {on_devices(model, system)}")
    for name in ("dim", "operation", "calls/step", "message", "time each (us)", "total (ms)", "scale-up GB",
                 "scale-out GB"):
        table.add_column(name, justify="left" if name in ("dim", "operation") else "right")
    for c in calls:
        table.add_row(c.dimension.value, c.operation.value, f"{float(c.per_step):,.0f}",
                      binary_size(float(c.message_bytes)), f"{float(c.time_each_s) * 1e6:,.1f}",
                      f"{float(c.time_s) * 1e3:,.2f}", f"{float(c.per_step * c.scale_up_bytes_each) / 1e9:,.3g}",
                      f"{float(c.per_step * c.scale_out_bytes_each) / 1e9:,.3g}")
    return table


def simulation_report(result: SimulationResult, model: Model, compiled: bool = False) -> list[Table | str]:
    """A simulated iteration: the critical path by kind of work against the estimate, where the path runs,
    and what the simulation cost (`compiled`: this run compiled the event engine)."""
    step = result.step_time_s
    table = Table(title=f"{model.name}: one iteration simulated ({result.schedule.value}, "
                        f"{result.graph.ranks} simulated ranks for {result.graph.devices} devices)")
    table.add_column("critical path")
    table.add_column("s", justify="right")
    table.add_column("share", justify="right")
    for f in fields(result.on_critical_path):
        value = getattr(result.on_critical_path, f.name)
        if value > 0:
            table.add_row(f.name, f"{value:.4g}", f"{value / step:.1%}")
    table.add_row("step (simulated)", f"{step:.4g}", "")
    table.add_row("step (analytical)", f"{float(result.estimate.step_time_s):.4g}", f"{result.difference:+.2%}")
    path, tasks = result.critical_path, result.graph.tasks
    lines: list[Table | str] = [
        table, f"critical path: {len(path):,} tasks, from {tasks[path[0]].name!r} to {tasks[path[-1]].name!r}"
        if path else "",
        f"{len(tasks):,} tasks, {result.timeline.events:,} events; {result.wall_s:.2f} s in all, of which the "
        f"event engine {result.engine_s:.3f} s (with loading it, once per process); busiest rank: "
        f"{result.graph.rank_labels[result.busiest_rank]} ({result.busiest_compute_s:.4g} s of compute)"]
    routes = result.graph.routes
    if routes is not None:
        crossing = int((routes.first[1:] > routes.first[:-1]).sum())
        lines.append(f"{crossing:,} transfers routed over {len(routes.capacity):,} tapered switch uplinks "
                     "(their sharing simulated; the analytical estimate charges every cross-leaf group the "
                     "fully loaded share)")
    if compiled:
        lines.append("(this first simulation compiled the event engine; later runs load it from numba's cache)")
    return lines


def inference_simulation_table(sim: InferenceSimulation) -> Table:
    """A simulated static batch against the estimate: TTFT, TPOT, end to end."""
    table = Table(title=f"static batch of {sim.estimate.batch}: simulated ({sim.graph.ranks} stages) vs analytical")
    for column in ("", "simulated s", "analytical s", "difference"):
        table.add_column(column, justify="right" if column else "left")
    for name, a, b in inference_simulation_rows(sim):
        table.add_row(name, f"{a:.4g}", f"{b:.4g}", f"{a / b - 1:+.2%}" if b else "")
    return table


def traces_line(graph: TaskGraph, timeline: Timeline) -> str:
    """Simulated Chakra traces in one line."""
    return f"{graph.ranks} ranks, {len(graph.tasks):,} tasks: {timeline.makespan_s:.6g} s"


def calibration_line(fitted: System, gpus: int, path: Path) -> str:
    """The dimension a collective over `gpus` devices crosses last, as fitted, and where the system was
    written."""
    tier = fitted.network[fitted_dimension(fitted, gpus)]
    return (f"fitted {tier.name}: latency {tier.latency * 1e6:.2f} us, efficiency {tier.efficiency:.3f}, "
            f"in-network efficiency {tier.in_network_efficiency:.3f}; written to {path}")


def presets_lines(kinds: tuple[str, ...]) -> list[str]:
    """The shipped presets of each kind, one line per kind (rich markup)."""
    return [f"[bold]{k}[/bold]: " + ", ".join(preset_names(k)) for k in kinds]


def economics_line(e: Economics) -> str:
    """Energy and cost per token in one line, with what they assumed."""
    if e.joules_per_token is None:
        energy = "energy: the device lists no power (give costs.device_power)"
    elif not math.isfinite(float(e.joules_per_token)):
        energy = f"energy: no {e.tokens.value} tokens to share it"
    else:
        energy = (f"energy {float(e.joules_per_token):.4g} J per {e.tokens.value} token ({e.devices} x "
                  f"{e.device_power_w:g} W x PUE {e.pue:g})")
    if e.usd_per_million_tokens is None:
        return energy + " · cost: give --usd-per-gpu-hour"
    if not math.isfinite(float(e.usd_per_million_tokens)):
        return energy + f" · cost: no {e.tokens.value} tokens to share it"
    return energy + (f" · ${float(e.usd_per_million_tokens):.4g} per million {e.tokens.value} tokens at "
                     f"${e.usd_per_gpu_hour:g}/device-hour")
