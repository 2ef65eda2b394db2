"""Tables and JSON records of imported programs and traces (the view a profiler gives: per op kind)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.table import Table

if TYPE_CHECKING:
    from armillary.ingest.hlo_run import HloSimulation
    from armillary.ingest.torch_replay import Replay


def hlo_table(result: HloSimulation) -> Table:
    module = result.cost.module
    table = Table(title=f"{module.name}: {module.instruction_count:,} instructions, {module.num_partitions} "
                        f"partitions on {result.cost.system.name} - step {result.step_time_s * 1e3:.4g} ms "
                        f"({len(result.graph.tasks):,} tasks, {result.graph.ranks} simulated)")
    for column in ("op kind", "count", "busy ms", "critical ms", "GFLOP", "MB"):
        table.add_column(column, justify="left" if column == "op kind" else "right")
    for k in result.kinds:
        table.add_row(k.kind.value, f"{k.count:,}", f"{k.busy_s * 1e3:.4g}", f"{k.critical_s * 1e3:.4g}",
                      f"{k.flop / 1e9:.4g}", f"{k.bytes / 1e6:.4g}")
    return table


def hlo_record(result: HloSimulation) -> dict[str, Any]:
    module = result.cost.module
    return {"module": module.name, "instructions": module.instruction_count,
            "partitions": module.num_partitions, "system": result.cost.system.name,
            "step_time_s": result.step_time_s, "compute_s": result.compute_s,
            "communication_s": result.communication_s, "tasks": len(result.graph.tasks),
            "simulated_ranks": result.graph.ranks,
            "kinds": [{"kind": k.kind.value, "count": k.count, "busy_s": k.busy_s, "critical_s": k.critical_s,
                       "flop": k.flop, "bytes": k.bytes} for k in result.kinds]}


def torch_table(result: Replay) -> Table:
    table = Table(title=f"torch.profiler trace, {len(result.traces.ranks)} ranks, replayed on {result.system.name}")
    for column in ("", "seconds"):
        table.add_column(column, justify="left" if not column else "right")
    for label, value in (("measured step", result.measured_step_s), ("replayed step", result.step_time_s),
                         ("compute (rank 0, as measured)", result.compute_s),
                         ("communication (rank 0, re-costed)", result.communication_s)):
        table.add_row(label, f"{value:.6g}")
    return table


def torch_record(result: Replay) -> dict[str, Any]:
    return {"ranks": len(result.traces.ranks), "system": result.system.name,
            "measured_step_s": result.measured_step_s, "step_time_s": result.step_time_s,
            "compute_s": result.compute_s, "communication_s": result.communication_s,
            "collectives": [{"op": c.op.value, "bytes": c.bytes, "group": c.group_size}
                            for c in result.traces.ranks[0].collectives]}
