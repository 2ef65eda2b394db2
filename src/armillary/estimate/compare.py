"""Estimates side by side: each figure of two or more results (training iterations or static inference
batches) with its difference from the first, by breakdown component and memory category, with each one's
error band (and the calibration status it comes from) and, given the runs' systems and costs, energy and
price per token. Pure: results in, a frozen `Comparison` out; `report.compare` renders it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from armillary.display import Displayed, Headline, number
from armillary.errors import SpecError
from armillary.estimate.economics import Economics
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.result import StepEstimate


class ResultKind(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"


class Section(StrEnum):
    """Groups of compared figures: the headline numbers, where the time goes, memory per device, traffic."""

    SUMMARY = "summary"
    TIME = "time"  # training: the step-time breakdown
    PREFILL = "prefill"  # inference: the prompt pass by component
    DECODE = "decode"  # inference: all decode steps by component
    MEMORY = "memory"  # bytes per device (HBM; training also the second tier)
    TRAFFIC = "traffic"  # bytes each device sends per iteration, by network tier


class Unit(StrEnum):
    SECONDS = "s"
    BYTES = "B"
    FRACTION = "fraction"
    TOKENS_PER_S = "tokens/s"
    COUNT = "count"
    JOULES_PER_TOKEN = "J/token"
    USD_PER_MILLION_TOKENS = "$/1M tokens"


@dataclass(frozen=True)
class ComparedRow:
    """One figure of every compared result, in SI units (or a fraction, a count)."""

    section: Section
    name: str
    unit: Unit
    values: tuple[float, ...]

    @property
    def deltas(self) -> tuple[float, ...]:
        """Each value minus the first (the baseline): 0 for the baseline itself."""
        return tuple(v - self.values[0] for v in self.values)

    @property
    def ratios(self) -> tuple[float, ...]:
        """Each value over the first (nan where the baseline is 0)."""
        base = self.values[0]
        return tuple(v / base if base else math.nan for v in self.values)


@dataclass(frozen=True, repr=False)
class Comparison(Displayed):
    names: tuple[str, ...]  # one per result, the first is the baseline of the deltas
    kind: ResultKind
    feasible: tuple[bool, ...]
    infeasible_reasons: tuple[tuple[str, ...], ...]
    rows: tuple[ComparedRow, ...]
    bands: tuple[str, ...] = ()  # each result's error band and the regime it was drawn from (calibration status)

    def headline(self) -> Headline:
        """Each run's first summary figure and band, and whether it fits."""
        first = self.rows[0] if self.rows else None
        runs = [(name, f"{number(first.values[i])} {first.unit.value}" if first else "")
                for i, name in enumerate(self.names)]
        return [("kind", self.kind.value), *runs, ("feasible", ", ".join("yes" if f else "no" for f in self.feasible))]

    def section(self, section: Section) -> tuple[ComparedRow, ...]:
        return tuple(r for r in self.rows if r.section is section)

    def row(self, section: Section, name: str) -> ComparedRow:
        for r in self.rows:
            if r.section is section and r.name == name:
                return r
        raise KeyError(f"{section.value}/{name}")


Result = StepEstimate | InferenceEstimate


def compare(results: Sequence[tuple[str, Result]], economics: Sequence[Economics | None] = ()) -> Comparison:
    """Two or more named results of one kind (all training or all inference) side by side. `economics`, one
    per result where given (`estimate.economics`), adds energy and price per token (nan where unknown: a
    device without a board power, a run without a price)."""
    if len(results) < 2:
        raise SpecError(f"compare: give two or more runs, got {len(results)}")
    kinds = [ResultKind.TRAINING if isinstance(r, StepEstimate) else ResultKind.INFERENCE for _, r in results]
    if len(set(kinds)) > 1:
        listed = ", ".join(f"{name} is {k.value}" for (name, _), k in zip(results, kinds, strict=True))
        raise SpecError(f"compare: the runs must all be training or all inference ({listed})")
    names = tuple(name for name, _ in results)
    if len(set(names)) < len(names):
        raise SpecError(f"compare: run names must differ, got {', '.join(names)}")
    per_result = [_training_rows(r) if isinstance(r, StepEstimate) else _inference_rows(r) for _, r in results]
    if economics:
        if len(economics) != len(results):
            raise SpecError(f"compare: one economics per run, got {len(economics)} for {len(results)} runs")
        per_result = [[*rs, *_economics_rows(e)] for rs, e in zip(per_result, economics, strict=True)]
    rows = tuple(ComparedRow(section, name, unit, tuple(float(rs[i][3]) for rs in per_result))
                 for i, (section, name, unit, _) in enumerate(per_result[0]))
    bands = tuple(r.error_band.describe() if r.error_band is not None else "no band" for _, r in results)
    return Comparison(names, kinds[0], tuple(bool(r.feasible) for _, r in results),
                      tuple(tuple(r.infeasible_reasons) for _, r in results), rows, bands)


