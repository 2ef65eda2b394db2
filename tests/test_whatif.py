"""What-if tools: deep --set on presets, compare, sweep, presets show, and the CLI polish (--version, piped
tables)."""

import json
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as hs
from typer.testing import CliRunner

from armillary.cli import app
from armillary.errors import SpecError
from armillary.estimate.run import estimate_run
from armillary.presets.registry import preset_names
from armillary.search.sweep import parse_axis, sweep
from armillary.specs.loading import load_device, load_model, load_system
from armillary.specs.run import load_run, parse_override

EXAMPLES = Path(__file__).parent.parent / "examples"
LLAMA = EXAMPLES / "llama3-70b-h100.yaml"  # dgx-h100 preset, 512 GPUs: 400 Gb/s scale-out, 3.35 TB/s HBM
GPT3 = EXAMPLES / "gpt3-175b-a100.yaml"
SERVING = EXAMPLES / "llama2-70b-serving-h100.yaml"
runner = CliRunner()


def _estimate(path, *sets):
    return estimate_run(*load_run(path, [parse_override(s) for s in sets]))


def _same(a, b):
    """Specs equal field by field (their == trips on the numpy arrays some cache)."""
    return a.model_dump(mode="json") == b.model_dump(mode="json")


def _json(args):
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


# --- deep --set ---------------------------------------------------------------------------------------------

def test_set_reaches_into_a_system_preset():
    base = load_run(LLAMA)[1]
    for text in ("system.scale_out.bandwidth=800 Gb/s", "system.network.1.bandwidth=800 Gb/s",
                 "system.network.1.bandwidth=+100%"):
        system = load_run(LLAMA, [parse_override(text)])[1]
        assert system.network[1].bandwidth == pytest.approx(100e9)  # 800 Gb/s = 100 GB/s, twice 400 Gb/s
        assert _same(system.network[0], base.network[0]) and system.devices == base.devices == 512
    hbm = load_run(LLAMA, [parse_override("system.device.memory.0.bandwidth=+20%")])[1].device.hbm
    assert hbm.bandwidth == pytest.approx(1.2 * 3.35e12)
    assert hbm.capacity == base.device.hbm.capacity
    peak = load_run(LLAMA, [parse_override("system.device.matrix_flops.bf16=-10%")])[1].device.matrix_flops
    assert peak["bf16"] == pytest.approx(0.9 * 989e12)


def test_set_reaches_into_a_model_preset():
    model = load_run(LLAMA, [parse_override("model.layers=40")])[0]
    preset = load_model("llama3-70b")
    assert model.layers == 40
    assert _same(model.model_copy(update={"layers": preset.layers}), preset)
    assert float(_estimate(LLAMA, "model.layers=40").step_time_s) < float(_estimate(LLAMA).step_time_s)


def test_less_scale_out_bandwidth_never_speeds_a_step():
    base = _estimate(LLAMA)
    half = _estimate(LLAMA, "system.scale_out.bandwidth=200 Gb/s")
    assert float(half.step_time_s) > float(base.step_time_s)
    assert float(half.breakdown.dp_exposed) > float(base.breakdown.dp_exposed)
    assert float(half.breakdown.forward_backward) == pytest.approx(float(base.breakdown.forward_backward))
    same = _estimate(LLAMA, "system.network.1.bandwidth=-50%")
    assert float(same.step_time_s) == pytest.approx(float(half.step_time_s))


@settings(max_examples=12, deadline=None)
@given(hs.sampled_from([0, 1]), hs.floats(0.05, 0.95))
def test_step_time_does_not_fall_with_bandwidth(dim, factor):
    fast = _estimate(LLAMA, f"system.network.{dim}.bandwidth=-{100 * (1 - factor):.3f}%")
    slow = _estimate(LLAMA, f"system.network.{dim}.bandwidth=-{100 * (1 - factor / 2):.3f}%")
    assert float(slow.step_time_s) >= float(fast.step_time_s) * (1 - 1e-12)


