"""Pictures of `collective --plot` and `serve --plot` (the numbers that feed them equal the command's JSON),
and `compare RUN.yaml --variant ...` (each column equals a separate `estimate` with the same overrides)."""

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.comm.sweep import collective_sweep, group_of
from armillary.errors import SpecError
from armillary.estimate.compare import Section
from armillary.report.collective_plot import collective_plot_data
from armillary.report.serving_plots import latency_cdfs, rate_points
from armillary.serving.rate import steady_max_rate
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.variants import parse_variant

EXAMPLES = Path(__file__).parent.parent / "examples"
LLAMA = EXAMPLES / "llama3-70b-h100.yaml"
SERVING = EXAMPLES / "llama2-70b-serving-h100.yaml"
runner = CliRunner()


def _json(args):
    out = runner.invoke(app, args)
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


# --- collective --plot ------------------------------------------------------------------------------------

def test_collective_plot_numbers_are_the_commands(tmp_path):
    """The chosen line is the --json busbw (GB/s); every pinned line is that algorithm's own command."""
    args = ["collective", "--system", "dgx-h100", "--gpus", "16", "--sizes", "1K:1G:8"]
    rows = _json([*args, "--json"])
    plot = tmp_path / "busbw.png"
    out = runner.invoke(app, [*args, "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert plot.stat().st_size > 10_000
    system = load_system("dgx-h100", 16)
    swept = armillary.collective("all_reduce", [r["size_bytes"] for r in rows], system, 16)
    data = collective_plot_data(swept, Collective.ALL_REDUCE, system, 16, Algorithm.AUTO, Composition.AUTO)
    chosen = [line for line in data.lines if line.chosen]
    assert len(chosen) == 1
    assert chosen[0].busbw_gb_s == pytest.approx([r["busbw_bytes_per_s"] / 1e9 for r in rows], rel=1e-12)
    ring = _json([*args, "--algorithm", "ring", "--json"])
    assert [line.busbw_gb_s for line in data.lines if line.label == "ring"] == [
        pytest.approx([r["busbw_bytes_per_s"] / 1e9 for r in ring], rel=1e-12)]
    # auto is the fastest of the algorithms at every size: no pinned line lies above it
    for line in data.lines:
        assert np.all(np.array(line.busbw_gb_s) <= np.array(chosen[0].busbw_gb_s) * (1 + 1e-9))
    # the bounds: NVLink 450 GB/s and one 400 Gb/s NIC per GPU (50 GB/s), both spanned by 16 GPUs
    assert [gb for _, gb in data.bounds] == pytest.approx([450.0, 50.0])
    assert "all_reduce over 16 GPUs" in data.title and system.name in data.title


def test_collective_plot_inside_a_node_has_one_bound():
    system = load_system("dgx-h100", 8)
    sizes = np.array([2.0**20, 2.0**30])
    rows = collective_sweep(Collective.ALL_GATHER, sizes, group_of(system, 8), system, Algorithm.RING)
    data = collective_plot_data(rows, Collective.ALL_GATHER, system, 8, Algorithm.RING, Composition.AUTO)
    assert data.lines[0].label == "ring (chosen)"
    assert [gb for _, gb in data.bounds] == pytest.approx([450.0])
    assert all(line.size_bytes == tuple(sizes) for line in data.lines)


# --- serve --plot -----------------------------------------------------------------------------------------

def test_serving_cdfs_give_the_commands_percentiles(tmp_path):
    args = ["serve", str(SERVING), "--rate", "3", "--duration", "30"]
    record = _json([*args, "--json"])
    plot = tmp_path / "serve.png"
    out = runner.invoke(app, [*args, "--plot", str(plot)])
    assert out.exit_code == 0, out.output
    assert plot.stat().st_size > 10_000
    model, system, strategy, workload = armillary.load_run(SERVING)
    result = armillary.simulate_serving(model, system, strategy, workload, 3.0, 30.0)
    cdfs = {c.name: c for c in latency_cdfs(result)}
    for name, key in (("TTFT", "ttft_s"), ("TPOT", "tpot_s"), ("end-to-end latency", "e2e_s")):
        values = np.array(cdfs[name].values_s)
        assert np.all(np.diff(values) >= 0)
        for q in (50, 90, 99):
            assert float(np.percentile(values, q)) == pytest.approx(record[key][f"p{q}"], rel=1e-12)
        assert float(values.mean()) == pytest.approx(record[key]["mean"], rel=1e-12)
    assert len(cdfs["TTFT"].values_s) == record["completed"]
    assert cdfs["TTFT"].slo_s == record["ttft_slo_s"] == 2.0 and cdfs["TPOT"].slo_s == record["tpot_slo_s"] == 0.05


def test_max_rate_keeps_every_rate_it_tried(tmp_path):
    """The search's typed result lists each rate run, in order, with the verdict the search acted on:
    the max rate is the largest rate that met the SLOs, and every rate above it that was tried missed."""
    model, system, strategy, workload = armillary.load_run(SERVING)

    def serve(rate, seed):
        return armillary.simulate_serving(model, system, strategy, workload, rate, 20.0)

    found = steady_max_rate(serve, seeds=1, steps=4)
    assert found.tried and found.tried[0].rate == 0.05
    met = [p.rate for p in found.tried if p.meets]
    assert found.rate == max(met)
    assert all(not p.meets for p in found.tried if p.rate > found.rate)
    assert len(found.tried) == len({p.rate for p in found.tried})  # each rate once for one seed
    rows = rate_points(found)
    assert [r["rate"] for r in rows] == [p.rate for p in found.tried]
    assert all(r["meets"] == (r["all_served"] and r["ttft_p90_s"] <= 2.0 and r["tail_ttft_p90_s"] <= 2.0
                              and r["tpot_p99_s"] <= 0.05) for r in rows)


def test_serve_max_rate_plot_and_json(tmp_path):
    plot = tmp_path / "rates.svg"
    args = ["serve", str(SERVING), "--max-rate", "--seeds", "1", "--duration", "15"]
    record = _json([*args, "--json", "--plot", str(plot)])
    assert plot.stat().st_size > 10_000 and plot.read_text().lstrip().startswith("<?xml")
    tried = record["rates_tried"]
    assert record["max_rate"] == max(r["rate"] for r in tried if r["meets"])
    assert {"rate", "seed", "ttft_p90_s", "tpot_p99_s", "meets"} <= tried[0].keys()


# --- compare --variant ------------------------------------------------------------------------------------

def test_parse_variant():
    assert parse_variant("strategy.tp=4,strategy.pp=2").overrides == (("strategy.tp", 4), ("strategy.pp", 2))
    named = parse_variant("b200: system=dgx-b200, gpus=256")
    assert named.name == "b200" and named.overrides == (("system", "dgx-b200"), ("gpus", 256))
    assert parse_variant("strategy.overlap={tp_comm: true, param_gather: false}").overrides == (
        ("strategy.overlap", {"tp_comm": True, "param_gather": False}),)
    with pytest.raises(SpecError, match="FIELD=VALUE"):
        parse_variant("strategy.tp")


def test_compare_variants_equal_separate_estimates(tmp_path):
    variants = ["system=dgx-b200", "strategy.tp=4,strategy.pp=8"]
    plot = tmp_path / "variants.png"
    record = _json(["compare", str(LLAMA), *(a for v in variants for a in ("--variant", v)), "--json",
                    "--plot", str(plot)])
    assert plot.stat().st_size > 10_000
    assert record["runs"] == ["llama3-70b-h100", *variants]
    rows = {(r["section"], r["name"]): r["values"] for r in record["rows"]}
    for i, sets in enumerate([[], ["--set", "system=dgx-b200"],
                              ["--set", "strategy.tp=4", "--set", "strategy.pp=8"]]):
        alone = _json(["estimate", str(LLAMA), *sets, "--json"])
        assert rows[("summary", "step_time")][i] == alone["step_time_s"]
        assert rows[("summary", "mfu")][i] == alone["mfu"]
        for name, value in alone["breakdown"].items():
            assert rows[("time", name)][i] == value
        assert record["feasible"][i] == alone["feasible"]
    assert record["feasible"] == [True, True, True]  # as the README shows it
    assert rows[("summary", "step_time")][1] < rows[("summary", "step_time")][0]  # B200 is faster


def test_compare_variants_python_api_and_gpus():
    c = armillary.compare_variants(LLAMA, [{"strategy.tp": 4, "strategy.pp": 8}, "half: gpus=256"],
                                   overrides=["workload.global_batch=64"])
    assert c.names == ("llama3-70b-h100", "strategy.tp=4,strategy.pp=8", "half")
    single = armillary.estimate(*armillary.load_run(LLAMA, [("workload.global_batch", 64), ("gpus", 256)]))
    assert c.row(Section.SUMMARY, "step_time").values[2] == float(single.step_time_s)


@pytest.mark.parametrize(("variant", "named"), [("strategy.tpp=4", "has no field 'tpp'"),
                                                ("sytem=dgx-b200", "no field 'sytem'"),
                                                ("system.network.0.bandwith=1 TB/s", "bandwith"),
                                                ("strategy.tp", "expected FIELD=VALUE")])
def test_bad_variant_names_the_field(variant, named):
    out = runner.invoke(app, ["compare", str(LLAMA), "--variant", variant])
    assert out.exit_code == 2
    assert f"variant {variant!r}" in out.output and named in out.output
    assert "Traceback" not in out.output


def test_variant_needs_one_run_file():
    out = runner.invoke(app, ["compare", str(LLAMA), str(LLAMA), "--variant", "strategy.tp=4"])
    assert out.exit_code == 2 and "one run file" in out.output
