"""Every engine version a row or a run names maps to the profile that describes that version's defaults, or is
refused with a message naming the version and the known profiles (`serving.engine_versions.engine_for`): never another
version's profile. One version string on each side of each boundary between profiles (and between a profile and
an undescribed range), the unversioned fallbacks, and every row of the validation CSV that names an engine
mapping as it did before the refusals (start commit 5788ae9)."""

import re
from collections import Counter

import pytest

from armillary.errors import SpecError
from armillary.serving.engine import load_engine
from armillary.serving.engine_versions import UNDESCRIBED, engine_for, engine_version
from armillary.validation.row_columns import Unsupported
from armillary.validation.run import DEFAULT_CSV, read_rows
from armillary.validation.serving_launch import engine_of_row
from armillary.validation.vocabulary import framework_words

REFUSED = None

# (framework words, the preset that must describe them, or REFUSED), in version order per family
BOUNDARIES = [
    # vLLM: V0 before v0.6.0's CPU-overhead work | V0 0.6-0.7 | V1 0.8-0.27 (the V1 engine's default release to
    # the last with two batch tiers and 512-sequence graphs) | 0.28 (three tiers, PR #51726; 1024 graphs on
    # Blackwell, PR #49390) | 0.29-0.32 | 0.33 | 0.34 (read in their PyPI wheels: test_engine_versions_recent)
    # | 0.35 and later, 1.x included (not read)
    ("vllm 0.1.7", REFUSED), ("vLLM 0.2.7", REFUSED), ("vllm==0.4.2", REFUSED), ("vLLM v0.5.5", REFUSED),
    ("vLLM 0.6.0", "vllm-0.6"), ("vLLM 0.6.3.post1", "vllm-0.6"), ("vllm==0.7.3", "vllm-0.6"),
    ("vLLM 0.7.4.dev181+gf35f8e22", "vllm-0.6"),
    ("vLLM 0.8.0", "vllm-0.8"), ("vLLM v0.9.2", "vllm-0.8"), ("vLLM 0.19.1", "vllm-0.8"),
    ("vllm==0.20.0", "vllm-0.8"), ("vLLM v0.20.2", "vllm-0.8"), ("vLLM 0.25.0", "vllm-0.8"),
    ("vLLM 0.27.1", "vllm-0.8"), ("vllm 0.27", "vllm-0.8"),
    ("vLLM 0.28.0", "vllm-0.28"), ("vllm==0.28.0rc1", "vllm-0.28"), ("vLLM v0.28.1", "vllm-0.28"),
    ("vllm 0.28", "vllm-0.28"), ("vllm 0.29", "vllm-0.29"),
    ("vLLM 0.30.2", "vllm-0.29"), ("vLLM 0.35.0", REFUSED), ("vllm 1.0.0", REFUSED), ("vLLM v1.2", REFUSED),
    # TensorRT-LLM: first release 0.5 | TensorRT engines 0.5-0.8 | trtllm-build + C++ executor 0.9-0.16 |
    # PyTorch backend without CUDA graphs 0.17-0.21 | 1.0 (CUDA graphs by default, PR #5480) | 1.1-1.2 | 1.3 and later
    # (not read)
    ("TensorRT-LLM 0.4.0", REFUSED),
    ("TensorRT-LLM v0.5.0", "tensorrt-llm-0.6"), ("TensorRT-LLM 0.8.0", "tensorrt-llm-0.6"),
    ("trtllm 0.7.1", "tensorrt-llm-0.6"),
    ("TensorRT-LLM 0.9.0", REFUSED), ("TRT-LLM v0.12.0", REFUSED), ("TensorRT-LLM 0.16", REFUSED),
    ("trtllm 0.16.0", REFUSED),
    ("TensorRT-LLM 0.17.0", "tensorrt-llm-0.17"), ("TensorRT-LLM v0.21.0", "tensorrt-llm-0.17"),
    ("TensorRT-LLM 0.22.0", REFUSED),  # no such release: 1.0 followed 0.21
    ("TensorRT-LLM 1.0.0", "tensorrt-llm-1.0"), ("TensorRT-LLM 1.1.0rc2", "tensorrt-llm-1.1"),
    ("TensorRT-LLM 1.2.1", "tensorrt-llm-1.1"), ("TensorRT-LLM 1.3.0rc27", REFUSED),  # test_engine_versions_trtllm
    # SGLang: before the v0.4 overlap scheduler | 0.4 | 0.4.4 | 0.4.4.post1-0.4.5.post2 (read in their PyPI wheels)
    # | 0.4.5.post3-0.4.10.post2 (device tiers: memory share, chunk and graph sizes) | 0.5.x | 0.5.24 and later
    ("sglang 0.1.14", REFUSED), ("SGLang v0.3.6", REFUSED),
    ("SGLang 0.4.0", "sglang-0.4"), ("SGLang 0.4.3.post2", "sglang-0.4"), ("sglang 0.4", "sglang-0.4"),
    ("sglang 0.4.4", "sglang-0.4.4"), ("SGLang v0.4.10", "sglang-0.4.9.post4"),
    ("SGLang 0.4.6.post5", "sglang-0.4.6.post2"),
    ("sglang==0.5.0", "sglang-0.5.0"), ("SGLang v0.5.4", "sglang-0.5.3"), ("SGLang 0.5.23", "sglang-0.5"),
]


