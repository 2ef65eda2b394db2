"""Run the measured rows of a validation CSV through the estimator and compare.

Each metric of the CSV maps to one quantity of the estimate (`metrics.read_metric`); the error is
predicted / measured - 1. Rows that cannot run say why instead of disappearing.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields, replace
from importlib import resources
from pathlib import Path

import numpy as np

from armillary.display import Displayed, Headline, number
from armillary.errors import SpecError
from armillary.estimate.feasibility import memory_fits
from armillary.estimate.result import StepEstimate
from armillary.estimate.run import estimate_training_run
from armillary.validation.collective_reading import best_of_runs, message_bytes
from armillary.validation.collective_rows import SMALL_MESSAGE_BYTES, predict_collective
from armillary.validation.inference_rows import predict_inference
from armillary.validation.metrics import read_metric
from armillary.validation.regressions import caveat_of
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import RowSpecs, row_specs
from armillary.validation.vocabulary import OFFLINE_LOAD, kind_of
from armillary.writing import replaced

DEFAULT_CSV = Path(str(resources.files("armillary.validation") / "data" / "measurements.csv"))


@dataclass(frozen=True, repr=False)
class RowResult(Displayed):
    id: str
    group: str  # source group: the id without its running number
    metric: str
    measured: float
    predicted: float | None
    error: float | None  # predicted / measured - 1
    assumptions: tuple[str, ...]
    skipped: str | None = None  # why the row was not run
    feasible: bool = True
    caveat: str | None = None  # what the stack's issue tracker says about the published run (`regressions`)

    def headline(self) -> Headline:
        outcome = (f"skipped: {self.skipped}" if self.skipped else
                   f"{number(self.predicted)} vs {number(self.measured)} measured ({self.error:+.1%})"
                   if self.error is not None and self.predicted is not None else "-")
        return [("id", self.id), ("metric", self.metric), ("result", outcome)]


def source_group(row_id: str) -> str:
    parts = row_id.split("-")
    return "-".join(parts[:3]) if len(parts) > 3 else "-".join(parts[:-1]) or row_id


def _size_or_none(row: dict[str, str]) -> int | None:
    """The row's message size ("1G", "128M", "8 B", "2^30": `collective_reading.message_bytes`), None where
    unreadable (`predict_collective` then refuses it, naming what it reads first)."""
    try:
        return message_bytes(row)
    except Unsupported:
        return None


def _run_collective_row(row: dict[str, str]) -> RowResult:
    measured, in_place = best_of_runs(row, float(row["value"]))
    group = source_group(row["id"])
    try:
        size = _size_or_none(row)
        if size is not None and size < SMALL_MESSAGE_BYTES:
            group += " <1MiB"
        label, predicted, notes = predict_collective(row)
    except Unsupported as why:
        return RowResult(row["id"], group, row.get("metric", ""), measured, None, None, (), skipped=str(why))
    if in_place:
        notes = (*notes, f"measured: the in-place run, faster than the out-of-place {float(row['value']):g}")
    return RowResult(row["id"], group, label, measured, predicted, predicted / measured - 1, notes)


def _run_inference_row(row: dict[str, str]) -> RowResult:
    """Inference rows group by source, metric and GPU (throughput and first-token latency differ in kind)."""
    measured = float(row["value"])
    kind = "first token" if "token latency" in row.get("metric", "").lower() else "throughput"
    gpu = "H100" if "h100" in row.get("gpu", "").lower() else "A100" if "a100" in row.get("gpu", "").lower() else ""
    group = f"{source_group(row['id'])} {kind} {gpu}".strip()
    try:
        label, predicted, notes, result = predict_inference(row)
    except (Unsupported, ValueError) as why:
        return RowResult(row["id"], group, row.get("metric", ""), measured, None, None, (), skipped=str(why))
    if not result.feasible:
        notes = (*notes, "infeasible as configured: " + "; ".join(result.infeasible_reasons))
    return RowResult(row["id"], group, label, measured, predicted, predicted / measured - 1, notes,
                     feasible=result.feasible)


def is_serving_row(row: dict[str, str]) -> bool:
    """A benchmark of a server under load: an "SRV-" id, or a client that sends requests at a rate, a
    concurrency or a prompt count (a static batch states only its size)."""
    client = row.get("batch_or_concurrency", "")
    static = re.fullmatch(r"\s*\d+\s*", client) or re.search(r"static batch", row.get("framework", ""), re.I)
    # MLPerf's "Offline tokens per second" / "Server completed tokens per second": a scenario, not a batch
    scenario = not static and re.search(r"\boffline\b|max[- ]?load|\bserver\b", row.get("metric", ""), re.I)
    return row.get("id", "").startswith("SRV-") or bool(scenario) or bool(
        re.search(rf"concurren|req(uest)?s?\s*/\s*s|request[-_ ]rate|\bqps\b|prompts|{OFFLINE_LOAD}", client, re.I))


def _run_serving_row(row: dict[str, str]) -> RowResult:
    """A serving-under-load row: a simulated engine benchmark, grouped by source and engine."""
    measured = float(row["value"])
    group = "-".join(row["id"].split("-")[:2])  # SRV-VLLM, SRV-SGLANG, ...
    try:
        from armillary.validation.serving_rows import simulate_serving_row  # the serving kernels: on first use

        metric, predicted, notes, _ = simulate_serving_row(row)
    except (Unsupported, ValueError) as why:
        return RowResult(row["id"], group, row.get("metric", ""), measured, None, None, (), skipped=str(why))
    return RowResult(row["id"], group, metric.label, measured, predicted, predicted / measured - 1, notes)


def _run_memory_row(row: dict[str, str]) -> RowResult:
    """A measured peak memory per GPU of a training configuration (`memory_rows`), grouped by source."""
    from armillary.validation.memory_rows import predict_memory

    measured, group = float(row["value"]), source_group(row["id"])
    try:
        p = predict_memory(row)
    except Unsupported as why:
        return RowResult(row["id"], group, row.get("metric", ""), measured, None, None, (), skipped=str(why))
    except ValueError as err:
        return RowResult(row["id"], group, row.get("metric", ""), measured, None, None, (),
                         skipped=f"invalid configuration: {err}")
    return RowResult(row["id"], group, p.label, measured, p.predicted, p.predicted / measured - 1, p.notes,
                     feasible=p.feasible)


def run_row(row: dict[str, str]) -> RowResult:
    """A row run or skipped, with what its stack's tracker says about the published run (`caveat`)."""
    result = _run_row(row)
    caveat = caveat_of(result.id)
    return result if caveat is None else replace(result, caveat=caveat)


