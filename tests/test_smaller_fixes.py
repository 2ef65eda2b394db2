"""Issue 45's "Smaller" bullets: "did you mean" for preset names, a Hugging Face config.json or snapshot folder
named after its model, `read_trace` taking a str path, and no `<bool>` beside a flag in --help."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.presets.registry import close_presets

HF = Path(__file__).parent / "data" / "huggingface"


@pytest.mark.parametrize(("kind", "typed", "meant"), [
    ("models", "llama-3-70b", "llama3-70b"), ("models", "Llama-3.1-405B", "llama3.1-405b"),
    ("models", "mixtral8x7b", "mixtral-8x7b"), ("models", "gpt3", "gpt3-175b"), ("systems", "dgxh100", "dgx-h100"),
    ("devices", "h100", "h100-sxm"),
])
def test_close_presets_put_the_meant_name_first(kind: str, typed: str, meant: str) -> None:
    assert close_presets(kind, typed)[0] == meant


def test_an_unknown_preset_says_did_you_mean_wherever_it_is_read() -> None:
    with pytest.raises(armillary.SpecError, match=r"model 'lama3-8b' is neither a file nor a preset; did you "
                                                  r"mean 'llama3-8b'"):
        armillary.load_model("lama3-8b")
    with pytest.raises(armillary.SpecError, match="did you mean 'dgx-h100'"):
        armillary.run_estimate("llama3-8b", "dgx-h10", {}, {"seq_len": 2048, "global_batch": 8})
    with pytest.raises(armillary.SpecError, match="did you mean 'h100-sxm'"):
        armillary.load_system({"name": "x", "device": "h100-sx", "devices": 8, "network": []})
    out = CliRunner().invoke(app, ["search", "--model", "llama3-8", "--system", "dgx-h100", "--gpus", "8",
                                   "--global-batch", "8"])
    assert out.exit_code == 2 and "did you mean 'llama3-8b'" in out.output
    with pytest.raises(armillary.SpecError) as nothing_close:
        armillary.load_model("zzzz")
    assert "did you mean" not in str(nothing_close.value)


def test_a_hugging_face_config_is_named_after_its_model(tmp_path: Path) -> None:
    data = json.loads((HF / "mistral-7b.json").read_text())
    data.pop("_name_or_path", None)
    folder = tmp_path / "Mistral-7B-v0.1"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    assert armillary.load_model(str(folder / "config.json")).name == "Mistral-7B-v0.1"  # was "config"
    assert armillary.load_model(str(folder)).name == "Mistral-7B-v0.1"  # a model folder
    (folder / "config.json").write_text(json.dumps({**data, "_name_or_path": "mistralai/Mistral-7B-v0.1"}))
    assert armillary.load_model(str(folder / "config.json")).name == "mistralai/Mistral-7B-v0.1"


def test_a_hugging_face_cache_snapshot_folder_is_accepted(tmp_path: Path) -> None:
    """huggingface_hub's cache: models--ORG--NAME/refs/main names the commit under snapshots/."""
    data = json.loads((HF / "mixtral-8x7b.json").read_text())
    data.pop("_name_or_path", None)
    cache = tmp_path / "models--mistralai--Mixtral-8x7B-v0.1"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (cache / "snapshots" / commit).mkdir(parents=True)
    (cache / "refs").mkdir()
    (cache / "refs" / "main").write_text(commit)
    (cache / "snapshots" / commit / "config.json").write_text(json.dumps(data))
    for given in (cache, cache / "snapshots" / commit, cache / "snapshots" / commit / "config.json"):
        model = armillary.load_model(str(given))
        assert model.name == "mistralai/Mixtral-8x7B-v0.1" and model.moe is not None and model.moe.experts == 8
    shutil.rmtree(cache / "snapshots" / commit)
    with pytest.raises(armillary.SpecError, match=r"without a config\.json"):
        armillary.load_model(str(cache))


def test_a_hugging_face_config_with_no_name_takes_its_architecture(tmp_path: Path) -> None:
    data = json.loads((HF / "phi-4.json").read_text())
    data.pop("_name_or_path", None)
    commit = tmp_path / "0123456789abcdef0123456789abcdef01234567"
    commit.mkdir()
    (commit / "config.json").write_text(json.dumps(data))
    assert armillary.load_model(str(commit / "config.json")).name == data["architectures"][0]


def test_read_trace_takes_a_str_path(tmp_path: Path) -> None:
    from armillary.simulate.chakra.schema import GlobalMetadata, Node, NodeType, read_trace, write_trace

    path = tmp_path / "rank.0.et"
    write_trace(path, GlobalMetadata(version="0.0.4"), [Node(id=1, name="gemm", type=int(NodeType.COMP_NODE))])
    _, nodes = read_trace(str(path))  # a str: Path methods were called on it
    assert [n.name for n in nodes] == ["gemm"] and read_trace(path)[1][0].id == 1
    with pytest.raises(armillary.SpecError, match="no such Chakra trace"):
        read_trace(str(tmp_path / "missing.et"))


def test_flags_show_no_type_in_help() -> None:
    out = CliRunner().invoke(app, ["estimate", "--help"], env={"COLUMNS": "200"})
    line = next(x for x in out.output.splitlines() if "--json" in x)
    assert "<bool>" not in line and "print the result as JSON" in line
    assert "<float>" in out.output  # options that take a value still show its type


def test_presets_show_says_did_you_mean():
    from typer.testing import CliRunner

    from armillary.cli import app

    out = CliRunner().invoke(app, ["presets", "show", "lama3-8b"])
    assert out.exit_code != 0 and "did you mean 'llama3-8b'" in out.output


def test_sweep_of_an_unreadable_run_file_fails_once(tmp_path):
    from typer.testing import CliRunner

    from armillary.cli import app

    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [1, 2\n")
    out = CliRunner().invoke(app, ["sweep", str(bad), "--vary", "strategy.tp=1,2"])
    assert out.exit_code != 0 and out.output.count("cannot read as YAML/JSON") == 1