_Row = tuple[Section, str, Unit, float]


def _components(section: Section, obj: Any, unit: Unit) -> list[_Row]:
    """A row per field of a breakdown dataclass, and its total."""
    rows = [(section, f.name, unit, float(getattr(obj, f.name))) for f in fields(obj)]
    return [*rows, (section, "total", unit, float(obj.total))]


def _band(r: Result) -> float:
    """The result's error band (+- this share of the figure; nan where none was attached)."""
    return r.error_band.relative if r.error_band is not None else math.nan


def _economics_rows(e: Economics | None) -> list[_Row]:
    def value(x: Any) -> float:
        return math.nan if e is None or x is None else float(x)

    return [(Section.SUMMARY, "joules_per_token", Unit.JOULES_PER_TOKEN, value(e and e.joules_per_token)),
            (Section.SUMMARY, "usd_per_million_tokens", Unit.USD_PER_MILLION_TOKENS,
             value(e and e.usd_per_million_tokens))]


def _training_rows(r: StepEstimate) -> list[_Row]:
    s = Section.SUMMARY
    rows: list[_Row] = [(s, "step_time", Unit.SECONDS, float(r.step_time_s)),
                        (s, "tokens_per_s", Unit.TOKENS_PER_S, float(r.tokens_per_s)),
                        (s, "mfu", Unit.FRACTION, float(r.mfu)), (s, "hfu", Unit.FRACTION, float(r.hfu)),
                        (s, "microbatches", Unit.COUNT, float(r.microbatches)),
                        (s, "error_band", Unit.FRACTION, _band(r))]
    rows += _components(Section.TIME, r.breakdown, Unit.SECONDS)
    rows += [(Section.MEMORY, f"hbm_{name}", unit, v) for _, name, unit, v in
             _components(Section.MEMORY, r.memory_hbm, Unit.BYTES)]
    rows.append((Section.MEMORY, "hbm_capacity", Unit.BYTES, float(r.hbm_capacity_bytes)))
    rows.append((Section.MEMORY, "tier2_total", Unit.BYTES, float(r.memory_tier2.total)))
    rows += [(Section.TRAFFIC, "scale_up", Unit.BYTES, float(r.traffic.scale_up_bytes)),
             (Section.TRAFFIC, "scale_out", Unit.BYTES, float(r.traffic.scale_out_bytes))]
    return rows


def _inference_rows(r: InferenceEstimate) -> list[_Row]:
    s = Section.SUMMARY
    rows: list[_Row] = [(s, "ttft", Unit.SECONDS, float(r.ttft_s)), (s, "tpot", Unit.SECONDS, float(r.tpot_s)),
                        (s, "e2e", Unit.SECONDS, float(r.e2e_s)),
                        (s, "output_tokens_per_s", Unit.TOKENS_PER_S, float(r.output_tokens_per_s)),
                        (s, "output_tokens_per_s_per_device", Unit.TOKENS_PER_S,
                         float(r.output_tokens_per_s_per_device)),
                        (s, "max_batch", Unit.COUNT, float(r.max_batch)),
                        (s, "error_band", Unit.FRACTION, _band(r))]
    rows += _components(Section.PREFILL, r.prefill, Unit.SECONDS)
    rows += _components(Section.DECODE, r.decode, Unit.SECONDS)
    m = Section.MEMORY
    rows += [(m, name, Unit.BYTES, float(getattr(r.memory, name)))
             for name in ("weights", "kv_cache", "activations", "kv_cache_tier2")]
    rows += [(m, "hbm_total", Unit.BYTES, float(r.memory.total)),
             (m, "hbm_capacity", Unit.BYTES, float(r.hbm_capacity_bytes))]
    return rows