@pytest.mark.parametrize(("framework", "profile"), BOUNDARIES)
def test_each_side_of_each_boundary_maps_to_its_profile_or_is_refused(framework: str, profile: str | None) -> None:
    words = framework_words(framework)
    if profile is None:
        _, major, minor = engine_version(words) or ("", -1, -1)
        refusal = rf"version {major}\.{minor}(\.\d+)?\) has no engine profile.*Known versions"
        with pytest.raises(SpecError, match=refusal):
            engine_for(words)
    else:
        picked = engine_for(words)
        assert picked is not None and picked.name == load_engine(profile).name


@pytest.mark.parametrize(("framework", "profile"), [
    ("vLLM", "vllm-0.8"), ("vllm serve --tensor-parallel-size 8", "vllm-0.8"),
    ("SGLang launch_server --tp 8", "sglang-0.4"),
    ("TensorRT-LLM (PyTorch backend), trtllm-bench throughput", "tensorrt-llm-1.0"),
    ("TensorRT-LLM (NVIDIA MLPerf harness)", "tensorrt-llm-1.0"), ("trtllm-serve --tp_size 8", "tensorrt-llm-1.0"),
])
def test_an_unversioned_engine_keeps_its_familys_fallback(framework: str, profile: str) -> None:
    assert engine_version(framework) is None
    picked = engine_for(framework)
    assert picked is not None and picked.name == load_engine(profile).name


def test_the_refusal_names_the_version_the_reason_and_every_profile_of_its_family() -> None:
    with pytest.raises(SpecError) as refused:
        engine_for("TensorRT-LLM 0.12.0 (trtllm-build, C++ executor)")
    message = str(refused.value)
    assert message.startswith("framework: 'TensorRT-LLM 0.12.0' (version 0.12.0)")
    assert "trtllm-build" in message and "PyTorch backend" in message
    for preset in ("tensorrt-llm-0.6", "tensorrt-llm-0.17", "tensorrt-llm-1.0"):
        assert load_engine(preset).name in message
    assert "vLLM" not in message.split("Known versions")[1]


def test_the_undescribed_ranges_lie_outside_every_profiles_versions() -> None:
    for family, low, high, _ in UNDESCRIBED:
        if high == (99, 0, 0):  # open-ended: every later release refused too
            for version in (low, (low[0], low[1] + 3, 2), *(v for v in ((1, 0, 0), (2, 1, 0)) if v > low)):
                with pytest.raises(SpecError, match="(?i)has no engine profile: " + family.split("-")[0]):
                    engine_for(f"{family} {'.'.join(map(str, version))}")
            continue
        last = (high[0], high[1] - 1, 99) if high[2] == 0 else (high[0], high[1], high[2] - 1)
        spelled = {"tensorrt-llm": "TensorRT-LLM"}.get(family, family)
        for version in (low, last):
            with pytest.raises(SpecError, match="(?i)has no engine profile: " + spelled.split("-")[0]):
                engine_for(f"{spelled} {'.'.join(map(str, version))}")
        picked = engine_for(f"{spelled} {'.'.join(map(str, high))}")  # the first version after: described
        assert picked is not None, (family, high)


