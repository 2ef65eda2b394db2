"""Co-design: system variants, the cost and power models, the Pareto front, the search over systems."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from armillary.cli import app
from armillary.errors import SpecError
from armillary.search.space import StrategySpace
from armillary.search.systems import SystemSpace, capital_cost, codesign, pareto_front, power_draw, system_variant
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

PRICES = {"device": 10000, "hbm_per_gib": 100, "tier2_per_gib": 5, "scale_out_per_gbps": 20}


def test_pareto_front_by_hand():
    points = np.array([[1, 9, 1], [2, 5, 1], [3, 5, 1], [4, 1, 1], [5, 1, 2], [np.inf, 0, 0]], float)
    # (3, 5) is dominated by (2, 5); (5, 1, 2) by (4, 1, 1); the infeasible point never counts
    assert pareto_front(points).tolist() == [0, 1, 3]


def test_system_variant_and_its_cost_and_power():
    base = load_system("dgx-a100", 8)
    variant = system_variant(base, {"gpus": 64, "hbm_capacity": 40 * 2**30, "hbm_bandwidth": 2e12,
                                    "tier2_capacity": 512e9, "tier2_bandwidth": 32e9,
                                    "scale_up_bandwidth": 450e9, "scale_out_bandwidth": 50e9, "devices_per_node": 4})
    assert variant.devices == 64 and variant.devices_per_node == 4 and variant.nodes == 16
    assert variant.device.hbm.capacity == 40 * 2**30 and variant.network[-1].bandwidth == 50e9
    space = SystemSpace.model_validate({"gpus": [64], "prices": PRICES, "power": {"hbm_per_gib": 0.5}})
    per_device = 10000 + 100 * 40 + 5 * 512e9 / 2**30 + 20 * 50
    assert capital_cost(variant, space.prices) == pytest.approx(64 * per_device)
    assert power_draw(variant, space.power) == pytest.approx(64 * (base.device.power + 0.5 * 40))


def test_codesign_more_gpus_is_faster_and_costs_more():
    space = SystemSpace.model_validate({"gpus": [16, 32], "hbm_capacity": ["40 GiB", "80 GiB"], "prices": PRICES})
    strategies = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2))
    r = codesign(load_model("llama2-7b"), load_system("dgx-a100", 8), load_workload(
        {"seq_len": 2048, "global_batch": 64}), space, load_strategy({"attention": "flash"}), strategies)
    assert len(r.points) == 4 and r.pareto
    by = {(p.values["gpus"], p.values["hbm_capacity"] / 2**30): p for p in r.points}
    assert by[(32, 80)].step_time_s < by[(16, 80)].step_time_s and by[(32, 80)].cost > by[(16, 80)].cost
    assert by[(16, 80)].step_time_s <= by[(16, 40)].step_time_s  # more memory never hurts the best strategy
    front = [r.points[i] for i in r.pareto]
    for p in r.points:  # every system off the front is matched or beaten on all objectives by one on it
        assert p in front or any(q.step_time_s <= p.step_time_s and q.cost <= p.cost and q.power <= p.power
                                 for q in front)


def test_a_tier2_size_needs_a_device_with_a_second_tier():
    tpu = load_system("tpu-v4-pod-slice")
    if tpu.device.second_tier is not None:
        pytest.skip("the TPU preset has a second tier")
    with pytest.raises(SpecError, match="tier2_capacity"):
        system_variant(tpu, {"gpus": tpu.devices, "hbm_capacity": 1e9, "hbm_bandwidth": 1e12, "tier2_capacity": 1e9,
                             "tier2_bandwidth": 1e9, "scale_up_bandwidth": 1e9, "scale_out_bandwidth": 1e9,
                             "devices_per_node": tpu.devices_per_node})


def test_search_cli_over_a_system_space(tmp_path):
    (tmp_path / "space.yaml").write_text("gpus: [16, 32]\nprices: {device: 10000, hbm_per_gib: 100}\n")
    (tmp_path / "strategies.yaml").write_text("tp: [2, 4]\nmicro_batch: [1]\n")
    args = ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch", "64",
            "--space", str(tmp_path / "space.yaml"), "--strategies", str(tmp_path / "strategies.yaml")]
    out = CliRunner().invoke(app, [*args, "--json", "--pareto", str(tmp_path / "front.png")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert [s["gpus"] for s in data["systems"]] == [16, 32] and any(s["pareto"] for s in data["systems"])
    assert (tmp_path / "front.png").stat().st_size > 10_000
    # the best system by each goal, by hand from the rows; a budget below the 32-GPU system's cost leaves 16
    systems = data["systems"]
    for r in systems:
        assert r["tokens_per_s_per_dollar"] == pytest.approx(r["strategy"]["tokens_per_s"] / r["cost_usd"])
    fastest = min(range(2), key=lambda i: systems[i]["step_time_s"])
    per_dollar = max(range(2), key=lambda i: systems[i]["tokens_per_s_per_dollar"])
    assert data["best"]["time"] == fastest and data["best"]["per-dollar"] == per_dollar
    cheap = CliRunner().invoke(app, [*args, "--json", "--budget", str(systems[0]["cost_usd"])])
    assert json.loads(cheap.output)["best"] == {"time": 0, "per-dollar": 0, "per-watt": 0}
    missing = CliRunner().invoke(app, [*args[:-4], "--space", str(tmp_path / "strategies.yaml")])
    assert missing.exit_code == 2 and "space" in missing.output


def test_the_example_study_files_are_valid_spaces():
    from pathlib import Path

    import yaml

    study = Path(__file__).parent.parent / "examples" / "codesign"
    systems = SystemSpace.model_validate(yaml.safe_load((study / "megatron-1t-system-space.yaml").read_text()))
    strategies = StrategySpace.model_validate(yaml.safe_load((study / "strategies.yaml").read_text()))
    assert len(systems.gpus) * len(systems.hbm_capacity or ()) * len(systems.tier2_capacity or ()) == 18
    assert systems.prices.sources and True in strategies.offload_optimizer


def test_codesign_varies_each_dimension_of_a_three_dimension_network():
    """DGX SuperPOD H100: NVLink, rail leaves, spine. The middle dimension is an axis of its own, priced per
    dimension; more of it never slows the best strategy, and its price moves only its dimension's share."""
    system = load_system("dgx-superpod-h100", 512)
    rails = system.network[1].name
    space = SystemSpace.model_validate({
        "gpus": [512], "dimension_bandwidth": {"1": ["12.5 GB/s", "50 GB/s"]},
        "prices": {**PRICES, "dimension_per_gbps": {rails: 7}}})
    strategies = StrategySpace(tp=(8,), pp=(1, 2), micro_batch=(1,))
    r = codesign(load_model("llama2-7b"), system, load_workload({"seq_len": 4096, "global_batch": 512}), space,
                 load_strategy({"attention": "flash"}), strategies)
    slow, fast = sorted(r.points, key=lambda p: p.values["bandwidth:" + rails])
    assert slow.system.network[1].bandwidth == 12.5e9 and fast.system.network[1].bandwidth == 50e9
    assert fast.system.network[2].bandwidth == system.network[2].bandwidth  # the spine stays
    assert fast.step_time_s <= slow.step_time_s
    # per device: the rails at $7 per GB/s, the spine at the scale-out $20, NVLink free (no scale-up price)
    assert fast.cost - slow.cost == pytest.approx(512 * 7 * (50 - 12.5))
    hbm_gib, host_gib = system.device.hbm.capacity / 2**30, system.device.second_tier.capacity / 2**30
    assert fast.cost == pytest.approx(512 * (10000 + 100 * hbm_gib + 5 * host_gib + 7 * 50
                                             + 20 * system.network[2].bandwidth / 1e9))


def test_a_dimension_that_is_not_there_is_named_with_the_choices():
    space = SystemSpace.model_validate({"gpus": [16], "dimension_bandwidth": {"spine": ["1 GB/s"]},
                                        "prices": PRICES})
    with pytest.raises(SpecError, match=r"space.dimension_bandwidth: 'spine' is not a network dimension.*index 0..1"):
        codesign(load_model("llama2-7b"), load_system("dgx-a100", 16), load_workload(
            {"seq_len": 2048, "global_batch": 64}), space, load_strategy({"attention": "flash"}))
