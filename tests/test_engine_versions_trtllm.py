"""TensorRT-LLM 1.1 and 1.2 (`presets/engines/tensorrt-llm-1.1`): read in code of the 1.1 / 1.2 development
(no tagged release is on PyPI as a wheel), they keep 1.0's defaults except the one the 1.0 profile leaves open,
the decode CUDA graphs of trtllm-serve (CudaGraphConfig: 128 sequences when no size is set). 1.0 keeps its own
profile and the unversioned rows; 1.3 and later are refused with the reason. No validation row names 1.1 or later.
"""

import math
import re

import numpy as np
import pytest

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import IDENTITY, OPTIONAL_RULES, Engine, load_engine, overheads
from armillary.serving.engine_versions import UNDESCRIBED, engine_for
from armillary.serving.trtllm_bench import trtllm_bench_engine
from armillary.specs.loading import load_model, load_system
from armillary.specs.workload import Inference
from armillary.validation.run import DEFAULT_CSV, read_rows
from armillary.validation.vocabulary import framework_words

REFUSED = None

BOUNDARIES = [
    ("TensorRT-LLM v0.21.0", "tensorrt-llm-0.17"),
    ("TensorRT-LLM 1.0.0", "tensorrt-llm-1.0"), ("tensorrt-llm==1.0.0rc4", "tensorrt-llm-1.0"),
    ("TRT-LLM v1.0", "tensorrt-llm-1.0"),
    ("TensorRT-LLM 1.1.0", "tensorrt-llm-1.1"), ("TensorRT-LLM 1.1.0rc5", "tensorrt-llm-1.1"),
    ("trtllm 1.1.0", "tensorrt-llm-1.1"), ("TensorRT-LLM 1.2.0: trtllm-serve --tp_size 8", "tensorrt-llm-1.1"),
    ("tensorrt-llm==1.2.1", "tensorrt-llm-1.1"), ("TRT-LLM v1.2", "tensorrt-llm-1.1"),
    ("TensorRT-LLM 1.3.0rc27", REFUSED), ("TensorRT-LLM v1.4.0rc4", REFUSED), ("TensorRT-LLM 1.10.0", REFUSED),
    ("TensorRT-LLM 2.0", REFUSED),
    # no version: the 1.0 profile, as every unversioned TensorRT-LLM row of the validation CSV had before
    ("TensorRT-LLM (PyTorch backend), trtllm-bench throughput", "tensorrt-llm-1.0"),
    ("trtllm-serve --tp_size 8", "tensorrt-llm-1.0"),
]


@pytest.mark.parametrize(("framework", "profile"), BOUNDARIES)
def test_each_trtllm_1x_version_maps_to_the_profile_read_for_it_or_is_refused(framework: str,
                                                                              profile: str | None) -> None:
    words = framework_words(framework).replace("==", " ")
    if profile is None:
        with pytest.raises(SpecError, match=r"has no engine profile: TensorRT-LLM 1\.3 and later.*Known versions"):
            engine_for(words)
    else:
        picked = engine_for(words)
        assert picked is not None and picked.name == load_engine(profile).name


def test_the_refusal_says_what_was_read_and_keeps_the_unversioned_fallback() -> None:
    with pytest.raises(SpecError) as refused:
        engine_for("TensorRT-LLM 1.3.0rc27 (PyTorch backend)")
    message = str(refused.value)
    assert "1.2.1" in message and "use_kv_cache_manager_v2" in message and "tensorrt-llm-1.0" in message
    assert load_engine("tensorrt-llm-1.1").name in message and load_engine("tensorrt-llm-1.0").name in message
    [(low, high)] = [(lo, hi) for fam, lo, hi, _ in UNDESCRIBED if fam == "tensorrt-llm" and lo[0] == 1]
    assert low == (1, 3, 0) and high == (99, 0, 0)


def test_1_1_runs_as_1_0() -> None:
    """Every number of the 1.1 profile is 1.0's, the 128-sequence CUDA-graph default included (1.0's
    llm_args.py has it too: the 1.0 profile's graph_max_batch)."""
    old, new = load_engine("tensorrt-llm-1.0"), load_engine("tensorrt-llm-1.1")
    differ = {k for k in Engine.model_fields if getattr(old, k) != getattr(new, k)}
    assert differ == {"name", "versions", "unversioned", "sources"}  # 1.0 takes unversioned rows
    assert old.graph_max_batch == new.graph_max_batch == 128
    assert "or 128" not in new.sources["graph_max_batch"] and "1-31, 32, 64 and 128" in new.sources["graph_max_batch"]


def test_every_field_of_the_1_1_profile_is_read_or_an_assumption() -> None:
    engine = load_engine("tensorrt-llm-1.1")
    unset_rules = {k for k in OPTIONAL_RULES if k not in engine.model_fields_set}
    numbers = [k for k in Engine.model_fields if k not in (*IDENTITY, "sources") and k not in unset_rules]
    for field in numbers:
        assert re.match(r"(read|assumption)", engine.sources.get(field, "")), field
    read = [k for k in numbers if engine.sources[k].startswith("read")]
    assert len(read) >= len(numbers) // 2, read


def test_a_decode_step_past_128_sequences_runs_eagerly_under_trtllm_serve_not_trtllm_bench() -> None:
    # DeepSeek-V3's 61 layers on one stage: the short kernels of an eager step cost the host (SHORT_KERNELS);
    # trtllm-serve's graphs stop at 128 sequences, trtllm-bench's go to its max batch (trtllm_bench_engine)
    model = load_model("deepseek-v3")
    v3 = ModelArrays.of(model)
    serve = load_engine("tensorrt-llm-1.1")
    bench, _ = trtllm_bench_engine(serve, model, Inference(input_len=1000, output_len=1000), 8,
                                   load_system("hgx-h200", 1).device)
    new, old = overheads(serve, v3, 61), overheads(bench, v3, 61)
    assert new.graph_batch == 128 and math.isinf(old.graph_batch)
    for batch, eager in ((128, False), (129, True), (512, True)):
        step = np.ones((batch, 1)), np.full((batch, 1), 1000.0)
        assert float(new.eager(*step)[0]) == pytest.approx(new.eager_s if eager else 0.0)
        assert float(old.eager(*step)[0]) == 0.0
    assert new.eager_s == pytest.approx(old.eager_s) and new.eager_s > 0


def test_no_validation_row_names_trtllm_1_1_or_later() -> None:
    for row in read_rows(DEFAULT_CSV):
        words = framework_words(row.get("framework"))
        found = re.search(r"\b(tensorrt-llm|trt-?llm)[\s=:]*v?(\d+)\.(\d+)", words, re.I)
        if found is not None:
            assert (int(found.group(2)), int(found.group(3))) < (1, 1), (row["id"], words)


@pytest.mark.parametrize(("framework", "profile"), [
    ("TRT-LLM 1.2, trtllm-serve --tp_size 8", "tensorrt-llm-1.1"),  # 11 characters of version, 12 of command
    ("TensorRT-LLM 1.3.0rc27: trtllm-serve --tp_size 8", REFUSED),
    ("TensorRT-LLM 0.12.0: trtllm-serve --tp_size 8", REFUSED),
])
def test_a_version_followed_by_a_command_is_read_from_the_version(framework: str, profile: str | None) -> None:
    # the words after the version name the unversioned 1.0 profile's command (trtllm-serve): they must not stand
    # in for the version's own profile, nor for a refusal
    if profile is None:
        with pytest.raises(SpecError, match="has no engine profile"):
            engine_for(framework)
    else:
        picked = engine_for(framework)
        assert picked is not None and picked.name == load_engine(profile).name
