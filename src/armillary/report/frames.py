"""Results as pandas DataFrames for notebooks (pandas is optional: `pip install 'armillary[pandas]'`). One row per
configuration of an estimate (a numpy sweep gives one row per point), per compared result, per top strategy of a
search, per system of a co-design, per request of a served stream, per rate a max-rate search tried, per point of
a what-if sweep, per item of a list of results (`collective` sizes, `validate` rows); nested figures become
dotted columns (`breakdown.dp_exposed`, `memory.hbm.weights`). A result that carries its inputs (`config`, set by
`armillary.api`) adds them as columns: model, system, devices, `strategy.*`, `workload.*`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

from armillary.errors import MissingExtra

if TYPE_CHECKING:
    import pandas as pd


def _flat(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _rows(flat: dict[str, Any]) -> list[dict[str, Any]]:
    """One row, or one per point when the numbers are lists of one length (a sweep)."""
    lengths = {len(v) for k, v in flat.items() if isinstance(v, list) and k != "infeasible_reasons"
               and k != "notes" and v and not isinstance(v[0], str)}
    if len(lengths) != 1:
        return [flat]
    n = lengths.pop()
    return [{k: (v[i] if isinstance(v, list) and len(v) == n and k not in ("infeasible_reasons", "notes") else v)
             for k, v in flat.items()} for i in range(n)]


def _config(result: Any) -> dict[str, Any]:
    config = getattr(result, "config", None)
    return {} if config is None else config.columns()


def _strategy(strategy: Any) -> dict[str, Any]:
    return _flat(strategy.model_dump(mode="json"), "strategy.")


def _plain(value: Any) -> Any:
    """A dataclass's fields as a flat mapping of scalars (arrays of one value as floats; larger arrays, task
    graphs and timelines left out)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for f in dataclasses.fields(value):
            inner = _plain(getattr(value, f.name))
            if isinstance(inner, dict):
                out.update({f"{f.name}.{k}": v for k, v in inner.items()})
            elif inner is not None or getattr(value, f.name) is None:
                out[f.name] = inner
        return out
    if isinstance(value, np.ndarray | np.generic):
        return value.item() if np.size(value) == 1 else None
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    if isinstance(value, tuple) and all(isinstance(v, str | int | float) for v in value) and len(value) <= 16:
        return ", ".join(map(str, value))
    if hasattr(value, "value") and isinstance(value.value, str | int):  # an enum
        return value.value
    return None


def _table(result: Any) -> list[dict[str, Any]]:
    from armillary.estimate.compare import Comparison
    from armillary.report import records
    from armillary.search.inference import InferenceSearchResult
    from armillary.search.run import SearchResult, candidate_row
    from armillary.search.sweep import Sweep
    from armillary.search.systems import CoDesignResult
    from armillary.serving.rate import MaxRate
    from armillary.serving.run import ServingResult
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult

    if isinstance(result, SearchResult):
        return [{**_flat(candidate_row(c)), **_strategy(c.strategy)} for c in result.top]
    if isinstance(result, InferenceSearchResult):
        return [{**row, **_strategy(c.strategy)}
                for row, c in zip(records.inference_search_rows(result), result.top, strict=True)]
    if isinstance(result, ServingResult):
        return [{**row, **_config(result)} for row in records.request_rows(result)]
    if isinstance(result, MaxRate):
        return [{"rate": p.rate, "seed": p.seed, "meets": p.meets, **dataclasses.asdict(p.latency)}
                for p in result.tried]
    if isinstance(result, Comparison):  # one row per compared result, a column per figure
        return [{"name": name, "feasible": result.feasible[i],
                 **{f"{row.section.value}.{row.name}": row.values[i] for row in result.rows}}
                for i, name in enumerate(result.names)]
    if isinstance(result, CoDesignResult):
        return [{**_flat(records.design_values(p), "system."), "cost_usd": p.cost, "power_w": p.power,
                 "pareto": i in result.pareto,
                 **(_flat(candidate_row(p.best), "best.") if p.best else {})}
                for i, p in enumerate(result.points)]
    if isinstance(result, SimulationResult):
        return [{"step_time_s": result.step_time_s, "estimate.step_time_s": float(result.estimate.step_time_s),
                 "difference": result.difference, "schedule": result.schedule.value,
                 "busiest_rank": result.busiest_rank, "busiest_compute_s": result.busiest_compute_s,
                 **{f"critical_path.{k}": v for k, v in dataclasses.asdict(result.on_critical_path).items()},
                 "wall_s": result.wall_s, "engine_s": result.engine_s, **_config(result.estimate)}]
    if isinstance(result, InferenceSimulation):
        return [{"ttft_s": result.ttft_s, "tpot_s": result.tpot_s, "e2e_s": result.e2e_s,
                 "estimate.ttft_s": float(result.estimate.ttft_s), "estimate.tpot_s": float(result.estimate.tpot_s),
                 "wall_s": result.wall_s, **_config(result.estimate)}]
    if isinstance(result, Sweep):
        from armillary.report.compare import sweep_record

        return [_flat(p) for p in sweep_record(result)["points"]]
    if hasattr(result, "to_dict") and hasattr(result, "feasible"):  # StepEstimate, InferenceEstimate
        data = result.to_dict()
        data.pop("communication", None)  # a list of calls: records.comm_records, a frame of its own
        return [{**row, **_config(result)} for row in _rows(_flat(data))]
    if isinstance(result, list | tuple) and result and all(dataclasses.is_dataclass(r) for r in result):
        return [_plain(r) for r in result]  # collective sizes (SweepRow), validate rows (RowResult)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):  # one result: its scalars
        return [_plain(result)]
    raise TypeError(f"to_frame: no table for {type(result).__name__}")


def to_frame(result: Any) -> pd.DataFrame:
    """A DataFrame of any result of `armillary.api`: StepEstimate / InferenceEstimate (one row, or one per
    point of a sweep), Comparison (a row per compared result), SearchResult / InferenceSearchResult (a row
    per top strategy), CoDesignResult (a row per system), ServingResult (a row per request), MaxRate (a row
    per rate tried), SimulationResult / InferenceSimulation (simulated against analytical), Sweep, or a list
    of SweepRow / RowResult. The inputs a result carries are columns (model, system, devices, strategy.*,
    workload.*)."""
    try:
        import pandas as pd
    except ImportError:
        raise MissingExtra("to_frame", "pandas", "pandas") from None
    return pd.DataFrame(_table(result))
