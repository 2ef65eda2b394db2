"""An error band on every prediction (a training step, a static inference batch, a served request stream),
from the validation residuals of its regime.

The regime of a configuration is what the residuals depend on most: what is predicted (training, static
batch or serving under load, never mixed), whether the device's efficiency curves were calibrated on
measurements, fp4, fp8 or 16-bit GEMMs, dense or mixture-of-experts, parameters sharded (ZeRO-3 / FSDP) or not,
the scale, and for serving the engine. The band is the 80% split-conformal quantile of |error| over the
shipped residuals of that regime (`band_quantile`: the ceil(0.8 (n + 1))-th smallest of n, so that a new row
falls inside at least 80% of the time, where the interpolated 80th percentile of a few rows covers less);
where a regime has fewer than `MIN_ROWS` rows it is coarsened (scale first, then
sharding, precision, MoE, calibration, engine), and the band says which regime it used.

Two pools of residuals feed it. The in-sample pool is every row as the model predicts it now (the mechanisms
were written while looking at them). The out-of-sample pool is the first untouched run of each new batch of
rows (`validation/out_of_sample.py`): the only errors measured before anything was tuned on them. A regime's
band is the wider of the two pools' quantiles over the regime the in-sample band was drawn from, so
a regime where unseen rows erred more than the rows the model was tuned on prints the unseen error; and every
band of a workload is at least its in-sample band times how far that workload's first runs (of its scale, where
they are enough) landed beyond theirs (`unseen_inflation`), so that a source never seen meets a band drawn as a
new source would. A prediction that leaves the validated regime (a precision or an engine no row has, an
uncalibrated device) is widened, never narrowed.
`leave_one_source_out` measures how often the band covers a source's rows when that source is left out.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from armillary.estimate.result import ErrorBand
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy, ZeroStage
from armillary.specs.system import System
from armillary.specs.workload import Inference
from armillary.writing import replaced

RESIDUALS = Path(str(resources.files("armillary.validation") / "data" / "residuals.json"))
MIN_ROWS = 8
QUANTILE = 0.8
# a regime whose precision or engine no validation row has: its band is its parent's times this, per feature
# (a policy, not a fit: half as wide again as the nearest validated regime)
UNVALIDATED_WIDENING = 1.5
# features dropped in this order when a regime has too few rows (calibration is kept to the end)
_COARSENING = ("scale", "sharded", "precision", "moe", "calibrated", "engine")
# the fewest first-untouched-run rows in a regime whose quantile may widen its band: below 4 rows the conformal
# rank ceil(0.8 (n + 1)) lies past the largest, so no 80% claim can be drawn from them
MIN_UNSEEN = 4
# the fewest sources of first-untouched-run rows of a workload whose scores may widen all its bands
# (`unseen_inflation`), as collectives' BAND_MIN_SOURCES: one source's rows move together
MIN_UNSEEN_SOURCES = 2
TRAINING, STATIC_BATCH, SERVING = "training", "static batch", "serving"


@dataclass(frozen=True)
class Regime:
    calibrated: bool | None
    precision: str | None  # "fp8" or "16-bit"
    moe: bool | None
    sharded: bool | None  # ZeRO-3 / FSDP parameter sharding
    scale: str | None  # "<=64", "<=1024" or ">1024" devices
    workload: str = TRAINING  # TRAINING, STATIC_BATCH or SERVING: never coarsened away
    engine: str | None = None  # serving: the engine family (vllm, sglang, tensorrt-llm)

    def matches(self, other: Regime) -> bool:
        """Whether `other` (a residual's full regime) falls in this possibly coarsened regime."""
        theirs = other.__dict__
        return all(v is None or v == theirs[k] for k, v in self.__dict__.items())

    def describe(self) -> str:
        words = {"calibrated": ("calibrated device", "uncalibrated device"), "moe": ("MoE", "dense"),
                 "sharded": ("ZeRO-3/FSDP", "unsharded")}
        parts = [words[k][0 if v else 1] if k in words else f"{k} {v}" if k in ("scale", "engine") else str(v)
                 for k, v in asdict(self).items() if v is not None and v != TRAINING]
        return ", ".join(parts) or "all rows"


@dataclass(frozen=True)
class Residual:
    source: str
    regime: Regime
    error: float  # predicted / measured - 1
    out_of_sample: bool = False  # the first untouched run of a new batch (`validation/out_of_sample.py`)


def band_quantile(errors: Sequence[float], quantile: float = QUANTILE) -> float:
    """The band a pool of residuals gives: the ceil((n + 1) x `quantile`)-th smallest of n |errors| (the largest
    where that rank exceeds n), the split-conformal rank (Vovk, Gammerman & Shafer 2005; Lei et al., 'Distribution-
    free predictive inference for regression', JASA 2018, section 2.2): a new row exchangeable with the n falls
    inside with probability >= `quantile`. The interpolated percentile covers only (q (n - 1) + 1) / (n + 1) of
    new rows: 73% for the 80th of 8 rows, 76% of 16. Never narrower than the interpolated percentile."""
    ordered = np.sort(np.abs(np.asarray(errors, dtype=float)))
    rank = int(np.ceil((len(ordered) + 1) * quantile - 1e-9))
    return float(ordered[min(rank, len(ordered)) - 1])


def _scale(devices: int) -> str:
    return "<=64" if devices <= 64 else "<=1024" if devices <= 1024 else ">1024"


def _precision(*values: str) -> str:
    """The GEMM precision class: "fp4" (NVFP4 / MXFP4), "fp8" (incl. MXFP8) or "16-bit"."""
    words = " ".join(str(v).lower() for v in values)
    return "fp4" if "fp4" in words else "fp8" if "fp8" in words else "16-bit"


def regime_of(model: Model, system: System, strategy: Strategy) -> Regime:
    return Regime(calibrated=bool(system.device.calibrated_on),
                  precision=_precision(strategy.precision.value, strategy.block_format.value),
                  moe=model.moe is not None, sharded=strategy.zero >= ZeroStage.PARAMETERS,
                  scale=_scale(system.devices))


def inference_regime(model: Model, system: System, strategy: Strategy, workload: Inference,
                     engine: str | None = None) -> Regime:
    """A static batch (`engine` None) or a served stream on the engine family named (its profile's `family`:
    vllm, sglang, tensorrt-llm; generic: the generic scheduler)."""
    family = engine or None
    return Regime(calibrated=bool(system.device.calibrated_on),
                  precision=_precision(strategy.precision.value, strategy.block_format.value,
                                        workload.weights.value if workload.weights else ""),
                  moe=model.moe is not None, sharded=False, scale=_scale(system.devices),
                  workload=SERVING if engine else STATIC_BATCH, engine=family)


def band(regime: Regime, residuals: Sequence[Residual],
         inflation: Callable[[str | None], float] | None = None) -> ErrorBand:
    """The in-sample pool's band of `regime` (`_pool_band`), widened to the unseen rows' `band_quantile` where
    at least `MIN_UNSEEN` first untouched runs fall in the same (possibly coarsened) regime and erred more, to
    the in-sample band times its workload's `unseen_inflation` at the scale its pool kept (None where the pool
    was coarsened past the scale: then the workload's, so a sparse regime is never narrower than its parent;
    `inflation`: that factor by scale, else drawn from `residuals`), and by `UNVALIDATED_WIDENING` for each of
    its precision and engine that no residual of its workload has."""
    chosen, level = _pool_band(regime, [r for r in residuals if not r.out_of_sample], _COARSENING)
    factor = (unseen_inflation(regime.workload, residuals, regime.engine, level.scale) if inflation is None
              else inflation(level.scale))
    if factor > 1:
        chosen = replace(chosen, relative=chosen.relative * factor,
                         regime=f"{chosen.regime}; x{factor:.2f}: first-run rows of its kind erred that much beyond "
                                "their in-sample band")
    # unseen rows of another engine never widen this one's band, however far the in-sample band coarsened
    level = replace(level, engine=regime.engine)
    unseen = [abs(r.error) for r in residuals if r.out_of_sample and level.matches(r.regime)]
    if len(unseen) >= MIN_UNSEEN and (wider := band_quantile(unseen)) > chosen.relative:
        chosen = replace(chosen, relative=wider, regime=f"{chosen.regime}; widened to its {len(unseen)} rows "
                                                        "first run out of sample")
    unvalidated = [f"{'engine ' if k == 'engine' else ''}{getattr(regime, k)} never validated"
                   for k in ("precision", "engine")
                   if getattr(regime, k) is not None
                   and not any(getattr(r.regime, k) == getattr(regime, k) for r in residuals
                               if r.regime.workload == regime.workload)]
    if unvalidated:
        chosen = replace(chosen, relative=chosen.relative * UNVALIDATED_WIDENING ** len(unvalidated),
                         regime=f"{chosen.regime}; {', '.join(unvalidated)}: x{UNVALIDATED_WIDENING:g} each")
    return chosen


def unseen_inflation(workload: str, residuals: Sequence[Residual], engine: str | None = None,
                     scale: str | None = None) -> float:
    """How much further than their in-sample band the first untouched runs of a `workload` (for serving, on
    `engine`: one engine's first runs never widen another's band) erred: the `QUANTILE`
    split-conformal rank of |error| / band over its out-of-sample residuals, each row's band drawn from the
    in-sample rows of other sources (the normalised nonconformity score of split-conformal prediction: Lei et
    al., JASA 2018, section 5.2; Papadopoulos et al. 2008). An in-sample band is drawn from rows the mechanisms
    were written against; a new source lands further, and this is by how much. 1 (none) below `MIN_UNSEEN`
    rows or `MIN_UNSEEN_SOURCES` sources: one source's rows say how it scatters, not how the next lands.
    With a `scale`, the scores of that scale's first runs alone where they are that many, else the workload's:
    a Mondrian split by scale as by engine (Vovk, Gammerman & Shafer 2005, section 4.5: the coverage then holds
    within each category), so that first runs of 16,384 GPUs do not widen the band of 8."""
    unseen = [r for r in residuals if r.out_of_sample and r.regime.workload == workload and r.regime.engine == engine]
    if len(unseen) < MIN_UNSEEN or len({r.source for r in unseen}) < MIN_UNSEEN_SOURCES:
        return 1.0
    same_scale = [r for r in unseen if r.regime.scale == scale]
    if len(same_scale) >= MIN_UNSEEN and len({r.source for r in same_scale}) >= MIN_UNSEEN_SOURCES:
        unseen = same_scale
    tuned = [r for r in residuals if not r.out_of_sample]
    scores = []
    for source in {r.source for r in unseen}:
        others = [r for r in tuned if r.source != source]
        bands = {r.regime: _pool_band(r.regime, others, _COARSENING)[0].relative
                 for r in unseen if r.source == source}
        scores += [abs(r.error) / bands[r.regime] for r in unseen if r.source == source and bands[r.regime] > 0]
    return max(1.0, band_quantile(scores)) if scores else 1.0


def _pool_band(regime: Regime, residuals: Sequence[Residual], coarsening: tuple[str, ...]
               ) -> tuple[ErrorBand, Regime]:
    """The `band_quantile` of |error| of the residuals in `regime`, coarsened until MIN_ROWS rows match.
    Coarsening only widens: the band is never narrower than that of a sparser level on the way that had rows
    of its own (an uncalibrated MoE regime is not given the dense rows' narrower band). An uncalibrated
    device's band is never narrower than a calibrated device's in the same regime: its curves are a prior.
    Returns the band and the regime level whose rows it was drawn from."""
    current, relative, widened = regime, 0.0, ""
    rows: list[Residual] = []
    for feature in (None, *coarsening):
        if feature is not None:
            dropped: dict[str, Any] = {feature: None}
            current = replace(current, **dropped)
        rows = [r for r in residuals if current.matches(r.regime)]
        if rows:
            relative = max(relative, band_quantile([r.error for r in rows]))
        if current.calibrated is False:
            calibrated, _ = _pool_band(replace(current, calibrated=True), residuals, coarsening)
            if calibrated.relative > relative:
                relative, widened = calibrated.relative, f"; widened to calibrated devices' {calibrated.regime}"
        if len(rows) >= MIN_ROWS or feature == coarsening[-1]:
            break
    if not rows:
        relative = float("nan")
    described = current.describe() + widened
    return ErrorBand(relative=relative, regime=described, rows=len(rows),
                     sources=len({r.source for r in rows})), current


def leave_one_source_out(residuals: Sequence[Residual], out_of_sample: bool = False
                         ) -> dict[str, tuple[int, int]]:
    """Per full regime: (rows whose |error| lies inside the band computed without their source, rows), over
    the in-sample residuals, or (`out_of_sample`) over the first untouched runs."""
    out: dict[str, tuple[int, int]] = {}
    factors: dict[tuple[str, str, str | None, str | None], float] = {}  # per left-out source, workload, engine,
    # scale: drawn once
    for r in residuals:
        if r.out_of_sample != out_of_sample:
            continue
        others = [x for x in residuals if x.source != r.source]

        def factor(scale: str | None, r: Residual = r, others: list[Residual] = others) -> float:
            key = (r.source, r.regime.workload, r.regime.engine, scale)
            if key not in factors:
                factors[key] = unseen_inflation(r.regime.workload, others, r.regime.engine, scale)
            return factors[key]

        inside = abs(r.error) <= band(r.regime, others, factor).relative
        covered, total = out.get(r.regime.describe(), (0, 0))
        out[r.regime.describe()] = (covered + inside, total + 1)
    return out


def write_residuals(residuals: Sequence[Residual], path: Path = RESIDUALS) -> None:
    with replaced(path) as temporary:
        temporary.write_text(json.dumps([{"source": r.source, **asdict(r.regime), "error": round(r.error, 6),
                                          **({"out_of_sample": True} if r.out_of_sample else {})}
                                         for r in residuals], indent=0) + "\n")


@functools.cache
def shipped_residuals() -> tuple[Residual, ...]:
    data = json.loads(RESIDUALS.read_text())
    return tuple(Residual(d.pop("source"), Regime(**{k: d[k] for k in Regime.__dataclass_fields__ if k in d}),
                          d["error"], d.get("out_of_sample", False)) for d in data)


@functools.cache
def shipped_band(regime: Regime) -> ErrorBand:
    """`band` over the shipped residuals, once per regime (an estimate asks for it on every call)."""
    return band(regime, shipped_residuals())


def error_band(model: Model, system: System, strategy: Strategy) -> ErrorBand:
    """The error band of one training configuration, from the shipped residuals."""
    return shipped_band(regime_of(model, system, strategy))


def inference_error_band(model: Model, system: System, strategy: Strategy, workload: Inference,
                         engine: str | None = None) -> ErrorBand:
    """The error band of a static inference batch, or (`engine`: the profile's `family`, "generic" for the
    generic scheduler) of a served stream."""
    return shipped_band(inference_regime(model, system, strategy, workload, engine))
