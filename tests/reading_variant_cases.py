"""What the reworded-row tests share (tests/test_reading_variants_round*.py): the readers that build a row's
specification and read its metric on fixed stand-in estimates, a case (class of wording, row, changed columns,
expectation), and `outcome`, which judges one case: "right" (the expected reading or refusal), "refused" (a
refusal where a reading is right), "MISREAD" (a different reading without refusing) or "CRASH"."""

from __future__ import annotations

import collections
import functools
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest

from armillary.validation.collective_rows import predict_collective
from armillary.validation.inference_rows import inference_row_specs, read_inference_metric
from armillary.validation.memory_rows import measure_of, unit_bytes
from armillary.validation.metrics import read_metric
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import DEFAULT_CSV, read_rows
from armillary.validation.serving_metrics import read_serving_metric
from armillary.validation.serving_rows import serving_row_specs


@functools.cache
def _rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_rows(DEFAULT_CSV)}


def _model(m: Any) -> dict[str, Any]:
    out: dict[str, Any] = m.model_dump()
    for k in ("name", "sources", "aliases"):
        out.pop(k, None)
    return out


# stand-ins for the estimates: the metric readers only scale and pick their fields
_PASS = SimpleNamespace(time_s=0.01)
_STEP = SimpleNamespace(step_time_s=2.0, tokens_per_s=12345.0, model_flop=3e18, hardware_flop=4e18, mfu=0.41, hfu=0.52,
                        layer=SimpleNamespace(total_s=0.05, forward=_PASS, backward_input=_PASS, backward_weight=_PASS),
                        moe_layer=None, breakdown=SimpleNamespace(forward_backward=1.5))


def _latency(mean: float) -> SimpleNamespace:
    return SimpleNamespace(mean=mean, p50=0.9 * mean, p90=1.5 * mean, p99=2.0 * mean)


_SERVED = SimpleNamespace(ttft_s=_latency(0.2), tpot_s=_latency(0.03), e2e_s=_latency(9.0), itl_mean_s=0.031,
                          output_tokens_per_s=5000.0, total_tokens_per_s=9000.0, requests_per_s=3.0, devices=8,
                          times=None)
_STATIC = SimpleNamespace(output_tokens_per_s_per_device=777.0, ttft_s=0.123)


def training(row: dict[str, str]) -> tuple[Any, ...]:
    metric = read_metric(row)
    specs = row_specs(row)
    return (metric.label, metric.read(_STEP, specs[0]),  # type: ignore[arg-type]
            tuple((_model(s.model), s.system, s.strategy, s.workload) for s in specs))


def serving(row: dict[str, str]) -> tuple[Any, ...]:
    metric = read_serving_metric(row)
    s = serving_row_specs(row)
    return (metric.label, metric.read(_SERVED), (_model(s.model), s.system, s.strategy,  # type: ignore[arg-type]
                                                 s.workload, s.engine, s.benchmark))


def static(row: dict[str, str]) -> tuple[Any, ...]:
    s = inference_row_specs(row)
    label, read = read_inference_metric(row)
    return label, read(_STATIC, s), (_model(s.model), s.system, s.strategy, s.workload)  # type: ignore[arg-type]


def collective(row: dict[str, str]) -> tuple[Any, ...]:
    return (predict_collective(row),)


def memory(row: dict[str, str]) -> tuple[Any, ...]:
    return (unit_bytes(row),)


def measured(row: dict[str, str]) -> tuple[Any, ...]:
    """The measured value the runner takes from the value column; a value it cannot take skips the row, which
    is a refusal naming the column."""
    value = row.get("value", "")
    try:
        number = float(value)
    except ValueError:
        raise Unsupported(f"value: {value!r} is not a number") from None
    return (number,)


_READ: dict[str, Callable[[dict[str, str]], tuple[Any, ...]]] = {
    "training": training, "serving": serving, "static": static, "collective": collective, "memory": memory,
    "measure": lambda row: (measure_of(row),), "value": measured}

SAME = "same"  # the original row's reading


