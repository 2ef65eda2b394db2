"""Each network dimension's price and power per unit of bandwidth from its component class
(`specs/network_components.py`), for the bandwidth optimizer: LIBRA's cost model (Won et al., ISPASS'24,
§IV-C) is linear, cost = sum_i price_i x bandwidth_i per device, and so is power. A dimension that names no
class can be given LIBRA's class for its kind and place (`inferred_class`), and a device its purchase price
(`device_price`, presets/costs/device-prices.yaml), the fixed term of the perf-per-cost objective."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.errors import SpecError
from armillary.presets.registry import preset_dir, read_data_file
from armillary.specs.network import SWITCHED, NetworkDimension, NetworkKind
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
    inferred: tuple[bool, ...] = ()  # per dimension: the class was inferred, not named


def inferred_class(network: tuple[NetworkDimension, ...], i: int) -> str:
    """LIBRA's component class for dimension i by its kind and place, as LIBRA's cost model prices its
    building blocks (astra-sim/libra src/cost_model/cost_model.py: a Ring or FullyConnected dimension pays
    for links, a Switch dimension for links, switch and NIC; inputs/cost_model/3d_cost_model.yml gives inner
    dimensions link and switch figures, the outermost InterPod link, switch and NIC): a switched dimension
    is LIBRA's inner switch, or its scale-out class when it is the outermost of several; a ring, torus, mesh
    or fully connected dimension is LIBRA's inner link."""
    d = network[i]
    if d.kind in SWITCHED and d.kind is not NetworkKind.FULLY_CONNECTED:
        return "libra-scale-out" if len(network) > 1 and i == len(network) - 1 else "libra-inner-switch"
    return "libra-inner-link"


def dimension_prices(network: tuple[NetworkDimension, ...], infer: bool = False) -> DimensionPrices:
    """The component classes' figures for every dimension; a figure is None unless every dimension has it.
    With `infer`, a dimension that names no class is priced by `inferred_class`."""
    named = tuple(d.component for d in network)
    flags = tuple(infer and c is None for c in named)
    classes = tuple(inferred_class(network, i) if flag else c for i, (c, flag) in enumerate(zip(named, flags,
                                                                                                strict=True)))
    network = tuple(d.model_copy(update={"component": c}) if flag else d
                    for d, c, flag in zip(network, classes, flags, strict=True))
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
                           missing["dollars_per_gbps"], missing["watts_per_gbps"], flags)


@dataclass(frozen=True)
class DevicePrice:
    dollars: float
    source: str


def device_prices() -> dict[str, DevicePrice]:
    """presets/costs/device-prices.yaml by device name (lower case)."""
    data = read_data_file(preset_dir("costs") / "device-prices.yaml")
    return {name.lower(): DevicePrice(float(v["dollars"]), str(v["source"])) for name, v in data["devices"].items()}


def device_price(name: str) -> DevicePrice:
    """The purchase price of device `name`; a device without one is an error naming --gpu-cost."""
    prices = device_prices()
    if name.lower() not in prices:
        raise SpecError(f"no purchase price for device {name!r} in presets/costs/device-prices.yaml (priced: "
                        f"{', '.join(sorted(prices))}): give --gpu-cost DOLLARS, or --gpu-cost 0 to price the "
                        "network alone")
    return prices[name.lower()]
