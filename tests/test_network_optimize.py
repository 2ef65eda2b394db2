"""`network-optimize` (issue 45): refuses what `estimate` calls infeasible, weighs the device's price in the
perf-per-cost objective (LIBRA's system form) so it no longer starves the network, prices dimensions without
a class by LIBRA's class for their kind, and says which bandwidths --refine chose."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer
import yaml
from typer.testing import CliRunner

from armillary import api
from armillary.cli import network
from armillary.cli.common import handled
from armillary.errors import SpecError
from armillary.search.network_bandwidth import BandwidthConstraints, BandwidthObjective
from armillary.search.network_optimize import NetworkRequest, optimize_network
from armillary.search.network_prices import device_price, device_prices, dimension_prices
from armillary.specs.loading import load_system
from armillary.specs.run import load_run

EXAMPLES = Path(__file__).parents[1] / "examples"
LLAMA = EXAMPLES / "llama3-70b-h100.yaml"  # DGX H100, classes named on both dimensions
GPT3 = EXAMPLES / "gpt3-175b-a100.yaml"  # DGX A100, no class named
GB = 1e9


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("network-optimize")(handled(network.network_optimize_cmd))
    app.command("unused")(lambda: None)  # two commands: typer keeps the command name
    return app


def _request(system_bw: int, objective: BandwidthObjective, device_cost: float | None = None,
             refine: bool = False) -> NetworkRequest:
    cons = BandwidthConstraints(np.full(system_bw, GB), np.full(system_bw, 2000 * GB))
    return NetworkRequest(cons, objective, device_cost=device_cost, refine=refine)


def test_an_infeasible_run_is_refused_with_estimates_reasons(tmp_path: Path) -> None:
    """tp 2, pp 1 for Llama 3 70B on H100 does not fit (estimate: out of memory): refused, naming the same
    reasons `estimate` gives, exit code 2, no optimum printed."""
    run = yaml.safe_load(LLAMA.read_text())
    run["strategy"].update(tp=2, pp=1)
    run["strategy"].pop("vpp")
    path = tmp_path / "infeasible.yaml"
    path.write_text(yaml.safe_dump(run))
    model, system, strategy, workload = load_run(path, [])
    result = api.estimate(model, system, strategy, workload)
    assert not result.feasible
    r = CliRunner().invoke(_app(), ["network-optimize", str(path), "--json"])
    assert r.exit_code == 2, r.output
    assert "infeasible as `armillary estimate` sees it" in r.output and "optimum" not in r.output
    for reason in result.infeasible_reasons:
        assert reason.split(":")[0] in r.output


def test_device_price_in_the_objective_stops_starving_the_network() -> None:
    """Network cost alone (LIBRA's network perf-per-cost, device cost 0): the optimum buys a few GB/s and the
    step grows several-fold (46 s vs 2.8 s before this change). With the H100's price as the fixed term
    (system perf-per-cost) the step is no slower than now and the product falls."""
    model, system, strategy, workload = load_run(LLAMA, [])
    alone = optimize_network(model, system, strategy, workload, _request(2, BandwidthObjective.TIME_COST, 0.0))
    plan = optimize_network(model, system, strategy, workload, _request(2, BandwidthObjective.TIME_COST))
    assert plan.device_cost == device_price(system.device.name).dollars == 30000
    assert alone.optimum.step_time_s > 5 * alone.current_step_s
    assert plan.optimum.step_time_s <= plan.current_step_s * 1.02
    cost = plan.constraints.cost_per_bw
    assert cost is not None
    product = plan.optimum.step_time_s * (30000 + plan.optimum.cost)
    assert product <= plan.current_step_s * (30000 + float(cost @ plan.current))
    assert product <= alone.optimum.step_time_s * (30000 + alone.optimum.cost)


def test_time_power_weighs_the_device_board_power() -> None:
    model, system, strategy, workload = load_run(LLAMA, [])
    cons = BandwidthConstraints(np.full(2, GB), np.full(2, 2000 * GB), power_per_bw=np.array([0.2, 1.7]) / GB)
    plan = optimize_network(model, system, strategy, workload,
                            NetworkRequest(cons, BandwidthObjective.TIME_POWER))
    assert plan.device_cost == system.device.power == 700
    assert plan.optimum.step_time_s < 1.1 * plan.current_step_s


def test_a_network_without_classes_is_priced_by_libras_class_for_its_kind() -> None:
    """DGX A100 names no class: NVSwitch is LIBRA's inner switch ($17 per GB/s), the outermost fat tree its
    scale-out class ($57.4); 300 and 25 GB/s now cost 300 x 17 + 25 x 57.4 = $6,535 per GPU (was $0)."""
    system = load_system("dgx-a100", 64)
    assert dimension_prices(system.network).cost_per_bw is None  # not inferred unless asked
    prices = dimension_prices(system.network, infer=True)
    assert prices.classes == ("libra-inner-switch", "libra-scale-out") and prices.inferred == (True, True)
    r = CliRunner().invoke(_app(), ["network-optimize", str(GPT3), "--objective", "time_cost", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["current_cost"] == pytest.approx(6535.0)
    assert out["component_classes_inferred"] == [True, True] and "inferred" in out["cost_source"]
    assert 0 < out["cost"] < out["current_cost"] and out["device_cost"] == 10000


def test_refine_says_which_bandwidths_it_chose(tmp_path: Path) -> None:
    """The table gets a `refined` column next to the model optimum and a line naming the bandwidths chosen;
    the JSON carries both vectors, the refined one being what to build."""
    r = CliRunner().invoke(_app(), ["network-optimize", str(GPT3), "--total", "325GB/s", "--refine", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["refined_bytes_per_s"] == out["bandwidth_bytes_per_s"]
    assert len(out["model_optimum_bytes_per_s"]) == 2 and isinstance(out["refine_moved"], bool)
    assert out["estimator_step_time_s"] <= out["estimator_model_optimum_step_time_s"]
    assert sum(out["refined_bytes_per_s"]) <= 325e9 * (1 + 1e-9)
    r = CliRunner().invoke(_app(), ["network-optimize", str(GPT3), "--total", "325GB/s", "--refine"],
                           env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "refined (GB/s)" in r.output and "model optimum (GB/s)" in r.output
    chosen = "[" + ", ".join(f"{b / GB:.2f}" for b in out["refined_bytes_per_s"]) + "] GB/s"
    assert ("chose " + chosen) in r.output or ("kept the model optimum " + chosen) in r.output


def test_missing_device_price_names_the_option() -> None:
    assert "h100-sxm5-80gb" in device_prices()
    for price in device_prices().values():
        assert price.dollars > 0 and price.source.strip()
    with pytest.raises(SpecError, match="--gpu-cost"):
        device_price("a device nobody sells")
    r = CliRunner().invoke(_app(), ["network-optimize", str(GPT3), "--gpu-cost", "5000"])
    assert r.exit_code == 2 and "objective time minimizes the step alone" in r.output


def test_network_optimize_prints_the_band_of_its_step_times():
    import json

    import typer
    from typer.testing import CliRunner

    from armillary.cli import network

    app = typer.Typer()
    app.command("network-optimize")(network.network_optimize_cmd)
    app.command("unused")(lambda: None)
    out = CliRunner().invoke(app, ["network-optimize", "examples/llama3-70b-h100.yaml", "--json"])
    assert out.exit_code == 0, out.output
    band = json.loads(out.output)["error_band"]
    assert 0 < band["relative"] < 1 and "calibrated device" in band["regime"]
