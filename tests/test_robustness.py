"""Never crash, never hang, never lie: hostile and careless input gets an error naming the field or file,
outputs are written whole or not at all, and a failed save never loses the printed result."""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.errors import SpecError
from armillary.search.run import search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama3-70b-h100.yaml"
TRAINING = {"seq_len": 2048, "global_batch": 64}


def run_cli(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args])


def test_a_yaml_bomb_is_refused_quickly(tmp_path):
    """Nine levels of nine aliases: a few hundred bytes that expand to 387 million values."""
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    out = run_cli("estimate", bomb)
    assert out.exit_code == 2 and "expands to more than" in out.output and len(out.output) < 500


@pytest.mark.parametrize(("config", "field"), [
    ({"hidden_size": [1]}, "hidden_size"), ({"hidden_size": "4096"}, "hidden_size"),
    ({"hidden_size": 1e300}, "hidden_size"), ({"num_attention_heads": -4}, "num_attention_heads"),
    ({"num_local_experts": {"a": 1}, "model_type": "mixtral"}, "num_local_experts"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings"), ({"hidden_ratio": "x"}, "hidden_ratio"),
])
def test_hugging_face_configs_with_wrong_types_name_the_key(tmp_path, config, field):
    good = {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
            "intermediate_size": 4096, "vocab_size": 32000}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**good, **config}))
    with pytest.raises(SpecError, match=field):
        load_model(str(path))


@pytest.mark.parametrize(("call", "field"), [
    (lambda: armillary.estimate("llama3-8b", None, {}, TRAINING, gpus=8), "system"),
    (lambda: armillary.estimate("llama3-8b", "dgx-h100", {}, TRAINING, gpus="16"), "gpus"),
    (lambda: armillary.estimate("llama3-8b", "dgx-h100", {}, TRAINING, gpus=0), "gpus"),
    (lambda: armillary.estimate(3, "dgx-h100", {}, TRAINING, gpus=8), "model"),
    (lambda: armillary.estimate("llama3-8b", "dgx-h100", {}, {"kind": "inference", "input_len": 8,
                                                              "output_len": 10**9}, gpus=8), "output_len"),
    (lambda: armillary.simulate("llama3-8b", "dgx-h100", {"tp": 8}, TRAINING, gpus=8, stragglers={9: 1.2}),
     "straggler"),
    (lambda: armillary.simulate("llama3-8b", "dgx-h100", {"tp": 8}, TRAINING, gpus=8, jitter=math.nan), "jitter"),
])
def test_the_python_api_names_the_bad_argument(call, field):
    with pytest.raises(SpecError, match=field):
        call()


@pytest.mark.parametrize(("strategy", "gpus", "reason"), [
    ({"pp": 128}, 128, "pp must not exceed the layers"),
    ({"tp": 3}, 3, "tp must divide the attention heads"),
    ({"tp": 4, "dp": 5}, 8, "must equal the 8 devices"),
])
def test_impossible_inference_layouts_are_infeasible(strategy, gpus, reason):
    r = armillary.estimate("llama2-70b", "dgx-h100", strategy,
                           {"kind": "inference", "batch": 8, "input_len": 512, "output_len": 64}, gpus=gpus)
    assert not r.feasible and any(reason in why for why in r.infeasible_reasons)


def test_a_search_with_nothing_that_fits_is_reported_infeasible():
    out = run_cli("search", "--model", "gpt3-175b", "--system", "dgx-a100", "--gpus", "1", "--global-batch", "8")
    assert out.exit_code == 1 and "infeasible" in out.output
    with pytest.raises(SpecError, match="top_k"):
        search(load_model("llama2-7b"), load_system("dgx-a100", 8), load_workload(TRAINING), top_k=0)


