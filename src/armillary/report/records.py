"""Results as JSON-ready data: what `--json` prints and `--save` writes, in one place. The tables of
`report.tables` read the same rows, so a figure is converted (units, names) once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from armillary.estimate.result import plain
from armillary.plan.layout import data_parallel
from armillary.specs.huggingface import UNREAD
from armillary.units import GIB, GIGA

if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import CommCall, StepEstimate
    from armillary.search.inference import InferenceSearchResult
    from armillary.search.run import SearchResult
    from armillary.search.systems import CoDesignResult, DesignPoint
    from armillary.serving.benchmark import BenchmarkResult
    from armillary.serving.run import ServingResult
    from armillary.simulate.graph import TaskGraph
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult
    from armillary.simulate.timeline import Timeline
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload
    from armillary.validation.run import RowResult

# The unit each system parameter of a co-design point is reported in, by field (absent: as it is):
# capacities in GiB, bandwidths in GB/s.
DESIGN_UNITS: dict[str, float] = {
    "hbm_capacity": GIB, "tier2_capacity": GIB, "hbm_bandwidth": GIGA, "tier2_bandwidth": GIGA,
    "scale_up_bandwidth": GIGA, "scale_out_bandwidth": GIGA}


def estimate_record(r: StepEstimate | InferenceEstimate, run: dict[str, Any] | None = None) -> dict[str, Any]:
    """A training iteration or a static inference batch (floats for one configuration, lists for a sweep),
    with what it assumed (`run_record`) when given."""
    return {**r.to_dict(), **({"run": run} if run is not None else {})}


def run_record(model: Model, system: System, strategy: Strategy, workload: Workload) -> dict[str, Any]:
    """What a result assumed: the resolved inputs (dp and the schedule worked out) and the strategy fields
    that took their defaults."""
    return {"model": model.name, "system": system.name, "device": system.device.name, "devices": system.devices,
            "strategy": {**strategy.model_dump(mode="json"), "dp": data_parallel(strategy, system),
                         "schedule": strategy.pipeline_schedule.value},
            "workload": workload.model_dump(mode="json"),
            "defaults": sorted(set(type(strategy).model_fields) - strategy.model_fields_set),
            "model_keys_not_modelled": model.sources.get(UNREAD, "").split(", ") if UNREAD in model.sources else []}


def on_devices(model: Model, system: System) -> str:
    """'MODEL on N x DEVICE', the title of a run's tables."""
    return f"{model.name} on {system.devices} x {system.device.name}"


def strategy_line(strategy: Strategy, system: System, on: bool = True) -> str:
    """The strategy in one line, as the tables head it (`on`: ending with the devices it runs on)."""
    s = strategy
    parts = [f"tp {s.tp}", f"pp {s.pp}", f"dp {data_parallel(s, system)}", f"cp {s.cp}", f"ep {s.ep}",
             f"micro-batch {s.micro_batch}", f"{s.pipeline_schedule.value}" + (f" vpp {s.vpp}" if s.vpp > 1 else ""),
             f"attention {s.attention.value}",
             s.precision.value + (f" + {s.block_format.value} GEMMs" if s.block_format.value != "none" else ""),
             f"recompute {s.recompute.value}"
             + (f" ({s.recompute_layers} layers a chunk)" if s.recompute_layers is not None else ""),
             f"ZeRO {int(s.zero)}", "SP" if s.sequence_parallel else "no SP"]
    return " · ".join(parts) + (f" on {system.devices} x {system.device.name}" if on else "")


def serving_record(r: ServingResult) -> dict[str, Any]:
    """A served trace: counts, rates, latency percentiles, goodput."""
    return r.to_dict()


def rate_record(r: ServingResult, max_rate: float | None) -> dict[str, Any]:
    """A served stream and the largest rate meeting the SLOs (None: not searched)."""
    return plain({**serving_record(r), "max_rate": max_rate})


def benchmark_record(b: BenchmarkResult) -> dict[str, Any]:
    """The benchmark a stream was served as: mode, client, the rate it reports and, for MLPerf, its limits."""
    limits = b.benchmark.limits_s
    return plain({"mode": b.benchmark.mode.value, "requests": b.served.requests,
                  "requests_stated": b.benchmark.requests is not None, "rate": b.benchmark.rate,
                  "concurrency": b.benchmark.concurrency, "output_tokens_per_s": b.output_tokens_per_s,
                  "steady_window_s": None if b.steady is None else [b.steady.start_s, b.steady.end_s],
                  "p99_limits_s": None if limits is None else list(limits), "meets_limits": b.meets_limits})


def request_rows(r: ServingResult) -> list[dict[str, Any]]:
    """One row per request: arrival, lengths, first token, finish, preemptions."""
    t = r.times
    names = ("arrival_s", "input_len", "output_len", "first_token_s", "finish_s", "preemptions")
    return [dict(zip(names, values, strict=True)) for values in zip(
        t.arrival_s.tolist(), t.input_len.tolist(), t.output_len.tolist(), t.first_token_s.tolist(),
        t.finish_s.tolist(), t.preemptions.tolist(), strict=True)]


