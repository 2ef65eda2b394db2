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
from armillary.serving import engine_versions
from armillary.serving.engine import Engine, load_engine
from armillary.serving.engine_releases import Family, ReleaseRange, release_key
from armillary.serving.engine_versions import engine_for, stated_version

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
def test_each_range_reads_back_as_its_profile(name: str) -> None:
    """Each range's first release is read as this profile, the first after it as another (or as a version no
    profile describes, refused): `versions` is the one statement of the releases a profile describes."""
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

    renamed = _custom("tensorrt-llm-1.0", name="In-house build")
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


@pytest.mark.parametrize("family", list(Family))
def test_one_profile_per_family_takes_its_unversioned_mentions_with_a_source(family: Family) -> None:
    taking = [name for name in preset_names("engines") if (e := load_engine(name)).family is family and e.unversioned]
    assert len(taking) == 1, taking
    assert "without a version" in load_engine(taking[0]).sources["unversioned"]


def test_a_series_is_claimed_only_where_several_profiles_split_it_and_by_one() -> None:
    """`series` is stated only for a series no one profile describes wholly (else it is that profile's), by one
    profile of the family, one that describes some of its releases."""
    claims: dict[tuple[Family, str], list[str]] = {}
    for name in preset_names("engines"):
        engine = load_engine(name)
        for series in engine.series:
            claims.setdefault((engine.family, series), []).append(name)
            assert "without a patch" in engine.sources["series"], name
    assert claims
    for (family, series), names in claims.items():
        assert len(names) == 1, (family, series, names)
        stated = stated_version(f"{family.value} {series}")
        assert stated is not None and stated.series
        family_profiles = [load_engine(n) for n in preset_names("engines") if load_engine(n).family is family]
        assert not any(engine_versions._describes(e, stated) for e in family_profiles), (family, series)
        assert engine_versions._in_series(load_engine(names[0]), stated), (family, series)


@pytest.mark.parametrize(("words", "read"), [
    ("vLLM 0.6.3", ("vllm", (0, 6, 3, 0), False, "0.6.3")),
    ("vllm==0.7", ("vllm", (0, 7, 0, 0), True, "0.7")),  # a series: every 0.7.x
    ("SGLang 0.4.4.post1", ("sglang", (0, 4, 4, 1), False, "0.4.4.post1")),
    ("sglang 0.4.4post1", ("sglang", (0, 4, 4, 1), False, "0.4.4.post1")),  # pip's spelling without the dot
    ("sglang 0.5.post1", ("sglang", (0, 5, 0, 1), False, "0.5.post1")),  # PEP 440: 0.5.0.post1, not a series
    ("TensorRT-LLM 1.1.0rc2", ("tensorrt-llm", (1, 1, 0, 0), False, "1.1.0")),  # a pre-release: as 1.1.0
    ("vllm 0.28rc1", ("vllm", (0, 28, 0, 0), False, "0.28")),  # a pre-release of 0.28.0, not a series
    ("vLLM 0.7.4.dev181+gf35f8e22", ("vllm", (0, 7, 4, 0), False, "0.7.4")),  # a dev build: as 0.7.4
    ("TensorRT-LLM 0.17.post1.dev (commit 9b931c0f)", ("tensorrt-llm", (0, 17, 0, 1), False, "0.17.post1")),
    ("TRT-LLM v1.2", ("tensorrt-llm", (1, 2, 0, 0), True, "1.2")),
])
def test_one_parser_reads_the_family_and_the_release_as_pip_orders_it(words: str,
                                                                      read: tuple[str, tuple[int, ...], bool,
                                                                                  str]) -> None:
    stated = stated_version(words)
    assert stated is not None
    assert (stated.family.value, stated.release, stated.series, stated.text) == read


@pytest.mark.parametrize(("words", "profile"), [
    # read since the patterns went: a pin or separator the patterns did not spell, a post release without its dot
    ("vllm==0.7.3", "vllm-0.6"), ("vllm: 0.9.1", "vllm-0.8"), ("SGLang:0.4.1", "sglang-0.4"),
    ("sglang  0.4.5.post1", "sglang-0.4.4.post1"), ("sglang 0.4.7post1", "sglang-0.4.7.post1"),
    ("SGLang 0.4.4rc0", "sglang-0.4.4"), ("TensorRT-LLM 1.0rc1", "tensorrt-llm-1.0"),
    # a post release no profile states: refused, not caught by a pattern's look-ahead (post10 was the 0.4.7.post1
    # profile's, post1x of 0.4.6 the 0.4.6 profile's)
    ("sglang 0.4.9.post10", None), ("sglang 0.4.6.post10", None),
    # a post release of a series: PEP 440 reads 0.5.post1 as 0.5.0.post1
    ("sglang 0.5.post1", "sglang-0.5.0"), ("SGLang 0.5", "sglang-0.5"), ("SGLang 0.4.x", "sglang-0.4"),
    # no version: the first family named takes it
    ("vLLM vs SGLang", "vllm-0.8"), ("SGLang vs vLLM", "sglang-0.4"), ("TRT-LLM", None), ("trtllm-build", None),
    ("xvllm 0.6", None),  # a family's name as a word of its own
])
def test_the_reading_rule(words: str, profile: str | None) -> None:
    if profile is None and stated_version(words) is not None:
        with pytest.raises(SpecError, match="no profile describes this version"):
            engine_for(words)
        return
    picked = engine_for(words)
    assert (picked.name if picked is not None else None) == (load_engine(profile).name if profile else None)


def test_a_series_several_profiles_split_and_none_claims_is_refused_naming_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shipped = engine_versions._profiles()
    unclaimed = [e.model_copy(update={"series": ()}) for e in shipped]
    monkeypatch.setattr(engine_versions, "_profiles", lambda: unclaimed)
    with pytest.raises(SpecError) as refused:
        engine_for("SGLang 0.5")
    message = str(refused.value)
    assert "(version 0.5) has no engine profile: no one profile describes all its releases" in message
    for name in ("sglang-0.5.0", "sglang-0.5.3", "sglang-0.5.10", "sglang-0.5"):
        assert load_engine(name).name in message.split("Known versions")[0]
    for words, profile in (("SGLang 0.5.21", "sglang-0.5"),  # a release is read as before
                           ("vllm 0.7", "vllm-0.6")):  # a series one profile describes wholly needs no claim
        picked = engine_for(words)
        assert picked is not None and picked.name == load_engine(profile).name


def test_the_refusal_lists_the_familys_profiles_in_release_order_with_their_ranges() -> None:
    with pytest.raises(SpecError) as refused:
        engine_for("TensorRT-LLM 1.3.0rc27")
    message = str(refused.value)
    assert "(version 1.3.0) has no engine profile: TensorRT-LLM 1.3 and later" in message
    assert "(a pre-release or dev build, read as the release it leads to)" in message
    known = message.split("Known versions: ")[1]
    ranges = ["[releases 0.5 to before 0.9]", "[releases 0.17 to before 0.22]", "[releases 1.0 to before 1.1]",
              "[releases 1.1 to before 1.3]"]
    assert [known.index(r) for r in ranges] == sorted(known.index(r) for r in ranges)


def test_a_profile_file_with_patterns_is_refused_naming_versions() -> None:
    assert "matches" not in Engine.model_fields
    for name in preset_names("engines"):
        assert "matches" not in _data(name), name
    with pytest.raises(SpecError, match=r"matches: no longer read.*versions"):
        load_engine({**_data("vllm-0.8"), "matches": ["vllm"]})
    with pytest.raises(SpecError, match="release series"):
        load_engine({**_data("vllm-0.8"), "series": ["0.8.1"]})