def test_a_checkpoint_with_foreign_and_doubled_lines_resumes_with_each_block_once(tmp_path):
    """Two runs on one checkpoint each log a block (concurrent writers), and a line with other keys."""
    model, system, workload = load_model("llama2-7b"), load_system("dgx-a100", 16), load_workload(TRAINING)
    space, base = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2)), load_strategy({"attention": "flash"})
    checkpoint = tmp_path / "search.ckpt"
    first = search(model, system, workload, base, space, top_k=6, chunk=300, checkpoint=checkpoint)
    lines = checkpoint.read_text().splitlines()
    checkpoint.write_text("\n".join([*lines, *lines[1:], '{"begin": 3}', "[1, 2]"]) + "\n")
    again = search(model, system, workload, base, space, top_k=6, chunk=300, checkpoint=checkpoint)
    assert [c.index for c in again.top] == [c.index for c in first.top]
    assert (again.evaluated, again.feasible) == (first.evaluated, first.feasible)


@pytest.mark.parametrize("where", ["folder", "read-only", "dev-full"])
def test_a_failed_save_leaves_no_file_and_keeps_the_printed_result(tmp_path, where):
    if where == "read-only" and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir()
    target = {"folder": tmp_path, "read-only": locked / "top.csv", "dev-full": Path("/dev/full")}[where]
    if where == "read-only":
        locked.chmod(0o500)
    try:
        out = run_cli("validate", "--json", "--csv", target)
    finally:
        locked.chmod(0o700)
    assert out.exit_code == 2 and "cannot write" in out.output
    assert sorted(p.name for p in locked.iterdir()) == []
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())


def test_a_full_disk_during_a_save_leaves_no_partial_file(tmp_path, monkeypatch):
    """The result is printed before the save; the save fails mid-way; no file (not even half of one)."""
    from armillary.report import files

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.csv, "writer", full_disk)
    target = tmp_path / "top.csv"
    out = run_cli("search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch", "16",
                  "--json", "--save", target)
    assert out.exit_code == 2 and "No space left" in out.output
    assert json.loads(out.stdout)["top"]  # the search was printed before the save failed
    assert list(tmp_path.iterdir()) == []


def test_chakra_export_writes_every_file_or_none(tmp_path, monkeypatch):
    from armillary.simulate.chakra import schema, write_chakra

    graph = armillary.simulate("llama3-8b", "dgx-h100", {"tp": 2, "pp": 4}, TRAINING, gpus=8, symmetric=False).graph
    real, written = schema.write_trace, []

    def fail_on_the_third(path, *args):
        if len(written) == 2:
            raise OSError(28, "No space left on device")
        written.append(path)
        real(path, *args)

    monkeypatch.setattr(importlib.import_module("armillary.simulate.chakra.trace"), "write_trace", fail_on_the_third)
    with pytest.raises(SpecError, match="No space left"):
        write_chakra(graph, tmp_path / "et")
    assert list((tmp_path / "et").iterdir()) == []


# --- fuzz: random edits of a valid run file never crash the CLI -------------------------------------------
VALUES = hs.one_of(hs.none(), hs.booleans(), hs.integers(-10**12, 10**12), hs.floats(allow_nan=True),
                   hs.text(max_size=12), hs.lists(hs.integers(0, 9), max_size=3),
                   hs.dictionaries(hs.text(max_size=4), hs.integers(0, 9), max_size=2))
FIELDS = ["model", "system", "gpus", "strategy.tp", "strategy.pp", "strategy.vpp", "strategy.micro_batch",
          "strategy.zero", "strategy.recompute", "strategy.attention", "strategy.precision", "strategy.ep",
          "strategy.overlap", "strategy.offload.optimizer", "workload.seq_len", "workload.global_batch",
          "workload.kind", "model.hidden", "system.network", "strategy.routing.capacity_factor"]


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=hs.sampled_from(FIELDS), value=VALUES)
def test_a_fuzzed_run_file_gives_a_result_or_a_clear_error(tmp_path, field, value):
    out = run_cli("estimate", EXAMPLE, "--json", "--set", f"{field}={json.dumps(value)}")
    assert out.exception is None or isinstance(out.exception, SystemExit), out.output
    if out.exit_code == 0:
        data = json.loads(out.output)
        numbers = [v for v in data.values() if isinstance(v, float)]
        assert all(math.isfinite(v) and v >= 0 for v in numbers), data
    else:
        assert out.output.startswith(("error:", "infeasible", "{")), out.output