def search_rows(result: SearchResult) -> list[dict[str, Any]]:
    from armillary.search.run import candidate_row  # the search modules load only for search reports

    return [candidate_row(c) for c in result.top]


def tied_with_first(result: SearchResult) -> int:
    """How many of the top strategies after the first have a step time within the first's error band of it:
    the model cannot tell them apart (a tie, not a ranking)."""
    if not result.top or result.top[0].error_band is None:
        return 0
    first, band = float(result.top[0].step_time_s), result.top[0].error_band.relative
    return sum(float(c.step_time_s) <= first * (1 + band) for c in result.top[1:])


def overlap_label(overlap: Mapping[str, Any], compact: bool = False) -> str:
    """The communication a strategy overlaps, as words ("dp grads, param gathers, tp userbuffers"; `compact`:
    "dp,gather,tp-ub" for a console column): the TP method only where TP overlap is on."""
    method = str(getattr(overlap.get("tp_comm_method"), "value", overlap.get("tp_comm_method") or ""))
    parts = [(overlap.get("dp_grad_reduce"), "dp grads", "dp"),
             (overlap.get("param_gather"), "param gathers", "gather"),
             (overlap.get("tp_comm"), f"tp {method}".strip(), "tp-" + ("ub" if method == "userbuffers" else method)),
             (overlap.get("ep_comm"), "ep", "ep")]
    return ("," if compact else ", ").join(c if compact else w for on, w, c in parts if on) or "-"


def layout_label(row: Mapping[str, Any]) -> str:
    """A search row's strategy in one line, every field that tells two rows apart: degrees (vpp, cp and ep
    where above 1), micro-batch, ZeRO, SP, recompute, attention, rank order, overlap, offload (where any)."""
    degrees = [f"{k} {row[k]}" for k in ("tp", "pp", "dp") if k in row]
    degrees += [f"{k} {row[k]}" for k in ("vpp", "cp", "ep") if row.get(k, 1) != 1]
    layers = f" ({row['recompute_layers']} layers)" if row.get("recompute_layers") is not None else ""
    sp = "SP" if row["sequence_parallel"] else "no SP"
    offload = f", offload: {row['offload']}" if row.get("offload") else ""
    return " ".join(degrees) + (f", mb {row['micro_batch']}, ZeRO {row['zero']}, {sp}, recompute "
                                f"{row['recompute']}{layers}, {row['attention']}, ranks {row['rank_order']}, "
                                f"overlap: {overlap_label(row['overlap'])}{offload}")


def search_record(result: SearchResult) -> dict[str, Any]:
    return {"points": result.points, "evaluated": result.evaluated, "pruned": result.pruned,
            "bounded": result.bounded, "feasible": result.feasible, "elapsed_s": result.elapsed_s,
            "tied_with_first_in_step_time": tied_with_first(result), "top": search_rows(result)}


def inference_search_rows(result: InferenceSearchResult) -> list[dict[str, Any]]:
    return [{"rank": c.rank, "tp": c.strategy.tp, "pp": c.strategy.pp, "batch": c.batch,
             "weights": c.weights.value if c.weights else None, "prefill_replicas": c.prefill_replicas,
             "output_tokens_per_s_per_device": c.output_tokens_per_s_per_device,
             "ttft_s": c.ttft_s, "tpot_s": c.tpot_s,
             "memory_gib": float(c.estimate.memory.total) / GIB} for c in result.top]


def inference_search_record(result: InferenceSearchResult) -> dict[str, Any]:
    return {"points": result.points, "feasible": result.feasible, "within_limits": result.within_limits,
            "top": inference_search_rows(result)}


def design_values(p: DesignPoint) -> dict[str, Any]:
    """The system parameters of a co-design point in their reporting units (`DESIGN_UNITS`; a network
    dimension's bandwidth, key "bandwidth:NAME", in GB/s); unset ones (a device without a second tier) left out."""
    from armillary.search.systems import DIMENSION  # the search modules load only for search reports

    unit = {**DESIGN_UNITS, **{k: GIGA for k in p.values if k.startswith(DIMENSION)}}
    return {k: v / unit[k] if k in unit else v for k, v in p.values.items() if v is not None}


# The heading of each system parameter of a co-design point, in its reporting unit (`DESIGN_UNITS`).
DESIGN_NAMES: dict[str, str] = {
    "gpus": "GPUs", "hbm_capacity": "HBM GiB", "hbm_bandwidth": "HBM GB/s", "tier2_capacity": "tier 2 GiB",
    "tier2_bandwidth": "tier 2 GB/s", "scale_up_bandwidth": "scale-up GB/s", "scale_out_bandwidth": "scale-out GB/s",
    "devices_per_node": "per node"}


