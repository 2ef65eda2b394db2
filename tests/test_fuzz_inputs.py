"""Fuzzed inputs outside the run files: Hugging Face config.json files, serving trace CSVs and the Python
API's arguments. Each example gives a result whose numbers are finite and non-negative, or an error of
armillary's own (`ArmillaryError`) naming the key, the file and line, or the argument: never another
exception, never a hang. FUZZ_EXAMPLES sets the examples per test (the acceptance run uses 300)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import math
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as hs

import armillary
from armillary.errors import ArmillaryError, SpecError
from armillary.serving.trace import load_trace
from armillary.specs import huggingface as hf
from armillary.specs.loading import load_model

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "60"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@contextlib.contextmanager
def no_hang(seconds: int = 60) -> Iterator[None]:
    """Fail instead of hanging: an example that runs `seconds` raises TimeoutError."""
    def stop(*_: object) -> None:
        raise TimeoutError(f"no answer after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def numbers(value: Any, path: str = "") -> Iterator[tuple[str, float]]:
    """Every number in a result (dataclasses, dicts, lists, numpy values), with where it sits."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        for k, v in value.items():
            yield from numbers(v, f"{path}.{k}")
    elif isinstance(value, list | tuple | np.ndarray):
        for i, v in enumerate(np.asarray(value, dtype=object).ravel()):
            yield from numbers(v, f"{path}[{i}]")
    elif isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
        yield path, float(value)


def assert_finite(result: Any) -> None:
    bad = [(where, v) for where, v in numbers(result) if not (math.isfinite(v) and v >= 0)]
    assert not bad, bad[:5]


# --- Hugging Face config.json: random edits of real configs of several families ---------------------------
HF = Path(__file__).parent / "data" / "huggingface"
CONFIGS = {p.stem: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))} | {
    "llama": {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
              "num_key_value_heads": 4, "intermediate_size": 4096, "vocab_size": 32000, "hidden_act": "silu",
              "max_position_embeddings": 4096, "tie_word_embeddings": False},
    "mistral": {"model_type": "mistral", "hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 16,
                "num_key_value_heads": 8, "intermediate_size": 3584, "vocab_size": 32000, "sliding_window": 4096},
    "gpt2": {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
             "vocab_size": 50257, "activation_function": "gelu_new"},
    "mpt": {"model_type": "mpt", "d_model": 1024, "n_layers": 4, "n_heads": 16, "expansion_ratio": 4,
            "vocab_size": 50432, "max_seq_len": 2048, "attn_config": {"alibi": True}, "no_bias": True},
}
# every key the reader looks at (model_type is edited, never deleted: without it the file is no config.json)
HF_KEYS = sorted({*hf._READ, "max_seq_len", "seq_length"} - {"architectures"})
DELETE = object()
JSON_VALUES = hs.one_of(
    hs.none(), hs.booleans(), hs.integers(-2**70, 2**70), hs.floats(allow_nan=True, allow_infinity=True),
    hs.sampled_from([0, 1, 3, 7, 2**40, 2**41, "4096", "no", "silu", "sliding_attention", [], {}]),
    hs.text(max_size=6), hs.lists(hs.sampled_from([1, "x", "full_attention", None]), max_size=3),
    hs.dictionaries(hs.sampled_from(["alibi", "a"]), hs.one_of(hs.booleans(), hs.integers(0, 9)), max_size=2))


@FUZZ
@given(family=hs.sampled_from(sorted(CONFIGS)),
       edits=hs.lists(hs.tuples(hs.sampled_from(HF_KEYS), hs.one_of(hs.just(DELETE), JSON_VALUES)), min_size=1,
                      max_size=3))
def test_a_fuzzed_hugging_face_config_gives_a_model_or_names_the_key(tmp_path, family, edits):
    config = copy.deepcopy(CONFIGS[family])
    for key, value in edits:
        if value is DELETE and key != "model_type":
            config.pop(key, None)
        elif value is not DELETE:
            config[key] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))  # NaN and Infinity as Python's json writes them
    try:
        model = load_model(str(path))
    except SpecError as err:
        named = [k for k in {*HF_KEYS, *config} if k in str(err)]
        assert "config.json" in str(err) or "model_type" in str(err), str(err)
        assert named, str(err)
        return
    for workload in ({"seq_len": 512, "global_batch": 16},
                     {"kind": "inference", "batch": 2, "input_len": 64, "output_len": 8}):
        with np.errstate(all="ignore"):
            assert_finite(armillary.estimate(model, "dgx-h100", {}, workload, gpus=8))


