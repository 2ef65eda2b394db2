"""Every command and every example, end to end through the CLI."""

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app
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


def test_validate_json_on_a_given_csv(tmp_path):
    with DEFAULT_CSV.open() as f:
        rows = [r for r in csv.DictReader(f) if r["id"].startswith(("TR-KOR-T5-22B", "TR-SC21-FUSE-11"))]
    path = tmp_path / "few.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
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
    (["collective", "--system", "dgx-h100", "--gpus", "0"], "at least one device"),
    (["collective", "--system", "dgx-h100", "--algorithm", "tree"], "cannot run all_reduce"),
    (["comm-profile", "examples/gpt3-175b-a100.yaml", "--plot", "/no/such/folder/x.png"], "does not exist"),
    (["validate", "pyproject.toml"], "not a validation CSV"),
])
def test_bad_requests_are_clear_errors(args, message):
    root = Path(__file__).parent.parent
    args = [str(root / a) if a.startswith("examples/") or a == "pyproject.toml" else a for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
