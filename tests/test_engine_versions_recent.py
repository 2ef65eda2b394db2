"""The profiles of the releases read in their published wheels (vLLM 0.29-0.34, SGLang 0.4.4-0.4.5.post2 and 0.5.x):
each version maps to the profile read at it, the next undescribed release is refused with its reason, each
profile differs from its neighbour only in the fields its sources say changed, and the device tiers follow the
releases' get_batch_defaults and CUDA-graph sizes. No validation row names any of these versions."""

import re

import pytest

from armillary.errors import SpecError
from armillary.serving.engine import IDENTITY, OPTIONAL_RULES, Engine, load_engine, on_device
from armillary.serving.engine_versions import engine_for
from armillary.specs.loading import load_system
from armillary.validation.run import DEFAULT_CSV, read_rows
from armillary.validation.vocabulary import framework_words

REFUSED = None
NEW = ("vllm-0.29", "vllm-0.33", "vllm-0.34", "sglang-0.4.4", "sglang-0.4.4.post1", "sglang-0.4.4.post2")
SGLANG_05 = ("sglang-0.4.5.post3", "sglang-0.4.6", "sglang-0.4.6.post2", "sglang-0.4.7", "sglang-0.4.7.post1",
             "sglang-0.4.9.post4", "sglang-0.5.0", "sglang-0.5.3", "sglang-0.5.10", "sglang-0.5")

# (framework words, the preset that must describe them, or REFUSED), in version order per family
BOUNDARIES = [
    ("vLLM v0.28.1", "vllm-0.28"),
    ("vLLM 0.29.0", "vllm-0.29"), ("vllm 0.29", "vllm-0.29"), ("vLLM v0.30.2", "vllm-0.29"),
    ("vllm==0.31.0", "vllm-0.29"), ("vLLM 0.32.1", "vllm-0.29"),
    ("vLLM 0.33.0", "vllm-0.33"), ("vllm 0.33.2", "vllm-0.33"),
    ("vLLM 0.34.0", "vllm-0.34"), ("vllm==0.34.1", "vllm-0.34"),
    ("vLLM 0.35.0", REFUSED), ("vllm 1.0.0", REFUSED), ("vLLM v1.2", REFUSED),
    ("SGLang 0.4.3.post2", "sglang-0.4"),
    ("SGLang 0.4.4", "sglang-0.4.4"), ("sglang==0.4.4", "sglang-0.4.4"),
    ("SGLang 0.4.4.post1", "sglang-0.4.4.post1"),
    ("SGLang 0.4.4.post2", "sglang-0.4.4.post2"), ("sglang 0.4.4.post4", "sglang-0.4.4.post2"),
    ("SGLang v0.4.5", "sglang-0.4.4.post2"),
    ("SGLang 0.4.5.post1", "sglang-0.4.4.post1"), ("sglang 0.4.5.post2", "sglang-0.4.4.post1"),
    ("SGLang 0.4.5.post3", "sglang-0.4.5.post3"),  # the >80 GiB memory rule of 0.4.6 came in 0.4.5.post3
    ("SGLang 0.4.6", "sglang-0.4.6"), ("sglang 0.4.6.post1", "sglang-0.4.6"),
    ("SGLang 0.4.6.post2", "sglang-0.4.6.post2"), ("sglang 0.4.6.post5", "sglang-0.4.6.post2"),
    ("SGLang 0.4.7", "sglang-0.4.7"),
    ("SGLang 0.4.7.post1", "sglang-0.4.7.post1"), ("sglang 0.4.8", "sglang-0.4.7.post1"),
    ("SGLang 0.4.9", "sglang-0.4.7.post1"), ("SGLang 0.4.9.post3", "sglang-0.4.7.post1"),
    ("SGLang 0.4.9.post4", "sglang-0.4.9.post4"), ("sglang 0.4.9.post6", "sglang-0.4.9.post4"),
    ("SGLang v0.4.10", "sglang-0.4.9.post4"), ("sglang 0.4.10.post2", "sglang-0.4.9.post4"),
    # 0.5.x: no final 0.5.0 on PyPI (0.5.0rc0-rc2 read); reserve table | activation formula | prefill graphs |
    # small-GPU tier; 0.5.24 and later not published when read
    ("sglang==0.5.0", "sglang-0.5.0"), ("SGLang 0.5.0rc2", "sglang-0.5.0"), ("sglang 0.5.1.post3", "sglang-0.5.0"),
    ("SGLang v0.5.2", "sglang-0.5.0"),
    ("SGLang 0.5.3", "sglang-0.5.3"), ("sglang 0.5.5.post3", "sglang-0.5.3"), ("SGLang 0.5.9", "sglang-0.5.3"),
    ("SGLang 0.5.10", "sglang-0.5.10"), ("sglang 0.5.10.post1", "sglang-0.5.10"), ("SGLang 0.5.19", "sglang-0.5.10"),
    ("SGLang 0.5.20", "sglang-0.5"), ("sglang==0.5.23", "sglang-0.5"), ("SGLang 0.5", "sglang-0.5"),
    ("SGLang 0.5.24", REFUSED), ("sglang 0.6.0", REFUSED),
]


