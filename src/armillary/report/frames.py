"""Results as pandas DataFrames for notebooks (pandas is optional: `pip install 'armillary[pandas]'`). One row per
configuration of an estimate (a numpy sweep gives one row per point), per top strategy of a search, per
request of a served stream, per point of a what-if sweep; nested figures become dotted columns
(`breakdown.dp_exposed`, `memory.hbm.weights`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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


def to_frame(result: Any) -> pd.DataFrame:
    """A DataFrame of a StepEstimate, InferenceEstimate, SearchResult, InferenceSearchResult, ServingResult
    or Sweep."""
    try:
        import pandas as pd
    except ImportError:
        raise MissingExtra("to_frame", "pandas", "pandas") from None
    from armillary.report import records
    from armillary.search.inference import InferenceSearchResult
    from armillary.search.run import SearchResult
    from armillary.search.sweep import Sweep
    from armillary.serving.run import ServingResult

    if isinstance(result, SearchResult):
        return pd.DataFrame([_flat(r) for r in records.search_rows(result)])
    if isinstance(result, InferenceSearchResult):
        return pd.DataFrame(records.inference_search_rows(result))
    if isinstance(result, ServingResult):
        return pd.DataFrame(records.request_rows(result))
    if isinstance(result, Sweep):
        from armillary.report.compare import sweep_record

        return pd.DataFrame([_flat(p) for p in sweep_record(result)["points"]])
    if hasattr(result, "to_dict") and hasattr(result, "feasible"):
        data = result.to_dict()
        data.pop("communication", None)  # a list of calls: records.comm_records, a frame of its own
        return pd.DataFrame(_rows(_flat(data)))
    raise TypeError(f"to_frame: no table for {type(result).__name__}")