# --- serving traces: hostile rows and headers ----------------------------------------------------------------
COLUMNS = ["arrival_s", "input_len", "output_len"]
CELLS = hs.one_of(
    hs.integers(0, 64).map(str), hs.floats(0, 5, allow_nan=False).map(repr),
    hs.sampled_from(["nan", "NaN", "inf", "-inf", "-1", "-0", "0", "", " ", "abc", "1e400", "1e300", "2.5",
                     "16777216", "16777217", "1e6", '"', "1,2", "\x00", "\u00e9"]))
HEADERS = hs.one_of(hs.just(COLUMNS), hs.permutations(COLUMNS), hs.lists(hs.sampled_from([*COLUMNS, "x"]),
                                                                          max_size=4))
WORKLOAD = {"kind": "inference", "batch": 4, "input_len": 32, "output_len": 8,
            "serving": {"ttft_slo_s": 1.0, "tpot_slo_s": 0.1}}


@FUZZ
@given(header=HEADERS, rows=hs.lists(hs.lists(CELLS, min_size=2, max_size=4), max_size=5),
       bom=hs.booleans(), binary=hs.booleans())
def test_a_fuzzed_serving_trace_gives_a_result_or_names_the_file_and_line(tmp_path, header, rows, bom, binary):
    path = tmp_path / "trace.csv"
    text = "\n".join(",".join(r) for r in [header, *rows]) + "\n"
    path.write_bytes(("\ufeff" if bom else "").encode() + text.encode() + (b"\xff\xfe\x00" if binary else b""))
    workload = {**WORKLOAD, "serving": {**WORKLOAD["serving"], "trace": str(path)}}
    with no_hang():
        try:
            load_trace(path)
            result = armillary.simulate_serving("llama3-8b", "dgx-h100", {}, workload, gpus=1)
        except SpecError as err:
            assert str(path) in str(err), str(err)
            return
    assert result.requests == result.completed + result.rejected
    record = result.to_dict()
    if result.completed == 0:  # no percentile of no requests: NaN, printed as null or a dash
        record = {k: v for k, v in record.items() if k not in ("ttft_s", "tpot_s", "e2e_s")}
    assert_finite(record)


def test_serve_runs_the_trace_of_a_run_file_without_a_rate(tmp_path):
    from typer.testing import CliRunner

    from armillary.cli import app

    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_len,output_len\n0,100,16\n0.5,200,8\n")
    run = tmp_path / "run.yaml"
    run.write_text(json.dumps({"model": "llama3-8b", "system": "dgx-h100", "gpus": 1, "strategy": {},
                               "workload": {**WORKLOAD, "serving": {"trace": str(trace)}}}))
    out = CliRunner().invoke(app, ["serve", str(run)])
    assert out.exit_code == 0 and f"Serving {trace}" in out.output and "2 (2 / 0)" in out.output, out.output


# --- the Python API: one hostile argument per call ----------------------------------------------------------
TRAIN = {"seq_len": 512, "global_batch": 16}
INFER = {"kind": "inference", "batch": 2, "input_len": 64, "output_len": 8}
CALLS: dict[str, tuple[Any, dict[str, Any]]] = {
    "estimate": (armillary.estimate, dict(model="llama3-8b", system="dgx-h100", strategy={}, workload=TRAIN, gpus=8)),
    "estimate inference": (armillary.estimate, dict(model="llama3-8b", system="dgx-h100", strategy={},
                                                    workload=INFER, gpus=8)),
    "search": (armillary.search, dict(model="llama3-8b", system="dgx-h100", workload=TRAIN, strategy=None,
                                      space={"tp": [1, 2], "micro_batch": [1]}, gpus=8, objective="time", top=3)),
    "simulate": (armillary.simulate, dict(model="llama3-8b", system="dgx-h100", strategy={"tp": 8}, workload=TRAIN,
                                          gpus=8, schedule=None, symmetric=True, stragglers=None, jitter=0.0,
                                          seed=0)),
    "simulate inference": (armillary.simulate, dict(model="llama3-8b", system="dgx-h100", strategy={"tp": 8},
                                                    workload=INFER, gpus=8, stragglers=None, jitter=0.0, seed=0)),
    "simulate_serving": (armillary.simulate_serving, dict(model="llama3-8b", system="dgx-h100", strategy={"tp": 8},
                                                          workload=INFER, rate=2.0, duration_s=2.0, gpus=8)),
    "collective": (armillary.collective, dict(op="all_reduce", size_bytes=1e6, system="dgx-h100", gpus=8,
                                              algorithm="auto", composition="auto")),
    "validate": (armillary.validate, dict(path="two-rows.csv", kinds=("training",))),
}
# what an error about an argument may call it (the option it stands for, the quantity it holds)
NAMES = {"duration_s": ("duration",), "size_bytes": ("size",), "stragglers": ("straggler",), "top": ("top",),
         "space": ("space",), "gpus": ("gpus", "devices"), "kinds": ("kind",),
         "path": ("two-rows", "csv", "path", "file")}
