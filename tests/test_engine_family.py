"""An engine profile states its family (vllm, sglang, tensorrt-llm) and the releases it describes: the rules for
one engine only go by those fields, never by the profile's name, and a profile without a family, or with one
not known, is refused naming the field and the allowed values."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from armillary import api
from armillary.errors import SpecError
from armillary.presets.registry import find_preset, preset_names, read_data_file
from armillary.serving.engine import Engine, Family, ReleaseRange, load_engine, release_key
from armillary.serving.engine_versions import engine_for

MODEL, SYSTEM, STRATEGY = "llama3.1-8b", "hgx-h200", {"tp": 1, "precision": "fp8", "attention": "flash3"}
WORKLOAD: dict[str, Any] = {"kind": "inference", "input_len": 128, "output_len": 128, "weights": "fp8",
                            "kv_cache": {"precision": "fp8"}}
BENCH = {"mode": "offline", "requests": 200, "client": "trtllm-bench"}


def _data(name: str) -> dict[str, Any]:
    data = read_data_file(find_preset("engines", name))
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("name", preset_names("engines"))
def test_every_profile_states_its_family_and_releases_with_a_source(name: str) -> None:
    engine = load_engine(name)
    assert {"family", "versions"} <= set(_data(name)) and engine.versions
    assert {"family", "versions"} <= set(engine.sources)
    assert name.startswith(engine.family.value)  # the preset files are named after their family


@pytest.mark.parametrize("name", preset_names("engines"))
def test_the_releases_stated_are_those_the_patterns_name(name: str) -> None:
    """Each range's first release is recognised as this profile, the first after it as another (or as a
    version no profile describes, refused)."""
    engine = load_engine(name)
    for r in engine.versions:
        assert engine_for(f"{engine.family.value} {r.since}") == engine, (name, r.since)
        try:
            after = engine_for(f"{engine.family.value} {r.before}")
        except SpecError:
            continue
        assert after != engine, (name, r.before)


@pytest.mark.parametrize("family", list(Family))
def test_no_release_is_described_by_two_profiles_of_a_family(family: Family) -> None:
    ranges = sorted((release_key(r.since), release_key(r.before), name) for name in preset_names("engines")
                    for engine in (load_engine(name),) if engine.family is family for r in engine.versions)
    assert ranges
    for (_, before, name), (since, _, following) in pairwise(ranges):
        assert before <= since, (name, following)


def test_release_order_is_pep_440() -> None:
    assert release_key("0.4.4") < release_key("0.4.4.post1") < release_key("0.4.4.post10") < release_key("0.4.5")
    assert release_key("0.7") == release_key("0.7.0") < release_key("0.28")
    assert ReleaseRange(since="1.1", before="1.3").within("1.0", "2.0")
    assert not ReleaseRange(since="0.17", before="0.22").within("1.0", "2.0")
    with pytest.raises(ValueError, match="later release"):
        ReleaseRange(since="1.3", before="1.1")


@pytest.mark.parametrize(("family", "words"), [
    (None, "family: missing; give the project the profile describes, one of vllm, sglang, tensorrt-llm"),
    ("llama.cpp", r"engine.family: Input should be 'vllm', 'sglang' or 'tensorrt-llm'"),
])
def test_a_profile_without_a_known_family_is_refused_naming_the_field_and_values(family: str | None,
                                                                                words: str) -> None:
    data = {k: v for k, v in _data("vllm-0.8").items() if k != "family"}
    if family is not None:
        data["family"] = family
    with pytest.raises(SpecError, match=words):
        load_engine(data)


def _custom(base: str, **update: Any) -> Engine:
    return load_engine({**_data(base), **update})


def test_the_trtllm_bench_client_goes_by_family_and_versions_not_by_name() -> None:
    """A TensorRT-LLM 1.0 profile under another name runs with trtllm-bench as the shipped one does; a vLLM
    profile named like TensorRT-LLM 1.0, a TensorRT-LLM profile of 0.17 releases, or one stating no releases,
    is refused."""
    from armillary.plan.arrays import ModelArrays
    from armillary.serving.benchmark import Benchmark, Client, Mode, client_engine
    from armillary.serving.launch import launched_engine
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
    from armillary.specs.workload import Inference

    model, system, strategy = load_model(MODEL), load_system(SYSTEM, 1), load_strategy(STRATEGY)
    w = load_workload({**WORKLOAD, "serving": {"engine": "tensorrt-llm-1.0"}})
    assert isinstance(w, Inference)
    bench = Benchmark(Mode.OFFLINE, 200, client=Client.TRTLLM_BENCH)
    shipped = launched_engine(w, system.device, ModelArrays.of(model))

    def launch(engine: Engine) -> tuple[Engine | None, tuple[str, ...]]:
        return client_engine(bench, engine, model, strategy, w, system, limits_stated=False)

    renamed = _custom("tensorrt-llm-1.0", name="In-house build", matches=["in-house"])
    launched, assumed = launch(renamed)
    expected, expected_notes = launch(load_engine("tensorrt-llm-1.0"))
    assert launched is not None and expected is not None and shipped is not None
    assert (launched.max_batch, launched.max_batched_tokens, launched.graph_max_batch) == (
        expected.max_batch, expected.max_batched_tokens, expected.graph_max_batch)
    assert len(assumed) == len(expected_notes) == 2
    for engine, words in [
        (_custom("vllm-0.8", name="TensorRT-LLM 1.0 (not really)"), "family vllm|vllm releases"),
        (_custom("tensorrt-llm-0.17", name="TensorRT-LLM 1.0 (not really)"), "0.17 to before 0.22"),
        (_custom("tensorrt-llm-1.0", versions=[]), "releases not stated"),
    ]:
        with pytest.raises(SpecError, match=words):
            launch(engine)


def test_served_bands_go_by_the_family() -> None:
    """The error band of a served stream is that of the engine's family (the API passes `family`)."""
    served = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, {**WORKLOAD, "serving": {"engine": "tensorrt-llm-1.0"}},
                                 {"mode": "offline", "requests": 64}, gpus=1)
    band = served.served.error_band
    assert band is not None and band.regime.endswith("engine tensorrt-llm")
    assert load_engine("tensorrt-llm-1.0").family is Family.TENSORRT_LLM
