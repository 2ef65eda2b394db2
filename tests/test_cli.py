"""Every command and every example, end to end through the CLI."""

import csv
import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.errors import SpecError
from armillary.presets.registry import KINDS
from armillary.validation.run import DEFAULT_CSV

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
runner = CliRunner()


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_estimate_every_example(example):
    result = runner.invoke(app, ["estimate", str(example)])
    assert result.exit_code == 0, result.output
    assert "Where the time goes" in result.output
    out = runner.invoke(app, ["estimate", str(example), "--json"])
    data = json.loads(out.output)
    if "inference" in example.read_text():
        for key in ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "memory", "prefill", "decode", "feasible"):
            assert key in data
        assert data["e2e_s"] == pytest.approx(data["prefill"]["total"] + data["decode"]["total"])
        return
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "memory", "breakdown", "feasible"):
        assert key in data
    assert data["breakdown"]["total"] == pytest.approx(data["step_time_s"])


def test_flags_override_fields():
    ex = next(e for e in EXAMPLES if e.stem == "gpt3-175b-a100")  # selective recompute there
    base = json.loads(runner.invoke(app, ["estimate", str(ex), "--json"]).output)
    full = json.loads(runner.invoke(app, ["estimate", str(ex), "--json", "--set", "strategy.recompute=full"]).output)
    assert full["breakdown"]["recompute"] > base["breakdown"]["recompute"]


def test_bad_input_is_a_clear_error_not_a_traceback():
    result = runner.invoke(app, ["estimate", str(EXAMPLES[0]), "--set", "strategy.recompute=sometimes"])
    assert result.exit_code == 2
    assert "strategy.recompute" in result.output and "Traceback" not in result.output


def test_presets_and_schema():
    out = runner.invoke(app, ["presets"]).output
    assert all(k in out for k in KINDS)
    for kind in ("model", "system", "strategy", "run"):
        schema = json.loads(runner.invoke(app, ["schema", kind]).output)
        assert schema["type"] == "object"


def _shipped_rows(path, *prefixes):
    """The shipped validation rows whose ids start with one of `prefixes`, written to `path` as a CSV."""
    with DEFAULT_CSV.open() as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith(prefixes)]
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return rows


def test_validate_json_on_a_given_csv(tmp_path):
    path = tmp_path / "few.csv"
    rows = _shipped_rows(path, "TR-KOR-T5-22B", "TR-SC21-FUSE-11")
    data = json.loads(runner.invoke(app, ["validate", str(path), "--json"]).output)
    assert {d["id"] for d in data} == {r["id"] for r in rows}
    run = [d for d in data if d["predicted"] is not None]
    assert len(run) == 2 and all({"error", "measured", "assumptions"} <= set(d) for d in run)
    skipped = [d for d in data if d["predicted"] is None]
    assert skipped[0]["skipped"]
    out = runner.invoke(app, ["validate", str(path), "--csv", str(tmp_path / "r.csv"),
                              "--plot", str(tmp_path / "r.png")])
    assert out.exit_code == 0, out.output
    with (tmp_path / "r.csv").open() as f:
        assert [r["id"] for r in csv.DictReader(f)] == [r["id"] for r in rows]
    assert (tmp_path / "r.png").stat().st_size > 10_000


def test_run_file_with_a_huggingface_config_next_to_it(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632, "num_attention_heads": 32,
        "num_key_value_heads": 4, "num_hidden_layers": 22, "vocab_size": 32000, "hidden_act": "silu",
        "max_position_embeddings": 2048, "tie_word_embeddings": False}))
    (tmp_path / "run.yaml").write_text(
        "model: config.json\nsystem: dgx-h100\ngpus: 8\nstrategy: {attention: flash}\n"
        "workload: {seq_len: 2048, global_batch: 256}\n")
    data = json.loads(runner.invoke(app, ["estimate", str(tmp_path / "run.yaml"), "--json"]).output)
    assert data["feasible"] and data["step_time_s"] > 0