@pytest.mark.parametrize(("text", "named"), [
    ("system.scale_out.bandwith=1", "fields: name, kind, size, bandwidth"),  # a typo: the error lists the fields
    ("system.device.matrix_flops.bf17=1", "keys: fp32, tf32, bf16"),
    ("system.network.2.bandwidth=1", "2 entries"),
    ("model.layers.x=1", "is a value"),
    ("sytem.gpus=1", "fields: model, system"),
    ("system.name=+5%", "cannot scale"),
    ("system.device.flash1_attention_efficiency=+5%", "needs a number to scale"),  # None in the preset
])
def test_bad_paths_name_the_path_and_what_is_allowed(text, named):
    with pytest.raises(SpecError, match=named) as err:
        load_run(LLAMA, [parse_override(text)])
    assert text.split("=")[0] in str(err.value)


def test_every_preset_round_trips_through_its_data():
    """Deep --set rebuilds a preset from its dumped data: that must be the same spec."""
    for name in preset_names("systems"):
        system = load_system(name)
        assert _same(load_system(system.model_dump(mode="json", exclude_unset=True)), system)
    for name in preset_names("models"):
        assert _same(load_model(load_model(name).model_dump(mode="json", exclude_unset=True)), load_model(name))


# --- compare --------------------------------------------------------------------------------------------------