def _run_row(row: dict[str, str]) -> RowResult:
    # "Training", "pre-training", "serving", "nccl-tests": the harness's kind (`vocabulary.kind_of`)
    row = {**row, "kind": kind_of(row.get("kind")) or row.get("kind", "")}
    try:
        value = float(row.get("value") or "nan")
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        return RowResult(row.get("id", "?"), source_group(row.get("id", "?")), row.get("metric", ""), math.nan,
                         None, None, (), skipped=f"no measured value: expected a positive number, got "
                                                 f"{row.get('value')!r}")
    if row.get("kind") == "collective":
        return _run_collective_row(row)
    if row.get("kind") == "memory":
        return _run_memory_row(row)
    if row.get("kind") == "inference" and is_serving_row(row):
        return _run_serving_row(row)
    if row.get("kind") == "inference":
        return _run_inference_row(row)
    measured = float(row["value"])
    row_id, group = row["id"], source_group(row["id"])
    try:
        if row.get("kind") != "training":
            raise Unsupported(f"{row.get('kind')} rows arrive with a later issue")
        metric = read_metric(row)
        candidates = row_specs(row)
    except Unsupported as why:
        return RowResult(row_id, group, row.get("metric", ""), measured, None, None, (), skipped=str(why))
    except ValueError as err:
        return RowResult(row_id, group, row.get("metric", ""), measured, None, None, (),
                         skipped=f"invalid configuration: {err}")
    result, chosen = choose_candidate(candidates)
    predicted = metric.read(result, chosen)
    notes = (*chosen.assumptions, *metric.assumptions)
    if not bool(result.feasible):
        notes = (*notes, "infeasible as configured: " + "; ".join(result.infeasible_reasons))
    return RowResult(row_id, group, metric.label, measured, predicted, predicted / measured - 1, notes,
                     feasible=bool(result.feasible))


def choose_candidate(candidates: list[RowSpecs]) -> tuple[StepEstimate, RowSpecs]:
    """The row's configuration to report, with its estimate: the least recomputation that is feasible,
    else (a layout the estimator cannot split exactly) the first whose memory fits, else the last."""
    results = []
    for rs in candidates:
        result = estimate_training_run(rs.model, rs.system, rs.strategy, rs.workload)
        results.append((result, rs))
        if bool(result.feasible):
            break
    fits = [(r, rs) for r, rs in results if bool(r.feasible) or all(
        bool(ok) for ok in memory_fits(rs.system, r.memory_hbm.total, r.memory_tier2.total))]
    return fits[0] if fits else results[-1]


def write_csv(results: list[RowResult], path: Path | str) -> None:
    """Per-row results as CSV (assumptions joined with '; ')."""
    names = [f.name for f in fields(RowResult)]
    with replaced(Path(path)) as temporary, temporary.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(names)
        for r in results:
            out.writerow(["; ".join(v) if isinstance(v, tuple) else v for v in (getattr(r, n) for n in names)])


def read_rows(path: Path | str = DEFAULT_CSV) -> list[dict[str, str]]:
    if not isinstance(path, str | Path) or not Path(path).is_file():
        raise SpecError(f"validation file {path!r}: no such file")
    try:
        with Path(path).open(newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as err:
        raise SpecError(f"{path}: not a readable CSV file ({err})") from None


def validate(path: Path | str = DEFAULT_CSV,
             kinds: Iterable[str] = ("training", "inference", "collective", "memory"),
             progress: Callable[[list[dict[str, str]]], Iterable[dict[str, str]]] = iter) -> list[RowResult]:
    """Every row of `kinds` in the CSV, run or skipped with the reason. `progress` wraps the row loop
    (the CLI passes a progress bar)."""
    known = ("training", "inference", "collective", "memory")
    if isinstance(kinds, str | bytes) or not isinstance(kinds, Iterable) or not set(kinds) <= set(known):
        raise SpecError(f"kinds: expected some of {', '.join(known)}, got {kinds!r}")
    wanted = set(kinds)
    rows = [r for r in read_rows(path) if (kind_of(r.get("kind")) or r.get("kind", "")) in wanted]
    return [run_row(r) for r in progress(rows)]


@dataclass(frozen=True)
class GroupSummary:
    group: str
    rows: int
    run: int
    mean_abs_error: float
    max_abs_error: float


def summarize(results: list[RowResult]) -> list[GroupSummary]:
    groups: dict[str, list[RowResult]] = {}
    for r in results:
        groups.setdefault(r.group, []).append(r)
    out = []
    for g, rs in groups.items():
        errs = np.array([abs(r.error) for r in rs if r.error is not None])
        out.append(GroupSummary(g, len(rs), len(errs), float(errs.mean()) if len(errs) else float("nan"),
                                float(errs.max()) if len(errs) else float("nan")))
    return out