def test_missing_run_file_is_a_clear_error(tmp_path):
    result = runner.invoke(app, ["estimate", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2 and "does not exist" in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["estimate", "examples/gpt3-175b-a100.yaml", "--set", "strategy.tp=["], "not valid YAML"),
    (["collective", "--system", "dgx-h100", "--gpus", "0"], "gpus: expected a whole number 1..1,048,576"),
    (["collective", "--system", "dgx-h100", "--algorithm", "tree"], "cannot run all_reduce"),
    (["collective", "--system", "dgx-h100", "--channels", "0"], "--channels: between 1 and 64"),
    (["comm-profile", "examples/gpt3-175b-a100.yaml", "--plot", "/no/such/folder/x.png"], "does not exist"),
    (["validate", "pyproject.toml"], "not a validation CSV"),
])
def test_bad_requests_are_clear_errors(args, message):
    root = Path(__file__).parent.parent
    args = [str(root / a) if a.startswith("examples/") or a == "pyproject.toml" else a for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output


# Every command once through the package's `app`: exit codes, the table or JSON it prints, and the one
# error path (a one-line `error: ...` naming the field, exit code 2).

SERVING_RUN = ("model: llama2-7b\nsystem: dgx-h100\ngpus: 1\nstrategy: {attention: flash}\n"
               "workload: {kind: inference, input_len: 128, output_len: 16}\n")
TRAINING_RUN = ("model: llama2-7b\nsystem: dgx-h100\ngpus: 8\nstrategy: {tp: 2, pp: 2, attention: flash}\n"
                "workload: {seq_len: 1024, global_batch: 16}\n")
SEARCH = ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8"]


def _ok(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def _run_file(tmp_path, text, name="run.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_estimate_command_table_and_json():
    example = str(next(e for e in EXAMPLES if e.stem == "gpt3-175b-a100"))
    assert "Memory per device" in _ok(["estimate", example, "--tp", "8", "--micro-batch", "1"])
    assert json.loads(_ok(["estimate", example, "--json", "--gpus", "2048"]))["feasible"] in (True, False)


def test_serve_command(tmp_path):
    run = _run_file(tmp_path, SERVING_RUN)
    assert "Latency (ms)" in _ok(["serve", run, "--rate", "2", "--duration", "5"])
    data = json.loads(_ok(["serve", run, "--rate", "2", "--duration", "5", "--json"]))
    assert data["max_rate"] is None and data["completed"] == data["requests"]


def test_search_commands(tmp_path):
    out = _ok([*SEARCH, "--global-batch", "16", "--top", "2"])
    assert "top 2 by time" in out and "points/s" in out
    data = json.loads(_ok([*SEARCH, "--global-batch", "16", "--top", "2", "--objective", "memory", "--json"]))
    assert len(data["top"]) == 2 and data["top"][0]["memory_gib"] <= data["top"][1]["memory_gib"]
    inference = _ok([*SEARCH, "--tpot-limit", "0.05", "--input-len", "256", "--output-len", "32", "--top", "3"])
    assert "most tokens/s per device with TPOT <= 50 ms" in inference and "within the limits" in inference
    missing = runner.invoke(app, SEARCH)
    assert missing.exit_code == 2 and "--global-batch" in missing.output
    help_text = _ok(["search", "--help"])  # rich markup: the extras' brackets are escaped
    assert "armillary[dask]" in help_text and "armillary[parquet]" in help_text


def test_codesign_table_reports_units_per_field(tmp_path):
    (tmp_path / "space.yaml").write_text("gpus: [16]\nhbm_capacity: [40 GiB]\nscale_out_bandwidth: [25 GB/s]\n"
                                         "prices: {device: 10000, hbm_per_gib: 100}\n")
    (tmp_path / "strategies.yaml").write_text("tp: [2]\nmicro_batch: [1]\n")
    args = [*SEARCH, "--global-batch", "64", "--space", str(tmp_path / "space.yaml"), "--strategies",
            str(tmp_path / "strategies.yaml")]
    system = json.loads(_ok([*args, "--json"]))["systems"][0]
    assert system["hbm_capacity"] == pytest.approx(40.0) and system["scale_out_bandwidth"] == pytest.approx(25.0)
    assert system["gpus"] == 16 and system["devices_per_node"] == 8  # counts stay counts
    out = _ok(args)
    assert "best by time: 16 GPUs, 40 GiB HBM" in out and "1 systems" in out


def test_a_strategy_space_error_names_the_option_on_the_command_line_and_the_argument_in_python(tmp_path):
    (tmp_path / "strategies.yaml").write_text("tp: [2]\nbogus: [1]\n")
    result = CliRunner().invoke(app, [*SEARCH, "--global-batch", "64", "--strategies",
                                      str(tmp_path / "strategies.yaml")])
    assert result.exit_code != 0 and "--strategies.bogus" in result.output
    with pytest.raises(SpecError, match=r"^space\.bogus"):
        armillary.search("llama3-8b", "dgx-h100", {"seq_len": 2048, "global_batch": 64}, gpus=8,
                         space={"tp": [2], "bogus": [1]})


def test_simulate_command(tmp_path):
    run = _run_file(tmp_path, TRAINING_RUN)
    out = _ok(["simulate", run])
    assert "step (simulated)" in out and "critical path:" in out
    data = json.loads(_ok(["simulate", run, "--json", "--straggler", "0=1.1"]))
    assert data["ranks"] == 2 and data["step_time_s"] > 0
    inference = _run_file(tmp_path, SERVING_RUN, "serving.yaml")
    assert "simulated (1 stages) vs analytical" in _ok(["simulate", inference])
    bad = runner.invoke(app, ["simulate", run, "--straggler", "first"])
    assert bad.exit_code == 2 and "RANK=FACTOR" in bad.output
    empty = runner.invoke(app, ["simulate", "--chakra-in", str(tmp_path)])
    assert empty.exit_code == 2 and "trace files" in empty.output and "Traceback" not in empty.output


def test_comm_profile_command():
    example = str(next(e for e in EXAMPLES if e.stem == "gpt3-175b-a100"))
    assert "Communication of one step" in _ok(["comm-profile", example])
    serving = str(next(e for e in EXAMPLES if e.stem == "llama2-70b-serving-h100"))
    wrong = runner.invoke(app, ["comm-profile", serving])
    assert wrong.exit_code == 2 and "not training" in wrong.output


def test_collective_command():
    out = _ok(["collective", "--system", "dgx-h100", "--sizes", "1M,1G"])
    assert "all_reduce on 8 x" in out and "busbw" in out
    rows = json.loads(_ok(["collective", "--system", "dgx-a100", "--op", "all_gather", "--gpus", "16",
                           "--sizes", "1K:4K", "--json"]))
    assert [r["size_bytes"] for r in rows] == [1024.0, 2048.0, 4096.0]
    bad = runner.invoke(app, ["collective", "--system", "dgx-h100", "--op", "send_recv"])
    assert bad.exit_code == 2 and "point-to-point" in bad.output
    # 8 nodes: NCCL's default 16 channels cap the ring below the NICs; 24 reach them (tests/test_comm_channels.py)
    args = ["collective", "--system", "dgx-h100", "--gpus", "64", "--sizes", "8G", "--algorithm", "ring", "--json"]
    default = json.loads(_ok(args))[0]["busbw_bytes_per_s"] / 1e9
    wider = json.loads(_ok([*args, "--channels", "24"]))[0]["busbw_bytes_per_s"] / 1e9
    assert default < 16 * 20.5 < wider


def test_validate_command_on_a_small_csv(tmp_path):
    path = tmp_path / "one.csv"
    _shipped_rows(path, "TR-SC21-FUSE-11")
    assert "Error per source" in _ok(["validate", str(path)])
    missing = runner.invoke(app, ["validate", str(tmp_path / "none.csv")])
    assert missing.exit_code == 2 and "does not exist" in missing.output


def test_presets_and_schema_commands():
    assert _ok(["presets", "models"]).startswith("models: ")
    assert "llama2-7b" in _ok(["presets", "models"])
    assert json.loads(_ok(["schema", "inference"]))["type"] == "object"
    for args in (["presets", "gpus"], ["schema", "cluster"]):
        bad = runner.invoke(app, args)
        assert bad.exit_code == 2 and "allowed values" in bad.output


def test_an_error_is_one_line_naming_the_field():
    result = runner.invoke(app, ["estimate", str(EXAMPLES[0]), "--set", "strategy.recompute=partial"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [result.output.strip()]
    assert result.output.startswith("error: strategy.recompute")
    assert result.stdout == ""  # the message goes to stderr


def test_a_missing_extra_keeps_its_pip_command(tmp_path, monkeypatch):
    """Brackets in a message are printed, not read as markup: `armillary[parquet]` stays whole."""
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if pyarrow were not installed
    result = runner.invoke(app, [*SEARCH, "--global-batch", "16", "--save", str(tmp_path / "top.parquet")])
    assert result.exit_code == 2
    assert "pip install 'armillary[parquet]'" in result.output and "Traceback" not in result.output


def test_markup_in_a_message_is_printed_as_it_is(monkeypatch):
    from armillary import api
    from armillary.errors import MissingExtra

    def missing(*args, **kwargs):
        raise MissingExtra("the [bold]estimate[/bold]", "dask", "dask[distributed]")

    monkeypatch.setattr(api, "estimate", missing)
    result = runner.invoke(app, ["estimate", str(EXAMPLES[0])])
    assert result.exit_code == 2
    assert result.output.strip() == ("error: the [bold]estimate[/bold] needs dask[distributed]: "
                                     "pip install 'armillary[dask]'")


def test_module_entry_point():
    import subprocess

    out = subprocess.run([sys.executable, "-m", "armillary.cli", "presets", "devices"], capture_output=True,
                         text=True, check=True)
    assert out.stdout.startswith("devices: ")


def test_an_estimate_says_what_it_assumed():
    """The JSON carries the resolved inputs (dp and the schedule worked out) and the defaulted fields; the
    table is headed by the strategy line."""
    example = str(Path(__file__).parent.parent / "examples" / "gpt3-175b-a100.yaml")
    data = json.loads(CliRunner().invoke(app, ["estimate", example, "--json"]).output)
    run = data["run"]
    strategy = run["strategy"]
    assert run["devices"] == strategy["tp"] * strategy["pp"] * strategy["dp"] * strategy["cp"]
    assert strategy["schedule"] == ("interleaved" if strategy["vpp"] > 1 else "1f1b")
    assert "dp" in run["defaults"] and "tp" not in run["defaults"]
    table = CliRunner().invoke(app, ["estimate", example]).output
    assert f"dp {strategy['dp']}" in table and f"tp {strategy['tp']}" in table


def test_shell_completion_is_offered():
    out = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in out.output and "--show-completion" in out.output