def test_the_cli_refuses_an_undescribed_engine_version_and_reads_a_described_one() -> None:
    with pytest.raises(SpecError, match=r"workload\.serving\.engine: 'vllm 0\.5\.4'.*vLLM 0\.6-0\.7"):
        load_engine("vllm==0.5.4")
    assert load_engine("vllm==0.7.3").name == load_engine("vllm-0.6").name
    assert load_engine("TensorRT-LLM 0.17.0").name == load_engine("tensorrt-llm-0.17").name
    with pytest.raises(SpecError, match="neither a file nor a preset"):
        load_engine("no-such-engine")


def test_the_harness_refuses_a_serving_row_of_an_undescribed_version_and_notes_an_unversioned_one() -> None:
    row = {"framework": "vLLM 0.5.3: python -m vllm.entrypoints.openai.api_server -tp 8", "other_reported": "",
           "notes": ""}
    with pytest.raises(Unsupported, match=r"'vLLM 0\.5\.3' \(version 0\.5\.3\) has no engine profile"):
        engine_of_row(row, False, [])
    notes: list[str] = []
    engine_of_row({**row, "framework": "vLLM: vllm serve -tp 8"}, False, notes)
    assert any("engine version not stated" in n and "vLLM 0.8" in n for n in notes)
    notes = []
    engine_of_row({**row, "framework": "vLLM 0.6.3: vllm serve -tp 8"}, False, notes)
    assert not any("engine version not stated" in n for n in notes)


# The profile every engine-naming row of the validation CSV got at the start commit (5788ae9), by the start of
# its framework text; none changes with the refusals or the recent profiles (no row names vLLM < 0.6 or >= 0.29,
# TensorRT-LLM 0.9-0.16, SGLang < 0.4 or SGLang 0.4.4-0.4.x)
BEFORE = {
    "SGLang 0.4.2.post4": "sglang-0.4", "SGLang 0.4.3.post2": "sglang-0.4",
    "TensorRT-LLM (NVIDIA MLPerf harness)": "tensorrt-llm-1.0",
    "TensorRT-LLM (PyTorch backend), trtllm-bench": "tensorrt-llm-1.0",
    "TensorRT-LLM 0.17.post1.dev": "tensorrt-llm-0.17",
    "TensorRT-LLM v0.5": "tensorrt-llm-0.6", "TensorRT-LLM v0.6.1": "tensorrt-llm-0.6",
    "vLLM 0.6.3": "vllm-0.6", "vLLM 0.6.4": "vllm-0.6", "vLLM 0.7.3": "vllm-0.6", "vLLM 0.7.4": "vllm-0.6",
}


def test_every_validation_row_naming_an_engine_maps_as_before() -> None:
    seen: Counter[str] = Counter()
    for row in read_rows(DEFAULT_CSV):
        words = framework_words(row.get("framework"))
        if not re.search(r"vllm|sglang|tensorrt|trt-?llm", words, re.I):
            continue
        start = next((k for k in BEFORE if words.startswith(k)), None)
        assert start is not None, f"{row['id']}: {words!r} is not in the table of rows before"
        picked = engine_for(words)
        assert picked is not None and picked.name == load_engine(BEFORE[start]).name, row["id"]
        seen[start] += 1
    assert set(seen) == set(BEFORE)  # the table lists only rows that exist
    assert sum(seen.values()) == 172  # the engine-naming rows counted at the start commit