@pytest.mark.parametrize(("framework", "profile"), BOUNDARIES)
def test_each_recent_version_maps_to_the_profile_read_at_it_or_is_refused(framework: str,
                                                                          profile: str | None) -> None:
    words = framework_words(framework).replace("==", " ")
    if profile is None:
        with pytest.raises(SpecError, match=r"has no engine profile.*Known versions"):
            engine_for(words)
    else:
        picked = engine_for(words)
        assert picked is not None and picked.name == load_engine(profile).name


def test_the_refusals_say_what_was_read_and_why_it_does_not_fit() -> None:
    with pytest.raises(SpecError) as refused:
        engine_for("vLLM 0.35.0: vllm serve -tp 8")
    message = str(refused.value)
    assert "0.34.0" in message and "vLLM-HUST" in message and load_engine("vllm-0.34").name in message
    with pytest.raises(SpecError) as refused:
        engine_for("SGLang 0.5.24: launch_server --tp 8")
    message = str(refused.value)
    assert "0.5.23" in message and "0.5.20" in message and load_engine("sglang-0.5.10").name in message


def _diff(old: str, new: str) -> set[str]:
    """The fields that differ, less the words other than a release each takes (unversioned, series:
    test_engine_family)."""
    a, b = load_engine(old), load_engine(new)
    return {k for k in Engine.model_fields if getattr(a, k) != getattr(b, k)} - {"unversioned", "series"}


@pytest.mark.parametrize(("old", "new", "fields"), [
    # 0.29-0.32: 0.28's tiers and graphs; the 0.92 memory default (since 0.20.0) and DeepGEMM block-fp8 read
    ("vllm-0.28", "vllm-0.29", {"memory_fraction", "block_fp8_kernels"}),
    ("vllm-0.29", "vllm-0.33", {"device_defaults"}),  # GB10 leaves the 70 GiB tier
    ("vllm-0.33", "vllm-0.34", {"block_tokens", "memory_fraction", "graph_max_batch", "device_defaults"}),
    ("sglang-0.4", "sglang-0.4.4", set()),  # read at 0.4.4: the 0.4.2-0.4.3 numbers
    # PR #4390 in 0.4.4.post1, and the DP-attention prefill budget divided by dp_size rather than 2
    ("sglang-0.4.4", "sglang-0.4.4.post1", {"pad_attention_groups", "attention_dp_budget_divisor"}),
    ("sglang-0.4.4.post1", "sglang-0.4.4.post2", {"block_fp8_kernels"}),  # JIT DeepGEMM on by default
    # 0.4.5.post3-0.4.7: device tiers only (13 GiB above 80 GiB; 18 GiB above 96; 0.79 on CUDA above 180,000 MiB)
    ("sglang-0.4.4.post1", "sglang-0.4.5.post3", {"device_defaults"}),
    ("sglang-0.4.5.post3", "sglang-0.4.6", {"block_fp8_kernels"}),  # JIT DeepGEMM on by default again
    ("sglang-0.4.6", "sglang-0.4.6.post2", {"device_defaults"}),
    ("sglang-0.4.6.post2", "sglang-0.4.7", {"device_defaults"}),
    ("sglang-0.4.7", "sglang-0.4.7.post1", {"memory_fraction", "device_defaults"}),  # the reserve table
    # 0.4.7.post1-0.4.10.post2: 0.5.0-0.5.2's memory, chunk and graph defaults; DP padding back in 0.4.9.post4;
    # experts on Triton fused_moe (0.4.4.post2's kernels; the sglang-0.5 profiles keep the device curve, not re-read)
    ("sglang-0.4.7.post1", "sglang-0.4.9.post4", {"pad_attention_groups"}),
    ("sglang-0.4.9.post4", "sglang-0.5.0", {"block_fp8_kernels"}),
    # 0.5.3: the reserve from the chunk and graph sizes, graphs to 512 from 60 GiB
    ("sglang-0.5.0", "sglang-0.5.3", {"memory_fraction", "graph_max_batch", "device_defaults"}),
    ("sglang-0.5.3", "sglang-0.5.10", {"memory_fraction", "device_defaults"}),  # the prefill graphs' reserve
    ("sglang-0.5.10", "sglang-0.5", {"device_defaults"}),  # below 35 GiB: 4096-token chunks, graphs to 160
])
def test_each_profile_differs_from_its_neighbour_only_in_what_its_release_changed(old: str, new: str,
                                                                                  fields: set[str]) -> None:
    if old == "vllm-0.28":  # the 0.28 profile's own 0.9 and Triton kernels were not read at 0.28.0, which has
        # 0.92 and DeepGEMM as these releases do: it may take them, leaving no difference
        named = {"name", "versions", "sources"}
        assert named <= _diff(old, new) <= named | fields
        return
    assert _diff(old, new) == {"name", "versions", "sources"} | fields


