"""Energy and cost per token: hand calculations, the run file's `costs:` block and the CLI options."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from armillary.cli import app
from armillary.errors import SpecError
from armillary.estimate.economics import TokenKind, economics
from armillary.specs.costs import DEFAULT_PUE, Costs
from armillary.specs.run import load_costs

EXAMPLES = Path(__file__).parent.parent / "examples"
runner = CliRunner()


def test_hand_calculation_training():
    # 1024 GPUs at 700 W, PUE 1.2, 1e6 tokens/s: 1024 * 700 * 1.2 / 1e6 = 0.86016 J per token;
    # at $2/GPU-hour: 1024 * 2 / 3600 $/s / 1e6 tokens/s = 5.6889e-7 $/token = $0.56889 per million
    e = economics(1e6, 1024, 700.0, Costs(pue=1.2, usd_per_gpu_hour=2.0), TokenKind.TRAINED)
    assert e.joules_per_token == pytest.approx(0.86016)
    assert e.usd_per_million_tokens == pytest.approx(0.568888, rel=1e-5)


def test_default_pue_no_price_and_power_override():
    e = economics(2000.0, 8, 1000.0, Costs(), TokenKind.OUTPUT)
    assert e.pue == DEFAULT_PUE == 1.56
    assert e.usd_per_million_tokens is None
    assert e.joules_per_token == pytest.approx(8 * 1000 * 1.56 / 2000)  # 6.24 J
    # a measured average draw replaces the board power
    assert economics(2000.0, 8, 1000.0, Costs(device_power=500), TokenKind.OUTPUT).joules_per_token == (
        pytest.approx(8 * 500 * 1.56 / 2000))
    assert economics(2000.0, 8, None, Costs(), TokenKind.OUTPUT).joules_per_token is None


def test_arrays_and_zero_throughput():
    e = economics(np.array([1e3, 2e3, 0.0]), 2, 500.0, Costs(pue=1.0, usd_per_gpu_hour=3.6), TokenKind.OUTPUT)
    assert np.allclose(e.joules_per_token[:2], [1.0, 0.5]) and np.isinf(e.joules_per_token[2])
    # 2 devices x $0.001/s / 1e3 tokens/s = 2e-6 $/token = $2 per million
    assert np.allclose(e.usd_per_million_tokens[:2], [2.0, 1.0])


def test_costs_block_and_overrides(tmp_path):
    run = yaml.safe_load((EXAMPLES / "llama3-70b-h100.yaml").read_text())
    run["costs"] = {"pue": 1.1, "usd_per_gpu_hour": 2.5}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(run))
    assert load_costs(path) == Costs(pue=1.1, usd_per_gpu_hour=2.5)
    assert load_costs(path, [("costs.pue", 1.3)]).pue == 1.3
    with pytest.raises(SpecError, match="costs"):
        load_costs(path, [("costs.pue", 0.9)])
    assert load_costs(EXAMPLES / "llama3-70b-h100.yaml") == Costs()


def test_cli_training_json_matches_hand_calculation():
    out = runner.invoke(app, ["estimate", str(EXAMPLES / "llama3-70b-h100.yaml"), "--json", "--pue", "1.25",
                              "--usd-per-gpu-hour", "3"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    e, devices = d["economics"], d["run"]["devices"]
    assert e["tokens"] == "trained" and e["devices"] == devices and e["device_power_w"] == 700.0  # H100 SXM TDP
    assert e["joules_per_token"] == pytest.approx(devices * 700 * 1.25 / d["tokens_per_s"])
    assert e["usd_per_million_tokens"] == pytest.approx(devices * 3 / 3600 / d["tokens_per_s"] * 1e6)


def test_cli_inference_table_line():
    out = runner.invoke(app, ["estimate", str(EXAMPLES / "llama2-70b-serving-h100.yaml"), "--usd-per-gpu-hour",
                              "2"])
    assert out.exit_code == 0, out.output
    assert "J per output token (8 x 700 W x PUE 1.56)" in out.output
    assert "per million output tokens at $2/device-hour" in out.output


def test_cli_serve_json_has_economics():
    out = runner.invoke(app, ["serve", str(EXAMPLES / "llama2-70b-serving-h100.yaml"), "--rate", "1",
                              "--duration", "5", "--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["economics"]["joules_per_token"] == pytest.approx(
        d["devices"] * 700 * 1.56 / d["output_tokens_per_s"])
    assert d["economics"]["usd_per_million_tokens"] is None