@pytest.mark.parametrize(("system", "seqs", "tokens"), [
    ("dgx-h100", 1024, 8192), ("hgx-h200", 1024, 8192), ("mi300x-8", 1024, 8192), ("dgx-b200", 1024, 8192),
    ("dgx-a100", 256, 2048),  # 80 GB, but an A100 (PR #17885)
    ("dgx-a100-40gb", 256, 2048), ("tpu-v6e-slice", 256, 2048),  # under 70 GiB
])
def test_vllm_v1_batch_defaults_follow_the_device_as_get_batch_defaults_does(system: str, seqs: int,
                                                                             tokens: int) -> None:
    from armillary.serving.engine import on_device
    from armillary.specs.loading import load_system

    started = on_device(load_engine("vllm-0.8"), load_system(system, 1).device)
    assert (started.max_batch, started.max_batched_tokens, started.graph_max_batch) == (seqs, tokens, 512)
    for other in ("vllm-0.6", "sglang-0.4", "tensorrt-llm-1.0"):  # no device tiers: the same object
        assert on_device(load_engine(other), load_system(system, 1).device) is load_engine(other)


# vLLM v0.28.0 get_batch_defaults (PR #51726): >= 160 GiB 1024 / 16384; >= 70 GiB not A100 1024 / 8192; else
# 256 / 2048; largest graph capture 1024 on compute capability 10.x (PR #49390), else 512
@pytest.mark.parametrize(("system", "gib", "seqs", "tokens", "graphs"), [
    ("dgx-h100", 80, 1024, 8192, 512), ("hgx-h200", 141, 1024, 8192, 512), ("hgx-h20", 89.4, 1024, 8192, 512),
    ("dgx-a100", 80, 256, 2048, 512), ("dgx-a100-40gb", 40, 256, 2048, 512),
    ("dgx-b200", 180, 1024, 16384, 1024), ("gb200-nvl72", 185, 1024, 16384, 1024),
    ("dgx-b300", 268, 1024, 16384, 1024),
    ("mi300x-8", 192, 1024, 16384, 512), ("mi355x-8", 268, 1024, 16384, 512),  # 160 GiB, not capability 10.x
])
def test_vllm_0_28_has_three_batch_tiers_and_1024_graphs_on_blackwell(system: str, gib: float, seqs: int,
                                                                       tokens: int, graphs: int) -> None:
    from armillary.serving.engine import on_device
    from armillary.specs.loading import load_system

    device = load_system(system, 1).device
    assert device.hbm.capacity / 2**30 == pytest.approx(gib, abs=1)  # the tier the memory puts it in
    started = on_device(load_engine("vllm-0.28"), device)
    assert (started.max_batch, started.max_batched_tokens, started.graph_max_batch) == (seqs, tokens, graphs)


def test_vllm_0_28_differs_from_0_27_only_where_its_sources_say() -> None:
    old, new = load_engine("vllm-0.8"), load_engine("vllm-0.28")
    differ = {k for k in type(new).model_fields if getattr(old, k) != getattr(new, k)}
    # vllm-0.8's own memory fraction and block-fp8 kernels are its latest releases' (0.92, DeepGEMM from 0.20.0);
    # the 0.9 and the Triton / CUTLASS kernels of releases before 0.20 are a range
    assert differ == {"name", "versions", "unversioned", "device_defaults", "sources", "releases"}
    same = {k for k, text in new.sources.items() if text == "[as vllm-0.8; not re-read at 0.28]"}
    assert same == set(new.sources) - {"max_batch", "max_batched_tokens", "device_defaults", "graph_max_batch",
                                       "prefix_caching", "memory_fraction", "block_fp8_kernels", "family", "versions"}
    assert "PR #51726" in new.sources["max_batched_tokens"] and "PR #49390" in new.sources["graph_max_batch"]
    assert "PR #50991" in new.sources["prefix_caching"]


def test_a_device_tier_fits_by_memory_then_names() -> None:
    from armillary.serving.engine_tiers import DeviceDefaults
    from armillary.specs.loading import load_system

    h100, a100 = load_system("dgx-h100", 1).device, load_system("dgx-a100", 1).device
    assert DeviceDefaults(at_least_gib=80).fits(h100) and not DeviceDefaults(at_least_gib=80.5).fits(h100)
    assert not DeviceDefaults(at_least_gib=70, except_names=("a100",)).fits(a100)
    assert DeviceDefaults(names=("h100",)).fits(h100) and not DeviceDefaults(names=("h100",)).fits(a100)
    with pytest.raises(ValueError, match="at_least_gib"):
        DeviceDefaults(at_least_gib=-1)