def test_compare_deltas_are_the_differences_of_the_estimates(tmp_path):
    a = _json(["estimate", str(LLAMA), "--json"])
    b = _json(["estimate", str(GPT3), "--json"])
    c = _json(["compare", str(LLAMA), str(GPT3), "--json"])
    assert c["runs"] == ["llama3-70b-h100", "gpt3-175b-a100"] and c["kind"] == "training"
    rows = {(r["section"], r["name"]): r for r in c["rows"]}
    expected = {("summary", "step_time"): ("step_time_s",), ("summary", "mfu"): ("mfu",),
                ("time", "total"): ("breakdown", "total"), ("memory", "hbm_total"): ("memory", "hbm", "total"),
                ("traffic", "scale_out"): ("traffic", "scale_out_bytes")}
    expected |= {("time", k): ("breakdown", k) for k in a["breakdown"] if k != "total"}
    expected |= {("memory", f"hbm_{k}"): ("memory", "hbm", k) for k in a["memory"]["hbm"]}

    def at(d, keys):
        for k in keys:
            d = d[k]
        return d

    for key, path in expected.items():
        row = rows[key]
        assert row["values"] == pytest.approx([at(a, path), at(b, path)], rel=1e-9)
        assert row["deltas"] == pytest.approx([0.0, at(b, path) - at(a, path)], rel=1e-9, abs=1e-12)
    plot = tmp_path / "c.png"
    out = runner.invoke(app, ["compare", str(LLAMA), str(GPT3), "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert "Δ vs llama3-70b-h100" in out.output and "dp exposed" in out.output
    assert plot.stat().st_size > 10_000


def test_compare_refuses_training_against_inference():
    out = runner.invoke(app, ["compare", str(LLAMA), str(SERVING)])
    assert out.exit_code == 2
    assert "all be training or all inference" in out.output


def test_compare_two_inference_runs(tmp_path):
    a = tmp_path / "h100.yaml"
    shutil.copy(SERVING, a)
    b = tmp_path / "h200.yaml"
    data = yaml.safe_load(SERVING.read_text())
    b.write_text(yaml.safe_dump({**data, "system": "hgx-h200"}))
    c = _json(["compare", str(a), str(b), "--json"])
    assert c["kind"] == "inference"
    rows = {(r["section"], r["name"]): r for r in c["rows"]}
    tpot = rows[("summary", "tpot")]["values"]
    assert tpot[1] < tpot[0]  # H200: 4.8 TB/s of HBM against 3.35 TB/s, and decode streams the weights
    assert rows[("decode", "total")]["deltas"][1] == pytest.approx(
        rows[("decode", "total")]["values"][1] - rows[("decode", "total")]["values"][0])


# --- sweep ----------------------------------------------------------------------------------------------------

def test_sweep_over_gpus_gives_one_row_per_power_of_two(tmp_path):
    assert parse_axis("gpus=64..1024").values == (64, 128, 256, 512, 1024)
    assert parse_axis("gpus=3..20").values == (3, 6, 12)
    data = _json(["sweep", str(LLAMA), "--vary", "gpus=64..1024", "--json"])
    assert [p["gpus"] for p in data["points"]] == [64, 128, 256, 512, 1024]
    at_512 = next(p for p in data["points"] if p["gpus"] == 512)
    assert at_512["step_time_s"] == pytest.approx(float(_estimate(LLAMA).step_time_s))
    plot = tmp_path / "s.png"
    out = runner.invoke(app, ["sweep", str(LLAMA), "--vary", "gpus=256..512", "--vary",
                              "system.network.1.bandwidth=100GB/s,200GB/s", "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert plot.stat().st_size > 10_000


def test_sweep_products_and_bad_points():
    result = sweep(LLAMA, [parse_axis("gpus=256..512"), parse_axis("system.network.1.bandwidth=25GB/s,50GB/s")])
    assert [p.values for p in result.points] == [(256, "25GB/s"), (256, "50GB/s"),
                                                  (512, "25GB/s"), (512, "50GB/s")]
    times = [float(p.result.step_time_s) for p in result.points]
    assert times[0] >= times[1] and times[2] >= times[3]  # more bandwidth, no slower
    odd = sweep(LLAMA, [parse_axis("gpus=100,512")])  # 100 devices do not hold tp 8 x pp 4
    assert odd.points[1].result is not None and (odd.points[0].result is None
                                                 or not bool(odd.points[0].result.feasible))
    with pytest.raises(SpecError, match="no field"):
        sweep(LLAMA, [parse_axis("system.nope=1,2")])


# --- presets show ------------------------------------------------------------------------------------------------

def test_presets_show_prints_loadable_yaml_with_sources_and_calibration():
    out = runner.invoke(app, ["presets", "show", "h100-sxm"])
    assert out.exit_code == 0, out.output
    data = yaml.safe_load(out.output)
    assert data["sources"]["matrix_flops"].startswith("NVIDIA H100")
    assert _same(load_device(data), load_device("h100-sxm"))
    assert "# calibration: calibrated on TR-MLM-H100" in out.output
    uncalibrated = next(n for n in preset_names("devices") if not load_device(n).calibrated_on)
    assert "NOT calibrated" in runner.invoke(app, ["presets", "show", uncalibrated]).output
    system = yaml.safe_load(runner.invoke(app, ["presets", "show", "dgx-h100", "--kind", "systems"]).output)
    assert _same(load_system(system), load_system("dgx-h100")) and "sources" in system["network"][1]
    bad = runner.invoke(app, ["presets", "show", "h100-sxm", "--kind", "models"])
    assert bad.exit_code == 2 and "no such preset" in bad.output


# --- CLI polish ----------------------------------------------------------------------------------------------------

def test_version_prints_the_package_version():
    out = runner.invoke(app, ["--version"])
    assert out.exit_code == 0
    assert out.output.strip() == f"armillary {version('armillary')}"


def test_piped_tables_keep_long_cells_whole(tmp_path):
    long = "a-run-file-with-a-very-long-name-" + "x" * 120
    shutil.copy(LLAMA, tmp_path / f"{long}.yaml")
    shutil.copy(GPT3, tmp_path / "b.yaml")
    out = subprocess.run([sys.executable, "-m", "armillary.cli", "compare", str(tmp_path / f"{long}.yaml"),
                          str(tmp_path / "b.yaml")], capture_output=True, text=True, check=True,
                         env={"PATH": "", "COLUMNS": "80", "TERM": "dumb"})
    assert long in out.stdout and "…" not in out.stdout


def test_install_hints_keep_their_brackets():
    """Rich markup would print pip install 'armillary' for pip install 'armillary[commbench]'."""
    import importlib.util

    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: commbench would run")
    out = runner.invoke(app, ["commbench"])
    assert out.exit_code == 2 and "pip install 'armillary[commbench]'" in out.output