def test_a_simulation_too_big_for_memory_is_refused_before_it_starts():
    """Llama 3 405B on 16,384 GPUs at global batch 8,192, every rank simulated as one graph: about 20.8 million
    tasks (6.4 GiB), over the 10-million-task limit, refused with the estimate before anything is built (rank
    classes, `classes=True`, simulate it in seconds)."""
    strategy = {"tp": 8, "pp": 16, "sequence_parallel": True, "attention": "flash", "zero": 1}
    with pytest.raises(SpecError, match=r"every rank would take about [\d,]+ tasks and [\d.]+ GiB"):
        armillary.simulate("llama3.1-405b", "dgx-h100", strategy, {"seq_len": 8192, "global_batch": 8192},
                           gpus=16384, symmetric=False)


# --- fuzz: command-line options with hostile values never give a traceback --------------------------------
MEASUREMENTS = Path(__file__).parent.parent / "src" / "armillary" / "validation" / "data" / "measurements.csv"
SERVING = str(Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml")
COMMANDS = [
    ["estimate", str(EXAMPLE), "--gpus"], ["estimate", str(EXAMPLE), "--tp"], ["estimate", str(EXAMPLE), "--pp"],
    ["estimate", str(EXAMPLE), "--micro-batch"],
    ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--global-batch", "16", "--gpus"],
    ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch"],
    ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch", "16", "--top"],
    ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch", "16", "--seq-len"],
    ["collective", "--system", "dgx-h100", "--op", "all_reduce", "--gpus"],
    ["collective", "--system", "dgx-h100", "--op", "all_reduce", "--gpus", "16", "--sizes"],
    ["collective", "--system", "dgx-h100", "--gpus", "16", "--op"],
    ["simulate", str(EXAMPLE), "--jitter"], ["simulate", str(EXAMPLE), "--straggler"],
    ["simulate", str(EXAMPLE), "--schedule"], ["serve", SERVING, "--duration", "5", "--rate"],
    ["serve", SERVING, "--rate", "1", "--duration"], ["validate", "two-rows.csv", "--csv"], ["estimate", "--set"],
]
HOSTILE = hs.one_of(hs.sampled_from(["0", "-1", "nan", "inf", "-inf", "1e400", "1e-400", "", " ", "3=", "=2",
                                     "99=1.2", "0=0", "1K:", ":", "abc", "[1]", "{}", "/dev/full", "/", "%",
                                     "2**64", "18446744073709551617", "1.5", "+20%"]),
                    hs.integers(-10**20, 10**20).map(str), hs.text(max_size=8))


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None)
@given(command=hs.sampled_from(COMMANDS), value=HOSTILE)
def test_a_hostile_option_value_gives_a_result_or_a_clear_error(command, value):
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):  # files a value names land here
        # validate reads two shipped rows, not all of them (the full set takes minutes with its serving rows)
        Path("two-rows.csv").write_text("".join(MEASUREMENTS.read_text().splitlines(keepends=True)[:3]))
        out = run_cli(*command, value)
    assert out.exception is None or isinstance(out.exception, SystemExit), (command, value, out.output)
    if out.exit_code not in (0, 1):  # 1: infeasible or empty result, stated as such
        assert "error" in out.output.lower() or "usage" in out.output.lower(), (command, value, out.output)


def test_saved_files_get_the_umask_permissions_not_owner_only(tmp_path):
    from armillary.writing import replaced

    target = tmp_path / "out.csv"
    old = os.umask(0o022)
    try:
        with replaced(target) as t:
            t.write_text("a\n")
    finally:
        os.umask(old)
    assert target.read_text() == "a\n" and target.stat().st_mode & 0o777 == 0o644
    target.chmod(0o600)  # an existing file keeps its own
    with replaced(target) as t:
        t.write_text("b\n")
    assert target.stat().st_mode & 0o777 == 0o600
