"""Which engine profile a version names (`engine_for`): the engine and version read from a run's words
("vLLM 0.7.3", "vllm==0.7.3", "TensorRT-LLM v0.17"), the profiles whose patterns cover that version, and the
versions no profile describes (`UNDESCRIBED`), which are refused with the reason, never given another
version's profile."""

from __future__ import annotations

import re

from armillary.errors import SpecError
from armillary.presets.registry import preset_names
from armillary.serving.engine import Engine, Family, load_engine

# An engine named with a version ("vLLM 0.5.4", "vllm 0.4.2" from a pip pin, "TensorRT-LLM v0.12.0",
# "SGLang 0.3.6"): the family (its profiles' `family`) and the major.minor read
_VERSIONED = re.compile(r"\b(vllm|sglang|tensorrt-llm|trt-?llm)[\s=:]*v?(\d+)\.(\d+)(?:\.(\d+))?", re.I)
_FAMILY = {"vllm": Family.VLLM, "sglang": Family.SGLANG}  # anything else the pattern reads is TensorRT-LLM

# Versions whose defaults no shipped profile describes, and why the nearest profile does not fit them
# (family, first version, the first version after them (major, minor, patch), reason). A row or a run naming
# one is refused, not given another version's profile. An end of (99, 0, 0) leaves the range open: every later
# release too.
UNDESCRIBED: tuple[tuple[Family, tuple[int, int, int], tuple[int, int, int], str], ...] = (
    (Family.VLLM, (0, 0, 0), (0, 6, 0),
     "vLLM before 0.6.0 (V0 engine before the v0.6.0 CPU-overhead work): v0.6.0 added "
     "multi-step scheduling and the async output processor, and the vLLM v0.6.0 blog (2024-09-05) profiled "
     "v0.5.3 at 33% of the time in the HTTP API server and 29% in scheduling (Llama 3 8B, 1x H100), which the "
     "vLLM 0.6 profile's host overheads (estimated after that work) do not describe; releases before vLLM PR #1926 "
     "(merged 2023-12-17) had no CUDA graphs at all"),
    (Family.TENSORRT_LLM, (0, 9, 0), (0, 17, 0),
     "TensorRT-LLM 0.9-0.16 (2024) built TensorRT engines with trtllm-build "
     "and ran them in the C++ executor / batch manager: the PyTorch backend (the 0.17 and 1.x profiles) came "
     "in 0.17, and the 1.x profile's CUDA graphs by default (PR #5480) and block reuse by default are the "
     "PyTorch backend's; the engine-build defaults of these releases (max_batch_size, max_num_tokens, "
     "tokens_per_block, enable_kv_cache_reuse) are not read here"),
    (Family.TENSORRT_LLM, (1, 3, 0), (99, 0, 0),
     "TensorRT-LLM 1.3 and later: no release after 1.2.1 was on PyPI when the "
     "1.1-1.2 profile was read (2026-12), none was read, and the latest LLM API reference (1.4.0rc docs) shows "
     "KvCacheConfig use_kv_cache_manager_v2 'auto' (False, a prototype, in the 1.2 cycle): a new KV cache manager "
     "whose sizing was not read; main also changed the padded CUDA-graph sizes to every 64 sequences (PR #12895, "
     "April 2026). So the tensorrt-llm-1.1 profile is not assumed to describe them. Unversioned TensorRT-LLM rows keep "
     "the tensorrt-llm-1.0 profile (the validation rows without a version are TensorRT-LLM 1.0's performance "
     "overview)"),
    (Family.SGLANG, (0, 0, 0), (0, 4, 0), "SGLang before 0.4 (2024): the SGLang 0.4 profile's host overhead is that of "
     "the zero-overhead (overlap) batch scheduler introduced with v0.4 (SGLang v0.4 blog, 2024-12-04), and "
     "its CUDA-graph and MLA defaults were read in 2025 releases"),
    (Family.SGLANG, (0, 5, 24), (99, 0, 0), "SGLang 0.5.24 and later (0.6 and 1.x included): no such release was on "
     "PyPI when the 0.5.x profiles were read (2026-12: the latest was 0.5.23), so none was read, and the 0.5.x "
     "releases changed their memory reserve, chunk and CUDA-graph defaults three times (0.5.3, 0.5.10, 0.5.20): "
     "later ones are not assumed to keep 0.5.23's (the sglang-0.5 profile)"),
    (Family.VLLM, (0, 35, 0), (99, 0, 0), "vLLM 0.35 and later (1.x included): no release after 0.34.0 was on PyPI "
     "when the 0.29-0.34 profiles were read (2026-12), and 0.34.0 changed the KV-cache sizing (extensible KV "
     "cache), the page size and the decode CUDA-graph sizes, so later releases are not assumed to keep them. "
     "(The source with a 40 GiB tier, infer_accelerator_scheduling_defaults in vllm/platforms/hardware_defaults.py, "
     "is the vLLM-HUST fork's, with Ascend branches; no upstream release 0.28.0-0.34.0 has it)"),
)


