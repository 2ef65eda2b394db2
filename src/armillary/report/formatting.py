"""Numbers as people read them in tables and reports: a few significant digits, thousands separated, never
in scientific notation (a latency of 12,345 ms, not 1.234e+04)."""

from __future__ import annotations

import math


def fixed(value: float, digits: int = 4) -> str:
    """`value` to `digits` significant digits in positional notation (whole numbers keep all their digits,
    with thousands separators); not finite: a dash."""
    if not math.isfinite(value):
        return "-"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def percent(share: float, decimals: int = 1) -> str:
    """A share (0.452) as a percentage ("45.2%")."""
    return f"{100 * share:.{decimals}f}%" if math.isfinite(share) else "-"


def gib(value_bytes: float) -> str:
    """Bytes in GiB, one decimal."""
    return f"{value_bytes / 2**30:,.1f} GiB"


def binary_size(value_bytes: float) -> str:
    """Bytes in the largest binary unit they reach, 3 significant digits (1.5 MiB, 64 KiB, 100 B)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value_bytes >= scale:
            return f"{value_bytes / scale:.3g} {unit}"
    return f"{value_bytes:.0f} B"


def seconds(value_s: float) -> str:
    """A duration in the unit that reads best: us, ms or s (4 significant digits)."""
    if not math.isfinite(value_s):
        return "-"
    if abs(value_s) >= 1 or value_s == 0:
        return f"{fixed(value_s)} s"
    if abs(value_s) >= 1e-3:
        return f"{fixed(value_s * 1e3)} ms"
    return f"{fixed(value_s * 1e6)} us"