ARGUMENTS = hs.one_of(
    hs.sampled_from([None, True, 0, -1, 1, 2, 3, 8, 2**63, 10**30, 0.5, -0.5, math.nan, math.inf, -math.inf, "",
                     "x", "8", "nan", "llama3-8b", "dgx-h100", "no-such-preset", [], [1], [1, 2], {}, {"a": 1},
                     {"tp": "x"}, {"tp": 3}, {0: 0}, {99: 1.2}, {0: math.nan}, b"x", (1,), "/", 1e300]),
    hs.integers(-2**70, 2**70), hs.floats(allow_nan=True, allow_infinity=True), hs.text(max_size=8))


def long_but_fine(call: str, name: str, value: Any) -> bool:
    """A valid argument that asks for much work: a serving run of thousands of requests or replicas, a search
    keeping hundreds of strategies (their limits, 10 million requests, 2^20 devices and a top 100,000, are
    tested by name)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if call == "search":
        return name == "top" and value > 200
    return call == "simulate_serving" and (
        (name in ("rate", "duration_s") and 2.0 * value > 2000) or (name == "gpus" and value > 4096))


@FUZZ
@given(call=hs.sampled_from(sorted(CALLS)), data=hs.data())
def test_a_hostile_python_api_argument_gives_a_result_or_names_the_argument(tmp_path, call, data):
    function, arguments = CALLS[call]
    name = data.draw(hs.sampled_from(sorted(arguments)), label="argument")
    value = data.draw(ARGUMENTS, label="value")
    assume(not long_but_fine(call, name, value))
    rows = Path(armillary.__file__).parent / "validation" / "data" / "measurements.csv"
    (tmp_path / "two-rows.csv").write_text("".join(rows.read_text().splitlines(keepends=True)[:3]))
    with contextlib.chdir(tmp_path), no_hang(), np.errstate(all="ignore"):
        try:
            result = function(**{**arguments, name: value})
        except ArmillaryError as err:
            said = str(err).lower()
            assert any(n in said for n in (name, *NAMES.get(name, ()))), (call, name, value, str(err))
            return
    if call == "validate":  # rows compared with measurements: signed errors, skipped rows with reasons
        assert all(r.group and (r.error is not None or r.skipped) for r in result)
        return
    if call == "search":
        result = [(c.step_time_s, c.memory_bytes) for c in result.top]
    elif call == "simulate_serving":
        result = result.to_dict()
        if result["completed"] == 0:  # no percentile of no requests: NaN, printed as null or a dash
            result = {k: v for k, v in result.items() if k not in ("ttft_s", "tpot_s", "e2e_s")}
    elif call.startswith("simulate"):
        result = {"estimate": result.estimate, "step": getattr(result, "step_time_s", None) or result.e2e_s,
                  "rest": [getattr(result, f, 0.0) for f in ("on_critical_path", "busiest_compute_s", "ttft_s",
                                                             "tpot_s")]}
    assert_finite(result)


@pytest.mark.parametrize(("call", "field"), [
    (lambda: armillary.simulate("llama3-8b", "dgx-h100", {"tp": 8}, TRAIN, gpus=8, jitter=1e300), "jitter"),
    (lambda: armillary.simulate("llama3-8b", "dgx-h100", {"tp": 8}, TRAIN, gpus=8, stragglers=3), "stragglers"),
    (lambda: armillary.simulate("llama3-8b", "dgx-h100", {"tp": 8}, TRAIN, gpus=8, symmetric="no"), "symmetric"),
    (lambda: armillary.simulate_serving("llama3-8b", "dgx-h100", {"tp": 8}, INFER, rate="2", duration_s=2),
     "rate"),
    (lambda: armillary.simulate_serving("llama3-8b", "dgx-h100", {"tp": 8}, INFER, rate=2, duration_s=2,
                                        gpus=2**63), "gpus"),
    (lambda: armillary.search("llama3-8b", "dgx-h100", TRAIN, gpus=8, top="3"), "top_k"),
    (lambda: armillary.collective("all_reduce", "1e6", "dgx-h100", gpus=8), "size_bytes"),
    (lambda: armillary.search("llama3-8b", "dgx-h100", TRAIN, gpus=8, top=100_001), "top_k"),
    (lambda: armillary.simulate_serving("llama3-8b", "dgx-h100", {"tp": 8}, INFER, rate=1e4, duration_s=1e4),
     "at most 10,000,000"),
])
def test_api_arguments_found_by_the_fuzzer_name_the_argument(call, field):
    with pytest.raises(SpecError, match=field):
        call()
