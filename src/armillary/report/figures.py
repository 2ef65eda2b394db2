"""What the matplotlib pictures share: the label test of a log axis's ticks and the one way a figure is
written (laid out, saved whole or not at all, then closed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from armillary.writing import replaced


def leading(y: float) -> int:
    """k where a log axis's tick y is k x 10^n (2 for 0.2, 20, 2.0); 0 for any other number (1.6, 25)."""
    if y <= 0:
        return 0
    m = y / 10 ** math.floor(math.log10(y))
    return round(m) if abs(m - round(m)) < 1e-6 else 0


def save_figure(fig: Any, path: Path, dpi: int | None = None) -> Path:
    """Lay out `fig`, write it to `path` in the format its suffix names (PNG without one) at `dpi` (None:
    matplotlib's savefig.dpi), and close it, written or not."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        with replaced(path) as temporary:
            fig.savefig(temporary, dpi=dpi, format=path.suffix.lstrip(".").lower() or "png")
    finally:
        plt.close(fig)
    return path
