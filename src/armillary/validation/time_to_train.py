"""Time to train and GPU-hours from a row that states how much it trained: steps x step time plus the time
outside the steps it states (initialization, evaluation, checkpoints).

The amount comes from the row's text as its source words it: "1,000 training steps", "trained on 300B
tokens", "1.2M samples to converge" (MLPerf), "non-step overhead 12 min". Steps from tokens divide by the
global batch's tokens, from samples by the global batch. Nothing stated: the row cannot run (never a guess).
"""

from __future__ import annotations

import re

from armillary.validation.metrics import Metric, time_unit
from armillary.validation.rows import RowSpecs, Unsupported
from armillary.validation.vocabulary import clean

_SCALE = {"": 1.0, "k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9, "t": 1e12,
          "trillion": 1e12}
_NUMBER = r"(\d[\d,]*(?:\.\d+)?)\s*(k|thousand|m|million|b|billion|t|trillion)?\b"
# (what is counted, patterns whose first groups are the number and its scale)
_AMOUNTS = (
    ("steps", (rf"{_NUMBER}\s*(?:training |optimizer )?(?:steps|iterations)\b(?!\s*(?:/|per))",
               rf"(?:steps|iterations) to (?:train|converge(?:nce)?)\s*[:=]?\s*{_NUMBER}")),
    ("tokens", (rf"(?:trained on|training on|total training tokens\s*[:=]?)\s*{_NUMBER}\s*(?:tokens)?",
                rf"{_NUMBER}\s*(?:training|train) tokens\b", rf"{_NUMBER}\s*tokens (?:in total|to train)\b")),
    ("samples", (rf"{_NUMBER}\s*(?:training )?(?:samples|sequences) to (?:train|converge)\b",
                 rf"(?:samples|sequences) to (?:train|converge)\s*[:=]?\s*{_NUMBER}",
                 rf"trained on {_NUMBER}\s*(?:samples|sequences)\b")),
)
_OVERHEAD = (r"(?:non[- ]step|initiali[sz]ation|init|startup|evaluation|eval|checkpoint(?:ing)?) "
             r"(?:overhead |time )?(?:of |took |:|=)?\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|min|minutes?|h|hours?)\b")


def _amount(text: str) -> tuple[str, float] | None:
    for what, patterns in _AMOUNTS:
        for pattern in patterns:
            found = re.search(pattern, text)
            if found:
                value = float(found.group(1).replace(",", ""))
                return what, value * _SCALE[found.group(2) or ""]
    return None


def _overhead_s(text: str) -> float:
    return sum(float(n) * time_unit(u, "s") for n, u in re.findall(_OVERHEAD, text))


def time_to_train_metric(row: dict[str, str], gpu_hours: bool) -> Metric:
    """Time to train (in the row's time unit) or GPU-hours: the stated steps (or tokens, or samples) times the
    step time, plus the stated time outside the steps."""
    text = clean(" ".join(row.get(k, "") for k in ("metric", "other_reported", "notes")))
    amount = _amount(text)
    if amount is None:
        raise Unsupported(f"metric {row.get('metric')!r}: time to train needs the steps, tokens or samples "
                          "trained, which neither the row's other_reported nor its notes state")
    what, value = amount
    extra = _overhead_s(text)

    def steps(rs: RowSpecs) -> float:
        w = rs.workload
        per_step = {"steps": 1.0, "tokens": w.global_batch * w.seq_len, "samples": w.global_batch}[what]
        return value / per_step

    if gpu_hours:
        return Metric(f"GPU-hours ({value:g} {what})",
                      lambda r, rs: (steps(rs) * float(r.step_time_s) + extra) * rs.system.devices / 3600.0)
    k = time_unit(clean(row.get("unit")) or "min", "min")
    return Metric(f"time to train [{clean(row.get('unit')) or 'min'}] ({value:g} {what})",
                  lambda r, rs: (steps(rs) * float(r.step_time_s) + extra) / k)