@pytest.mark.parametrize("name", NEW + SGLANG_05)
def test_every_field_of_the_new_profiles_is_read_at_its_release_or_an_assumption(name: str) -> None:
    engine = load_engine(name)
    unset_rules = {k for k in OPTIONAL_RULES if k not in engine.model_fields_set}  # no such rule: nothing to source
    numbers = [k for k in Engine.model_fields if k not in (*IDENTITY, "sources") and k not in unset_rules]
    for field in numbers:
        text = engine.sources.get(field, "")
        assert re.match(r"(read|assumption|none listed)", text), (name, field, text[:60])
    read = [k for k in numbers if engine.sources[k].startswith("read")]
    assert len(read) >= len(numbers) // 2, (name, read)


@pytest.mark.parametrize(("system", "seqs", "tokens", "graphs_29", "graphs_34"), [
    ("dgx-h100", 1024, 8192, 512, 512), ("hgx-h200", 1024, 8192, 512, 512),
    ("dgx-a100", 256, 2048, 512, 512), ("dgx-a100-40gb", 256, 2048, 512, 512),
    ("dgx-b200", 1024, 16384, 1024, None), ("gb200-nvl72", 1024, 16384, 1024, None),
    ("dgx-b300", 1024, 16384, 1024, None),  # compute capability 10.x: 0.34 captures decode to max_num_seqs
    ("mi300x-8", 1024, 16384, 512, 512),  # 160 GiB or more, not capability 10.x
])
def test_the_recent_vllm_tiers_follow_get_batch_defaults_and_the_graph_sizes(system: str, seqs: int, tokens: int,
                                                                             graphs_29: int,
                                                                             graphs_34: int | None) -> None:
    device = load_system(system, 1).device
    for name, graphs in (("vllm-0.29", graphs_29), ("vllm-0.33", graphs_29), ("vllm-0.34", graphs_34)):
        started = on_device(load_engine(name), device)
        assert (started.max_batch, started.max_batched_tokens, started.graph_max_batch) == (seqs, tokens, graphs)


def test_a_gb10_takes_the_small_tier_from_vllm_0_33() -> None:
    h100 = load_system("dgx-h100", 1).device
    gb10 = h100.model_copy(update={"name": "NVIDIA GB10 (DGX Spark)",
                                   "hbm": h100.hbm.model_copy(update={"capacity": 128 * 10**9})})
    assert on_device(load_engine("vllm-0.29"), gb10).max_batch == 1024
    for name in ("vllm-0.33", "vllm-0.34"):
        started = on_device(load_engine(name), gb10)
        assert (started.max_batch, started.max_batched_tokens) == (256, 2048)


def test_no_validation_row_names_a_recent_version() -> None:
    names = {load_engine(n).name for n in NEW}
    for row in read_rows(DEFAULT_CSV):
        words = framework_words(row.get("framework"))
        if re.search(r"vllm|sglang", words, re.I):
            picked = engine_for(words)
            assert picked is None or picked.name not in names, row["id"]


# (system, then per SGLang 0.5 profile (chunked_prefill_size, largest decode graph, mem_fraction_static)) at tp 8:
# reserve (GiB) 0.5.0-0.5.2: 13.5 below 90 GiB, 16 to 160, 32 above; 0.5.3+: 0.5 + 1.5 x chunk + 2 x graphs
# (MiB per token / sequence) + 1, at least 10 above 60 GiB; 0.5.10+: + 8 MiB per prefill-graph size (CUDA)
SGLANG_TIERS = [
    ("dgx-h100", (8192, 160, 0.831), (8192, 512, 0.819), (8192, 512, 0.813)),  # 80 GiB: (80 - 13.5) / 80
    ("hgx-h200", (8192, 256, 0.887), (8192, 512, 0.897), (8192, 512, 0.894)),  # 141 GiB: (141 - 16) / 141
    ("dgx-a100-40gb", (8192, 160, 0.662), (4096, 160, 0.805), (4096, 160, 0.795)),
    ("dgx-b200", (16384, 512, 0.822), (16384, 512, 0.853), (16384, 512, 0.85)),  # 180 GiB: (180 - 32) / 180
    ("mi300x-8", (16384, 512, 0.833), (16384, 512, 0.862), (16384, 512, 0.862)),  # 0.5.10-0.5.19: no ROCm graphs
]