def test_a_v1_rows_flags_still_win_over_the_device_defaults() -> None:
    from armillary.specs.loading import load_system

    a100 = load_system("dgx-a100", 1).device
    row = {"framework": "vLLM 0.9.1: vllm serve -tp 8 --max-num-seqs 512", "other_reported": "", "notes": ""}
    notes: list[str] = []
    engine = engine_of_row(row, False, notes, 0, a100)
    assert (engine.max_batch, engine.max_batched_tokens) == (512, 2048)
    assert any("defaults for this device (256 sequences, 2048 tokens" in n for n in notes)


@pytest.mark.parametrize(("framework", "mode"), [
    ("vLLM 0.6.6.post1", "expanded"), ("vllm==0.7.0", "expanded"),  # per-head K/V before PR #12528
    ("vLLM 0.7.1", "materialized"), ("vLLM 0.7.3.dev138+g21f6ca217", "materialized"),  # the profile's own
])
def test_vllm_v0_runs_mla_expanded_before_0_7_1(framework: str, mode: str) -> None:
    row = {"framework": framework_words(framework), "other_reported": "", "notes": ""}
    notes: list[str] = []
    assert engine_of_row(row, True, notes).mla_decode.value == mode
    assert any(n.startswith("MLA decode expanded") for n in notes) is (mode == "expanded")
    plain: list[str] = []
    engine_of_row(row, False, plain)  # the release's decode mode is the engine's; a model without MLA never uses it
    assert not any(n.startswith("MLA decode") for n in plain)


def test_a_run_naming_the_v1_engine_gets_the_batch_defaults_of_its_device_unless_it_sets_them() -> None:
    from armillary.serving.launch import with_engine
    from armillary.specs.loading import load_system
    from armillary.specs.workload import Inference

    a100, h100 = load_system("dgx-a100", 1).device, load_system("dgx-h100", 1).device
    w = Inference.model_validate({"input_len": 10, "output_len": 10, "serving": {"engine": "vllm-0.8"}})
    assert with_engine(w, device=a100)[0].serving.max_batch == 256
    assert with_engine(w, device=h100)[0].serving.max_batch == 1024
    assert with_engine(w)[0].serving.max_batch == 1024  # no device: the profile's (large-device) numbers
    mine = Inference.model_validate({"input_len": 10, "output_len": 10,
                                     "serving": {"engine": "vllm-0.8", "max_batch": 64}})
    assert with_engine(mine, device=a100)[0].serving.max_batch == 64
    row_engine = load_engine("vllm-0.8").model_copy(update={"max_batch": 512})  # a row's, flags applied
    assert with_engine(w, row_engine, a100)[0].serving.max_batch == 512


def test_vllm_0_28_gets_its_profile_and_0_35_and_later_are_refused() -> None:
    assert load_engine("vllm==0.28.0").name == load_engine("vllm-0.28").name
    assert load_engine("vllm==0.27.1").name == load_engine("vllm-0.8").name
    assert load_engine("vllm==0.29.0").name == load_engine("vllm-0.29").name
    with pytest.raises(SpecError) as refused:
        engine_for("vLLM 0.35.0: vllm serve -tp 8")
    message = str(refused.value)
    assert "0.34.0" in message and load_engine("vllm-0.28").name in message
    with pytest.raises(SpecError, match=r"workload\.serving\.engine: 'vllm 1\.0\.0'.*0\.35 and later"):
        load_engine("vllm==1.0.0")


def test_an_unversioned_or_v1_engine_vllm_row_keeps_the_v1_profile() -> None:
    for framework in ("vLLM V1 engine", "vLLM (V1)", "vllm serve"):  # the engine's name, not a release
        assert engine_version(framework) is None
        picked = engine_for(framework)
        assert picked is not None and picked.name == load_engine("vllm-0.8").name