def engine_version(framework: str) -> tuple[Family, int, int] | None:
    """(family, major, minor) of the first engine named with a version in `framework`; None if none is."""
    found = _VERSIONED.search(framework)
    return None if found is None else _family_version(found)[:3]


def _family_version(found: re.Match[str]) -> tuple[Family, int, int, int]:
    """(family, major, minor, patch) a `_VERSIONED` match read (patch 0 where not given)."""
    return (_FAMILY.get(found.group(1).lower(), Family.TENSORRT_LLM), int(found.group(2)), int(found.group(3)),
            int(found.group(4) or 0))


def _reaches(engine: Engine, framework: str, version: int) -> bool:
    """Whether one of the engine's patterns matches `framework` across the version that starts at `version`
    (the version, not just the engine's name, nor words after it such as a trtllm-serve command)."""
    return any((m := re.search(p, framework, re.I)) is not None and m.start() <= version < m.end()
               for p in engine.matches)


def engine_for(framework: str, field: str = "framework") -> Engine | None:
    """The shipped engine whose patterns match the most of a framework description. An engine named with a
    version must be matched with that version: a version no profile covers is refused (SpecError naming the
    version and the profiles of its family), never given another version's profile. An engine named without
    a version gets its family's fallback profile (the patterns' bare names)."""
    scored = [(engine.match_length(framework), name, engine)
              for name in preset_names("engines") for engine in (load_engine(name),)]
    versioned = _VERSIONED.search(framework)
    # the longest match; with a version, among the profiles whose match covers the version itself
    best = max((s for s in scored if s[0] > 0 and (versioned is None
                                                   or _reaches(s[2], framework, versioned.start(2)))),
               key=lambda s: s[0], default=None)
    if versioned is not None and best is None:
        family, major, minor, patch = _family_version(versioned)
        why = next((reason for fam, low, high, reason in UNDESCRIBED
                    if fam == family and low <= (major, minor, patch) < high), "no profile describes this version")
        known = "; ".join(e.name for _, _, e in sorted(scored, key=lambda s: s[1]) if e.family is family)
        read = ".".join(g for g in versioned.group(2, 3, 4) if g is not None)
        raise SpecError(f"{field}: {versioned.group(0)!r} (version {read}) has no engine profile: {why}. "
                        f"Known versions: {known}. Give a profile file with that version's defaults "
                        "(workload.serving.engine: PATH.yaml)")
    return best[2] if best is not None else None


def stated_releases(text: str) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """The releases the first engine named with a version in `text` stands for: (first, first after them);
    "vLLM 0.6.3.post1" is 0.6.3 alone, "vLLM 0.7" every 0.7.x. None if no version is named."""
    found = _VERSIONED.search(text)
    if found is None:
        return None
    _, major, minor, patch = _family_version(found)
    if found.group(4) is None:
        return (major, minor, 0), (major, minor + 1, 0)
    return (major, minor, patch), (major, minor, patch + 1)
