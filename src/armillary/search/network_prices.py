"""Each network dimension's price and power per unit of bandwidth from its component class
(`specs/network_components.py`), for the bandwidth optimizer: LIBRA's cost model (Won et al., ISPASS'24,
§IV-C) is linear, cost = sum_i price_i x bandwidth_i per device, and so is power."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.specs.network import NetworkDimension
from armillary.specs.network_components import component_class

GBPS = 1e9  # the table's unit: per GB/s


@dataclass(frozen=True)
class DimensionPrices:
    """Per dimension: the class used (None: none named), $ and W per byte/s per device (None when a figure
    is missing for some dimension, with the reason)."""

    classes: tuple[str | None, ...]
    cost_per_bw: np.ndarray | None
    power_per_bw: np.ndarray | None
    missing_cost: str = ""
    missing_power: str = ""


def dimension_prices(network: tuple[NetworkDimension, ...]) -> DimensionPrices:
    """The component classes' figures for every dimension; a figure is None unless every dimension has it."""
    classes = tuple(d.component for d in network)
    if all(c is None for c in classes):
        return DimensionPrices(classes, None, None, "no dimension names a component class",
                               "no dimension names a component class")
    figures: dict[str, list[float]] = {"dollars_per_gbps": [], "watts_per_gbps": []}
    missing: dict[str, str] = {"dollars_per_gbps": "", "watts_per_gbps": ""}
    for d in network:
        cls = component_class(d.component) if d.component is not None else None
        for key, values in figures.items():
            value = getattr(cls, key) if cls is not None else None
            if value is None and not missing[key]:
                missing[key] = (f"dimension {d.name!r} names no component class" if cls is None else
                                f"component class {d.component!r} (dimension {d.name!r}) has no {key}")
            values.append(np.nan if value is None else float(value))

    def per_byte(key: str) -> np.ndarray | None:
        return None if missing[key] else np.array(figures[key]) / GBPS

    return DimensionPrices(classes, per_byte("dollars_per_gbps"), per_byte("watts_per_gbps"),
                           missing["dollars_per_gbps"], missing["watts_per_gbps"])