@dataclass(frozen=True)
class Case:
    cls: str  # the class of wording: column and kind
    kind: str  # which reader: training, serving, static, collective, memory
    row: str  # the shipped row reworded ("" for a memory unit alone)
    change: tuple[tuple[str, str], ...]
    # SAME; "refuse:<column>" (a refusal naming the column); ("scale", k): the metric's value k times the
    # original's, its specification the same; ("label", prefix, value): the metric read as `prefix` with `value`;
    # ("check", fn): fn(reading) holds
    expect: Any

    def reworded(self) -> dict[str, str]:
        base = dict(_rows()[self.row]) if self.row else {}
        return {**base, **dict(self.change)}

    def __str__(self) -> str:
        return f"{self.cls}|{self.row}|" + "|".join(v for _, v in self.change)


def _c(cls: str, kind: str, row: str, expect: Any, **change: str) -> Case:
    return Case(cls, kind, row, tuple(change.items()), expect)


def _precision_is(value: str) -> Callable[[tuple[Any, ...]], bool]:
    return lambda r: all(spec[2].precision.value == value for spec in r[2])


def _inference_formats(weights: str | None, kv: str | None) -> Callable[[tuple[Any, ...]], bool]:
    """The static reading's weight and KV-cache precisions (None: 16-bit, as the strategy's precision)."""
    return lambda r: (r[2][3].weights, r[2][3].kv_cache.precision) == (weights, kv)


def _equal_specs(base: tuple[Any, ...], new: tuple[Any, ...]) -> bool:
    return new[2:] == base[2:]


def _quantity(label: str) -> str:
    """A metric's label without its unit: "time to train [h] (...)" and "model PFLOP/s per GPU" name the same
    quantity as "time to train [min] (...)" and "model TFLOP/s per GPU"."""
    return re.sub(r"\[[^\]]*\]", "", re.sub(r"\b[GTPE]FLOP", "FLOP", label.split(" (in ")[0]))


def outcome(case: Case) -> tuple[str, str]:
    """("right" | "refused" | "MISREAD" | "CRASH", what was read or the refusal)."""
    read = _READ[case.kind]
    try:
        new = read(case.reworded())
    except Unsupported as why:
        said = str(why)
        expect = case.expect
        if isinstance(expect, str) and expect.startswith("refuse:"):
            return ("right" if said.startswith(expect.removeprefix("refuse:")) else "refused"), said
        if isinstance(expect, re.Pattern):
            return ("right" if expect.match(said) else "refused"), said
        return ("right" if expect == ("differ",) else "refused"), said
    except Exception as err:  # a crash is an outcome to count
        return "CRASH", f"{type(err).__name__}: {err}"
    expect = case.expect
    said = repr(new[:2])[:160]
    if expect == SAME:
        return ("right" if new == read(dict(_rows()[case.row])) else "MISREAD"), said
    if isinstance(expect, (str, re.Pattern)):  # a refusal was right
        return "MISREAD", said
    if expect[0] == "scale":
        base = read(dict(_rows()[case.row]))
        ok = _quantity(new[0]) == _quantity(base[0]) and new[1] == pytest.approx(base[1] * expect[1], rel=1e-9)
        return ("right" if ok and _equal_specs(base, new) else "MISREAD"), said
    if expect[0] == "label":
        ok = new[0].startswith(expect[1]) and new[1] == pytest.approx(expect[2], rel=1e-9)
        return ("right" if ok else "MISREAD"), said
    if expect[0] == "value":
        return ("right" if new[0] == expect[1] else "MISREAD"), said
    if expect[0] == "differ":
        return ("MISREAD" if new == read(dict(_rows()[case.row])) else "right"), said
    if expect[0] == "check":
        return ("right" if expect[1](new) else "MISREAD"), said
    raise AssertionError(expect)


def report(cases: list[Case]) -> None:
    """Counts per class of wording (`python tests/test_reading_variants_roundN.py [-v]`; with another tree's src on
    PYTHONPATH, its before)."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    examples: dict[str, list[str]] = collections.defaultdict(list)
    for case in cases:
        result, said = outcome(case)
        counts[case.cls][result] += 1
        if result != "right":
            examples[case.cls].append(f"  {result}: {case} -> {said[:160]}")
    total: collections.Counter[str] = collections.Counter()
    for cls, c in counts.items():
        total.update(c)
        print(f"{cls:24s} " + " ".join(f"{k}={v}" for k, v in sorted(c.items())))
    print("TOTAL", dict(total), "cases", len(cases))
    if "-v" in sys.argv:
        for cls, lines in examples.items():
            print(cls)
            print("\n".join(lines))
