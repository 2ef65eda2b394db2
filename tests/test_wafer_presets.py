"""The wafer-scale preset family (devices/wafer-*.yaml, systems/wafer-*.yaml): a 2-D mesh of dies with
on-wafer bandwidth (Tesla's Dojo training tile), checked against its published figures, and the direction of
ASTRA-sim 2.0's wafer-scale case study: on-wafer bandwidth makes the wafer's collectives faster than the
same dies joined off the wafer."""

from __future__ import annotations

import pytest

from armillary import api
from armillary.presets.registry import preset_names
from armillary.specs.loading import load_device, load_system
from armillary.units import GIB

TB = 1e12


def test_the_family_loads_with_a_source_per_number() -> None:
    devices = [n for n in preset_names("devices") if n.startswith("wafer-")]
    systems = [n for n in preset_names("systems") if n.startswith("wafer-")]
    assert devices == ["wafer-dojo-d1"] and systems == ["wafer-dojo-tile"]
    d1 = load_device("wafer-dojo-d1")
    assert d1.sources.keys() >= {"matrix_flops", "memory", "power"}
    tile = load_system("wafer-dojo-tile", 50)
    for dim in tile.network:
        assert dim.sources.keys() >= {"bandwidth", "latency", "efficiency"}, dim.name
    assert tile.network[0].shape == (5, 5) and tile.network[1].size == 2


def test_the_mesh_reproduces_the_published_bisection_and_tile_figures() -> None:
    """Hot Chips 34 'Dojo System': 10 TB/s on-tile bisection, 36 TB/s off-tile, 9 PFLOPS BF16 per tile of 25
    dies. A 5 x 5 mesh's bisection cuts 5 links; each die's 8 TB/s spreads over its 4 links (2 TB/s each)."""
    tile = load_system("wafer-dojo-tile", 25)
    mesh, off = tile.network
    assert mesh.shape is not None
    per_link = mesh.bandwidth / (2 * len(mesh.shape))
    assert mesh.shape[1] * per_link == pytest.approx(10 * TB)
    assert off.bandwidth * 25 == pytest.approx(36 * TB)
    assert tile.device.matrix_flops["bf16"] * 25 == pytest.approx(9.05e15)


def test_on_wafer_bandwidth_makes_the_wafer_faster_than_the_same_dies_off_the_wafer() -> None:
    """The case study's direction: the same 25 dies, the same all-reduce of 1 GiB, once over the on-wafer
    mesh and once as if the dies were separate packages joined by the off-wafer links (the mesh at the
    off-tile rate per die). The wafer wins by the ratio of the two rates, 8 / 1.44 = 5.6x, within 10%."""
    tile = load_system("wafer-dojo-tile", 25)
    off_wafer = tile.model_copy(update={"network": (tile.network[0].model_copy(
        update={"bandwidth": tile.network[1].bandwidth, "latency": tile.network[1].latency}), tile.network[1])})
    on = api.collective("all_reduce", float(GIB), tile, 25)
    off = api.collective("all_reduce", float(GIB), off_wafer, 25)
    assert off.time_s / on.time_s == pytest.approx(8 / 1.44, rel=0.1)
    assert on.busbw_bytes_per_s > 3 * TB  # 0.8 x 8 TB/s, halved for a corner die's two links
