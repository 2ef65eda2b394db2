"""Plain arguments checked where they enter (a count, a rate, a factor): a whole number or a real number in
range, else a `SpecError` naming the argument, what is allowed and what was given. Never a silent default,
never a comparison error from deep inside."""

from __future__ import annotations

import math
import numbers

from armillary.errors import SpecError


def whole(name: str, value: object, low: int = 0, high: int | None = None) -> int:
    """`value` as an int in low..high (a bool, a float or a string is refused, not converted)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < low or (
            high is not None and int(value) > high):
        allowed = f"{low:,}..{high:,}" if high is not None else f">= {low:,}"
        raise SpecError(f"{name}: expected a whole number {allowed}, got {value!r}")
    return int(value)


def number(name: str, value: object, low: float = 0.0, above: bool = False, high: float = math.inf) -> float:
    """`value` as a finite float >= `low` (> `low` with `above`) and below `high`; NaN, infinities, bools and
    strings are refused."""
    ok = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(float(value))
    if not ok or not (float(value) > low if above else float(value) >= low) or float(value) >= high:  # type: ignore[arg-type]
        allowed = f"{'>' if above else '>='} {low:g}" + (f" and < {high:g}" if high < math.inf else "")
        raise SpecError(f"{name}: expected a finite number {allowed}, got {value!r}")
    return float(value)  # type: ignore[arg-type]