@pytest.mark.parametrize(("system", "v050", "v053", "v0510"), SGLANG_TIERS)
def test_the_sglang_05_tiers_follow_its_memory_settings(system: str, v050: tuple[int, int, float],
                                                        v053: tuple[int, int, float],
                                                        v0510: tuple[int, int, float]) -> None:
    device = load_system(system, 1).device
    for name, expected in (("sglang-0.4.7.post1", v050), ("sglang-0.4.9.post4", v050), ("sglang-0.5.0", v050),
                           ("sglang-0.5.3", v053), ("sglang-0.5.10", v0510)):
        started = on_device(load_engine(name), device)
        assert (started.max_batched_tokens, started.graph_max_batch, started.memory_fraction) == expected, name


def test_sglang_05_h20_and_small_devices() -> None:
    h100, h20 = load_system("dgx-h100", 1).device, load_system("hgx-h20", 1).device  # H20: 96 GB, 89.4 GiB
    assert on_device(load_engine("sglang-0.5.0"), h20).graph_max_batch == 256  # 0.5.0-0.5.2: the 90-100 GiB branch
    assert on_device(load_engine("sglang-0.5.3"), h20).graph_max_batch == 512
    small = (h100.memory[0].model_copy(update={"capacity": 24 * 2**30}), *h100.memory[1:])
    rtx = h100.model_copy(update={"name": "RTX 4090", "memory": small})
    assert (on_device(load_engine("sglang-0.5.10"), rtx).max_batched_tokens,
            on_device(load_engine("sglang-0.5.10"), rtx).graph_max_batch) == (2048, 80)
    assert (on_device(load_engine("sglang-0.5"), rtx).max_batched_tokens,
            on_device(load_engine("sglang-0.5"), rtx).graph_max_batch) == (4096, 160)  # new in 0.5.20
    assert on_device(load_engine("sglang-0.5"), rtx).memory_fraction == round((24 - 8.203125) / 24, 3)


def test_sglang_05_pads_dp_attention_and_absorbs_prefill_over_a_cached_prefix() -> None:
    for name in SGLANG_05:
        engine = load_engine(name)
        padded = name in ("sglang-0.4.9.post4", "sglang-0.5.0", "sglang-0.5.3", "sglang-0.5.10", "sglang-0.5")
        assert engine.pad_attention_groups is padded and engine.absorbed_mla_prefill, name
        assert engine.attention_dp_budget_divisor == "groups", name


# (system, then per SGLang 0.4.5.post3 / 0.4.6.post2 / 0.4.7 (chunked_prefill_size, largest graph, share)) at tp 8
SGLANG_04_TIERS = [
    ("dgx-h100", (8192, 160, 0.81), (8192, 160, 0.81), (8192, 160, 0.81)),  # 81,559 MiB: 0.81 at tp 8
    ("hgx-h20", (8192, 256, 0.855), (8192, 160, 0.88), (8192, 160, 0.88)),  # above 81,920 MiB, below 96 GiB
    ("hgx-h200", (8192, 256, 0.908), (8192, 256, 0.872), (8192, 256, 0.872)),  # (141 - 13 | 18) / 141
    ("dgx-b200", (8192, 256, 0.928), (8192, 256, 0.9), (16384, 512, 0.79)),  # 0.79 on CUDA above 180,000 MiB
    ("dgx-b300", (8192, 256, 0.952), (8192, 256, 0.9015), (16384, 512, 0.79)),
    ("mi300x-8", (8192, 256, 0.932), (8192, 256, 0.906), (16384, 512, 0.906)),  # ROCm: not the 0.79 rule
]


@pytest.mark.parametrize(("system", "v0453", "v0462", "v047"), SGLANG_04_TIERS)
def test_the_sglang_0_4_5_post3_to_0_4_7_tiers_follow_its_memory_settings(system: str, v0453: tuple[int, int, float],
                                                                          v0462: tuple[int, int, float],
                                                                          v047: tuple[int, int, float]) -> None:
    device = load_system(system, 1).device
    for name, expected in (("sglang-0.4.5.post3", v0453), ("sglang-0.4.6", v0453), ("sglang-0.4.6.post2", v0462),
                           ("sglang-0.4.7", v047)):
        started = on_device(load_engine(name), device)
        assert (started.max_batched_tokens, started.graph_max_batch, started.memory_fraction) == expected, name