def design_name(key: str) -> str:
    """A system parameter's heading: "scale-up GB/s", or "NAME GB/s" for a network dimension's bandwidth."""
    from armillary.search.systems import DIMENSION

    return f"{key[len(DIMENSION):]} GB/s" if key.startswith(DIMENSION) else DESIGN_NAMES.get(key, key)


def varied_axes(designs: CoDesignResult) -> list[str]:
    """The system parameters the co-design varied: those that take more than one value over its points."""
    values = [design_values(p) for p in designs.points]
    keys = dict.fromkeys(k for v in values for k in v)
    return [k for k in keys if len({repr(v.get(k)) for v in values}) > 1]


def design_label(p: DesignPoint, axes: list[str]) -> str:
    """A co-design point by the values of the varied `axes` ("64 GPUs, 80 GiB HBM, 900 GB/s scale-up"); no
    axis varied: its GPUs and HBM."""
    v = design_values(p)

    def shown(k: str) -> str:
        if k in ("gpus", "devices_per_node"):
            return f"{v[k]:,.0f} {design_name(k)}"
        name, unit = design_name(k).rsplit(" ", 1)
        return f"{v[k]:,.0f} {unit} {name}"

    return ", ".join(shown(k) for k in (axes or ["gpus", "hbm_capacity"]) if k in v)


def codesign_rows(designs: CoDesignResult) -> list[dict[str, Any]]:
    """Per system: its parameters, cost, power, step time, whether on the front, and its best strategy."""
    from armillary.search.run import candidate_row

    return [{**design_values(p), "cost_usd": p.cost, "power_w": p.power, "step_time_s": p.step_time_s,
             "pareto": i in designs.pareto, "tokens_per_s_per_dollar": p.tokens_per_s_per_dollar,
             "tokens_per_joule": p.tokens_per_joule, "strategy": candidate_row(p.best) if p.best else None}
            for i, p in enumerate(designs.points)]


def codesign_best(designs: CoDesignResult, budget: float | None) -> dict[str, DesignPoint | None]:
    """The best system by each goal (costing at most `budget` dollars)."""
    from armillary.search.systems import DesignGoal

    return {goal.value: designs.best(goal, budget) for goal in DesignGoal}


def codesign_record(designs: CoDesignResult, budget: float | None) -> dict[str, Any]:
    """The systems, and the best by each goal as a position in them. Dump with `default=str`."""
    position = {id(p): i for i, p in enumerate(designs.points)}
    return {"systems": codesign_rows(designs), "strategies_evaluated": designs.strategies_evaluated,
            "budget_usd": budget,
            "best": {k: position[id(p)] if p else None for k, p in codesign_best(designs, budget).items()}}


def simulation_record(result: SimulationResult, symmetric: bool) -> dict[str, Any]:
    """A simulated training iteration against the estimate; `symmetric`: one rank per stage was run."""
    return {"step_time_s": result.step_time_s, "estimate_step_time_s": float(result.estimate.step_time_s),
            "difference": result.difference, "schedule": result.schedule.value, "symmetric": symmetric,
            "ranks": result.graph.ranks, "devices": result.graph.devices, "tasks": len(result.graph.tasks),
            "events": result.timeline.events, "wall_s": result.wall_s, "engine_s": result.engine_s,
            "critical_path": {f.name: getattr(result.on_critical_path, f.name)
                              for f in fields(result.on_critical_path)},
            "critical_path_tasks": len(result.critical_path),
            "busiest_rank": result.graph.rank_labels[result.busiest_rank],
            "busiest_compute_s": result.busiest_compute_s,
            "routed_uplinks": 0 if result.graph.routes is None else len(result.graph.routes.capacity)}


def inference_simulation_rows(sim: InferenceSimulation) -> tuple[tuple[str, float, float], ...]:
    """(metric, simulated s, analytical s) of a simulated static batch."""
    est = sim.estimate
    return (("time to first token", sim.ttft_s, float(est.ttft_s)),
            ("time per output token", sim.tpot_s, float(est.tpot_s)), ("end to end", sim.e2e_s, float(est.e2e_s)))


def inference_simulation_record(sim: InferenceSimulation) -> dict[str, Any]:
    return {name.replace(" ", "_"): {"simulated_s": a, "analytical_s": b}
            for name, a, b in inference_simulation_rows(sim)} | {"tasks": len(sim.graph.tasks)}


def traces_record(graph: TaskGraph, timeline: Timeline) -> dict[str, Any]:
    """Simulated Chakra traces: ranks, tasks, step time."""
    return {"ranks": graph.ranks, "tasks": len(graph.tasks), "step_time_s": timeline.makespan_s}


def comm_records(calls: tuple[CommCall, ...]) -> list[dict[str, Any]]:
    return [plain(asdict(c)) for c in calls]


def validation_records(results: list[RowResult]) -> list[dict[str, Any]]:
    return [asdict(r) for r in results]


def sweep_records(rows: list[SweepRow]) -> list[dict[str, Any]]:
    return [asdict(r) for r in rows]
