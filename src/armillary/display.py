"""How a result shows itself in a console or a notebook: a one-line repr of its headline figures (plain
numbers with units, never `np.float64(...)`) and a small HTML table for Jupyter's `_repr_html_`.

A result lists its headline as (label, value) pairs; values are formatted here, once for both views."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Headline = Sequence[tuple[str, str]]


def number(value: Any, digits: int = 4) -> str:
    """A float or numpy scalar as plain text with `digits` significant figures; a sweep as its range."""
    array = np.asarray(value, dtype=float)
    if array.ndim:
        finite = array[np.isfinite(array)]
        if not len(finite):
            return f"{array.size} points, none finite"
        return f"{number(finite.min(), digits)}..{number(finite.max(), digits)} ({array.size} points)"
    x = float(array)
    if not math.isfinite(x):
        return str(x)
    if abs(x) >= 1e15 or 0 < abs(x) < 1e-4:
        return f"{x:.{digits - 1}e}"
    if abs(x) >= 10 ** (digits - 1):  # whole numbers with thousands separators: 61,870 not 6.187e+04
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def percent(value: Any) -> str:
    array = np.asarray(value, dtype=float)
    if array.ndim:
        return f"{number(array.min() * 100, 3)}..{number(array.max() * 100, 3)}%"
    return f"{float(array):.1%}"


def gib(value: Any) -> str:
    return number(np.asarray(value, dtype=float) / 2**30, 4) + " GiB"


def seconds(value: Any) -> str:
    """Seconds, or milliseconds below one second."""
    array = np.asarray(value, dtype=float)
    if array.ndim == 0 and 0 < abs(float(array)) < 1:
        return number(array * 1e3) + " ms"
    return number(array) + " s"


def short_repr(kind: str, headline: Headline) -> str:
    """`Kind(label=value, ...)` on one line."""
    return f"{kind}({', '.join(f'{label}={value}' for label, value in headline)})"


def html_table(kind: str, headline: Headline) -> str:
    """A two-column table with the result's type as its caption (Jupyter's rich display)."""
    rows = "".join(f"<tr><th style='text-align:left'>{html.escape(label)}</th>"
                   f"<td style='text-align:right'>{html.escape(value)}</td></tr>" for label, value in headline)
    return f"<table><caption style='text-align:left'><b>{html.escape(kind)}</b></caption>{rows}</table>"


class Displayed:
    """A result that shows its `headline` as its repr and in Jupyter (declare it `@dataclass(repr=False)` so
    the dataclass does not write its own field-by-field repr)."""

    def headline(self) -> Headline:
        raise NotImplementedError

    def __repr__(self) -> str:
        return short_repr(type(self).__name__, self.headline())

    def _repr_html_(self) -> str:
        return html_table(type(self).__name__, self.headline())
