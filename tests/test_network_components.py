"""Cost and power per GB/s by network component class: the data file, the dimension field, network-optimize."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from armillary.cli import app
from armillary.errors import SpecError
from armillary.search.network_prices import dimension_prices
from armillary.specs.loading import load_system
from armillary.specs.network import NetworkDimension
from armillary.specs.network_components import ComponentClass, component_classes

LIBRA_RUN = str(Path(__file__).parents[1] / "examples" / "libra-3d-gpt3.yaml")
NPUS = 4096


def _dim(name: str, component: str | None) -> NetworkDimension:
    return NetworkDimension(name=name, bandwidth=1e9, latency=1e-6, efficiency=1.0, component=component)


def test_libra_classes_reproduce_libras_published_network_costs() -> None:
    """LIBRA (ISPASS'24) on Ring16 x FullyConnected8 x Switch32, 4,096 NPUs: the equal split of 500 GB/s costs
    $44.65M, its optimum [392.67, 94.28, 13.05] GB/s $11.05M. By hand: 166.67 x (4 + 4 + 57.4) x 4096 =
    $44.65M; (392.67 x 4 + 94.28 x 4 + 13.05 x 57.4) x 4096 = $11.05M."""
    prices = dimension_prices((_dim("ring", "libra-inner-link"), _dim("fc", "libra-inner-link"),
                               _dim("switch", "libra-scale-out")))
    assert prices.cost_per_bw is not None
    equal = float(prices.cost_per_bw @ np.full(3, 500e9 / 3)) * NPUS
    optimum = float(prices.cost_per_bw @ (np.array([392.67, 94.28, 13.05]) * 1e9)) * NPUS
    assert equal / 1e6 == pytest.approx(44.65, abs=0.01)
    assert optimum / 1e6 == pytest.approx(11.05, abs=0.01)
    assert prices.power_per_bw is None and "watts_per_gbps" in prices.missing_power


def test_every_figure_has_a_source_and_a_positive_value() -> None:
    for name, cls in component_classes().items():
        assert cls.dollars_per_gbps is not None or cls.watts_per_gbps is not None, name
        for key in ("dollars_per_gbps", "watts_per_gbps"):
            if getattr(cls, key) is not None:
                assert cls.sources[key].strip(), (name, key)
    with pytest.raises(ValidationError, match="needs a source"):
        ComponentClass(description="x", includes=("link",), dollars_per_gbps=1.0, confidence="none")


def test_market_estimates_are_in_a_sane_order() -> None:
    """A scale-out fabric (NIC + switches + optics) costs more per GB/s than a bare scale-up link, and the
    InfiniBand estimate lies within 2x of LIBRA's scale-out figure (both price NIC, switch and link)."""
    c = component_classes()
    assert c["libra-inner-link"].dollars_per_gbps < c["libra-inner-switch"].dollars_per_gbps  # type: ignore[operator]
    ib, libra = c["infiniband-ndr"].dollars_per_gbps, c["libra-scale-out"].dollars_per_gbps
    assert ib is not None and libra is not None and libra / 2 < ib < 2 * libra


def test_unknown_component_class_is_a_clear_error() -> None:
    spec = {"name": "s", "device": "h100-sxm", "network": [
        {"name": "nvl", "size": 8, "bandwidth": "450 GB/s", "latency": "1 us", "efficiency": 0.8,
         "component": "nvlink-9"}]}
    with pytest.raises(SpecError, match=r"component.*unknown network component class 'nvlink-9'.*infiniband-ndr"):
        load_system(spec, 8)


def test_a_dimension_without_a_class_leaves_the_table_unused() -> None:
    prices = dimension_prices((_dim("a", "infiniband-ndr"), _dim("b", None)))
    assert prices.cost_per_bw is None and "'b' names no component class" in prices.missing_cost
    both = dimension_prices((_dim("a", "infiniband-ndr"), _dim("b", "ethernet-800g")))
    assert both.cost_per_bw is not None and both.power_per_bw is not None
    assert both.cost_per_bw * 1e9 == pytest.approx([71.6, 175.0])


def test_network_optimize_prices_the_libra_example_from_the_table(tmp_path: Path) -> None:
    """LIBRA's qualitative result with the table's prices: the optimum puts most bandwidth on the ring, least on
    the switch, is faster than the equal split and costs about a quarter of it (LIBRA: $11.05M vs $44.65M)."""
    runner = CliRunner()
    plot = tmp_path / "curve.png"
    r = runner.invoke(app, ["network-optimize", LIBRA_RUN, "--total", "500GB/s", "--plot", str(plot), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    b = np.array(out["bandwidth_bytes_per_s"])
    assert out["component_classes"] == ["libra-inner-link", "libra-inner-link", "libra-scale-out"]
    assert out["cost_source"].startswith("component classes")
    assert b[0] > b[1] > b[2] and b.sum() <= 500e9 * (1 + 1e-9)
    assert out["step_time_s"] < out["current_step_time_s"]
    assert out["current_cost"] * NPUS / 1e6 == pytest.approx(44.65, abs=0.02)
    assert out["cost"] < 0.3 * out["current_cost"]
    assert plot.stat().st_size > 0
    r = runner.invoke(app, ["network-optimize", LIBRA_RUN, "--total", "500GB/s", "--objective", "time_power"])
    assert r.exit_code == 2 and "has no watts_per_gbps" in r.output


@pytest.mark.parametrize("preset", ["dgx-h100", "dgx-h800", "dgx-b200", "hgx-h200", "azure-nd-h100-v5"])
def test_ndr_presets_name_their_classes_with_a_source(preset: str) -> None:
    """The NVLink + NVSwitch dimension is LIBRA's inner switch, the NDR 400 Gb/s tier the NDR fat tree:
    network-optimize prices them without --cost (17.0 and 71.6 $ per GB/s),
    and time_power still needs --power (LIBRA's class has no power figure)."""
    system = load_system(preset, 16)
    assert [d.component for d in system.network] == ["libra-inner-switch", "infiniband-ndr"]
    assert all("component" in (d.sources or {}) for d in system.network)
    prices = dimension_prices(system.network)
    assert prices.cost_per_bw is not None and prices.cost_per_bw * 1e9 == pytest.approx([17.0, 71.6])
    assert prices.power_per_bw is None and "libra-inner-switch" in prices.missing_power
