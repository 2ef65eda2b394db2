"""`network-optimize`'s answer as a table and as a JSON record: per dimension the class pricing it, the
bandwidth now, at the model optimum and (with --refine) where the full estimator moved it."""

from __future__ import annotations

from typing import Any

import numpy as np
from rich.table import Table

from armillary.search.network_bandwidth import BandwidthObjective
from armillary.search.network_optimize import NetworkPlan
from armillary.specs.system import System

GB = 1e9


def _gbps(b: np.ndarray) -> str:
    return "[" + ", ".join(f"{x / GB:.2f}" for x in b) + "] GB/s"


def objective_value(plan: NetworkPlan, objective: BandwidthObjective, b: np.ndarray, t: float) -> float:
    """The objective at bandwidths b with step t: t, t x (device + network $) or t x (device + network W)."""
    if objective is BandwidthObjective.TIME:
        return t
    w = plan.constraints.power_per_bw if objective is BandwidthObjective.TIME_POWER else plan.constraints.cost_per_bw
    return t * (plan.device_cost + (float(w @ b) if w is not None else 0.0))


def plan_record(plan: NetworkPlan, objective: BandwidthObjective) -> dict[str, Any]:
    """The JSON record (bandwidths in bytes/s, times in s, cost in $ and power in W per device)."""
    c = plan.constraints
    cost_now = float(c.cost_per_bw @ plan.current) if c.cost_per_bw is not None else None
    r = plan.refined
    return {
        "objective": objective.value,
        "bandwidth_bytes_per_s": plan.bandwidth.tolist(),
        "model_optimum_bytes_per_s": plan.optimum.bandwidth.tolist(),
        "refined_bytes_per_s": r.bandwidth.tolist() if r is not None else None,
        "refine_moved": r.moved if r is not None else None,
        "step_time_s": plan.optimum.step_time_s,
        "current_step_time_s": plan.current_step_s,
        "estimator_step_time_s": r.step_time_s if r is not None else None,
        "estimator_model_optimum_step_time_s": r.start_step_time_s if r is not None else None,
        "estimator_current_step_time_s": plan.estimator_current_s,
        "objective_value": objective_value(plan, objective, plan.optimum.bandwidth, plan.optimum.step_time_s),
        "current_objective_value": objective_value(plan, objective, plan.current, plan.current_step_s),
        "device_cost": plan.device_cost,
        "device_cost_source": plan.device_cost_source,
        "cost": plan.optimum.cost, "power_w": plan.optimum.power, "current_cost": cost_now,
        "devices": plan.devices, "cost_source": plan.cost_source, "power_source": plan.power_source,
        "component_classes": list(plan.prices.classes),
        "component_classes_inferred": list(plan.prices.inferred),
        "sensitivity_s_per_gbps": (plan.optimum.sensitivity * GB).tolist(),
    }


def plan_table(system: System, plan: NetworkPlan, objective: BandwidthObjective) -> Table:
    """The optimum per dimension, with its component class, prices, and the network cost now and after."""
    c, best, r = plan.constraints, plan.optimum, plan.refined
    table = Table(title=f"{system.name}: step {best.step_time_s:.4g} s at the optimum vs {plan.current_step_s:.4g} s "
                        f"now (model step time, LIBRA-style; objective {objective.value})")
    columns = ["dimension", "component class", "$ / GB/s", "W / GB/s", "now (GB/s)", "model optimum (GB/s)"]
    columns += ["refined (GB/s)"] if r is not None else []
    for col in [*columns, "d step / d bw (ms per GB/s)"]:
        table.add_column(col, justify="left" if col in ("dimension", "component class") else "right")
    for i, d in enumerate(system.network):
        cls = plan.prices.classes[i] or "-"
        row = [d.name, cls + (" (inferred)" if plan.prices.inferred[i] else ""), _figure(c.cost_per_bw, i),
               _figure(c.power_per_bw, i), f"{plan.current[i] / GB:.2f}", f"{best.bandwidth[i] / GB:.2f}"]
        row += [f"{r.bandwidth[i] / GB:.2f}"] if r is not None else []
        table.add_row(*row, f"{best.sensitivity[i] * GB * 1e3:.4g}")
    table.caption = "\n".join(_notes(plan, objective))
    return table


def _notes(plan: NetworkPlan, objective: BandwidthObjective) -> list[str]:
    c, best, r, n = plan.constraints, plan.optimum, plan.refined, plan.devices
    notes = []
    if c.cost_per_bw is not None:
        now = float(c.cost_per_bw @ plan.current)
        notes.append(f"network cost per device ${best.cost:,.0f} at the optimum vs ${now:,.0f} now; x {n:,} devices: "
                     f"${best.cost * n / 1e6:,.2f}M vs ${now * n / 1e6:,.2f}M"
                     + (f"; power per device {best.power:,.1f} W" if c.power_per_bw is not None else ""))
    if objective is not BandwidthObjective.TIME:
        unit = "W" if objective is BandwidthObjective.TIME_POWER else "$"
        notes.append(f"objective: step x (device {unit}{plan.device_cost:,.0f} + network) per device (LIBRA's "
                     f"system perf-per-cost), {objective_value(plan, objective, best.bandwidth, best.step_time_s):.4g}"
                     f" at the optimum vs {objective_value(plan, objective, plan.current, plan.current_step_s):.4g} "
                     f"now; device figure: {plan.device_cost_source}")
    notes.append(f"cost per GB/s: {plan.cost_source}; power per GB/s: {plan.power_source}")
    if r is not None:
        notes.append((f"refined with the full estimator: chose {_gbps(r.bandwidth)}, step {r.step_time_s:.4g} s "
                       f"(the estimator at the model optimum {_gbps(best.bandwidth)}: {r.start_step_time_s:.4g} s)"
                       if r.moved else
                       f"refined with the full estimator: kept the model optimum {_gbps(best.bandwidth)}, step "
                       f"{r.step_time_s:.4g} s (no move of bandwidth between dimensions helped)")
                      + f"; the estimator at the system's own bandwidths: {plan.estimator_current_s:.4g} s")
    return notes


def _figure(per_bw: np.ndarray | None, i: int) -> str:
    return "-" if per_bw is None else f"{per_bw[i] * GB:.4g}"
