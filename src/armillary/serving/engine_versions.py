"""Which engine profile a framework's words name (`engine_for`): the engine and version read from them ("vLLM
0.7.3", "vllm==0.7.3", "TensorRT-LLM v0.17", "SGLang 0.4.4.post1") by one parser (`stated_version`), the profile
of that family whose `versions` hold that release, and the versions no profile describes (`UNDESCRIBED`), which
are refused with the reason, never given another version's profile.

The reading rule (a profile's `versions`, `unversioned` and `series` are its only statement of what it covers):
- a release ("0.6.3", "0.4.4.post1") is placed in pip's (PEP 440) order: a post release after its release and
  before the next, and goes to the profile whose `versions` hold it;
- a pre-release or dev build ("1.1.0rc2", "0.7.4.dev181+gf35f8e22") is placed as the release it leads to (1.1.0,
  0.7.4), not before it as pip orders it: a release candidate is cut from the branch of that release, and a dev
  build is main on its way to it, so their defaults are that release's rather than the one before's; a local
  label (+g...) is dropped;
- a series named without a patch ("vLLM 0.7", "SGLang 0.5") stands for every release of it: the profile whose
  `versions` hold them all, else the one profile of the family that states it takes the series (`series`),
  else it is refused naming the profiles that describe parts of it;
- an engine named without a version ("vLLM", "trtllm-serve") gets the one profile of its family marked
  `unversioned`; the first family named in the words is read, and a version anywhere wins over a name without.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from armillary.errors import SpecError
from armillary.presets.registry import preset_names
from armillary.serving.engine import Engine, load_engine
from armillary.serving.engine_releases import Family, release_key

# An engine named with a version as pip or a release note writes it ("vLLM 0.5.4", "vllm==0.4.2", "TensorRT-LLM
# v0.12.0", "SGLang 0.4.4.post1", "TensorRT-LLM 1.1.0rc2", "vLLM 0.7.4.dev181+gf35f8e22"): the family's name, then
# the release (major.minor[.patch]), a pre-release (aN, bN, rcN), a post release (.postN), a dev build (.devN)
# and a local label (+...), each optional (PEP 440's spellings: an optional separator before each)
_VERSIONED = re.compile(r"\b(?P<name>vllm|sglang|tensorrt-llm|trt-?llm)[\s=:]*v?"
                        r"(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
                        r"(?:[-_.]?(?P<pre>a|b|rc)\d+)?(?:[-_.]?post(?P<post>\d*))?(?:[-_.]?(?P<dev>dev)\d*)?"
                        r"(?:\+[a-z0-9.]+)?", re.I)
_FAMILY = {"vllm": Family.VLLM, "sglang": Family.SGLANG}  # anything else the pattern reads is TensorRT-LLM
# An engine named without a version: its family's words (TensorRT-LLM's own name, or its trtllm-serve /
# trtllm-bench commands; not trtllm-build, which built the TensorRT engines of releases no profile describes,
# nor "TRT-LLM" alone, which no profile has taken), anywhere in the words as a word of its own ("xvllm" is not vLLM)
_NAMED = re.compile(r"\b(?:(?P<tensorrt_llm>tensorrt-llm|trtllm-(?:bench|serve))|(?P<sglang>sglang)|(?P<vllm>vllm))",
                    re.I)

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



@dataclass(frozen=True)
class StatedVersion:
    """An engine and version read from words (`stated_version`)."""

    family: Family
    words: str  # the words read: "vLLM 0.7.4.dev181+gf35f8e22"
    major: int
    minor: int
    patch: int | None  # None: a series named without a patch ("vLLM 0.7")
    post: int | None  # None: not a post release
    build: bool  # a pre-release or dev build, placed as the release it leads to

    @property
    def series(self) -> bool:
        """Whether the words name a release series ("vLLM 0.7": no patch, nor a pre, post or dev part)."""
        return self.patch is None and self.post is None and not self.build

    @property
    def release(self) -> tuple[int, int, int, int]:
        """Where it is placed: (major, minor, patch, post) in pip's order (`engine.release_key`), a pre-release
        or dev build as the release it leads to, a series as its first release."""
        return self.major, self.minor, self.patch or 0, self.post or 0

    @property
    def text(self) -> str:
        """The release it is placed as, in words ("0.4.4.post1", "1.3.0", "0.7")."""
        release = ".".join(str(n) for n in (self.major, self.minor, self.patch) if n is not None)
        return release + (f".post{self.post}" if self.post is not None else "")


def stated_version(text: str) -> StatedVersion | None:
    """The first engine named with a version in `text` (`_VERSIONED`); None if none is."""
    found = _VERSIONED.search(text)
    if found is None:
        return None
    patch, post = found.group("patch"), found.group("post")
    return StatedVersion(_FAMILY.get(found.group("name").lower(), Family.TENSORRT_LLM), found.group(0),
                         int(found.group("major")), int(found.group("minor")), None if patch is None else int(patch),
                         None if post is None else int(post or 0), bool(found.group("pre") or found.group("dev")))


def engine_version(framework: str) -> tuple[Family, int, int] | None:
    """(family, major, minor) of the first engine named with a version in `framework`; None if none is."""
    stated = stated_version(framework)
    return None if stated is None else (stated.family, stated.major, stated.minor)


def _profiles() -> list[Engine]:
    return [load_engine(name) for name in preset_names("engines")]


def _describes(engine: Engine, stated: StatedVersion) -> bool:
    """Whether `engine`'s versions hold the release `stated` is placed as or, for a series, all its releases."""
    if not stated.series:
        return any(r.holds(stated.release) for r in engine.versions)
    first, after = _series(stated)
    return any(release_key(r.since) <= first and after <= release_key(r.before) for r in engine.versions)


def _in_series(engine: Engine, stated: StatedVersion) -> bool:
    """Whether `engine`'s versions hold any release of the series `stated` names."""
    first, after = _series(stated)
    return any(release_key(r.since) < after and first < release_key(r.before) for r in engine.versions)


def _series(stated: StatedVersion) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The first release of the series `stated` names and the first after it."""
    return (stated.major, stated.minor, 0, 0), (stated.major, stated.minor + 1, 0, 0)


def engine_for(framework: str, field: str = "framework") -> Engine | None:
    """The shipped engine profile `framework`'s words name (the module's reading rule): a version no profile
    describes is refused (SpecError naming the version, the reason where `UNDESCRIBED` has one, and the profiles
    of its family with their releases), never given another version's profile; an engine named without a
    version gets its family's `unversioned` profile; None where no engine is named."""
    stated = stated_version(framework)
    profiles = _profiles()
    if stated is None:
        named = _NAMED.search(framework)
        if named is None or named.lastgroup is None:
            return None
        unversioned = Family(named.lastgroup.replace("_", "-"))
        return next((e for e in profiles if e.family is unversioned and e.unversioned), None)
    family = [e for e in profiles if e.family is stated.family]
    found = next((e for e in family if _describes(e, stated)), None)
    if found is None and stated.series:
        found = next((e for e in family if f"{stated.major}.{stated.minor}" in e.series), None)
    if found is not None:
        return found
    parts = [e.name for e in family if stated.series and _in_series(e, stated)]
    placed = (stated.major, stated.minor, stated.patch or 0)
    why = (f"no one profile describes all its releases (some are those of {'; '.join(parts)}) and none takes "
           "the series (`series`): name the release" if parts else
           next((reason for fam, low, high, reason in UNDESCRIBED if fam is stated.family and low <= placed < high),
                "no profile describes this version"))
    built = " (a pre-release or dev build, read as the release it leads to)" if stated.build else ""
    family.sort(key=lambda e: min((release_key(r.since) for r in e.versions), default=(0, 0, 0, 0)))
    known = "; ".join(f"{e.name} [{e.releases_stated.removeprefix(e.family.value + ' ')}]" for e in family)
    raise SpecError(f"{field}: {stated.words!r} (version {stated.text}) has no engine profile: {why}{built}. "
                    f"Known versions: {known}. Give a profile file with that version's defaults "
                    "(workload.serving.engine: PATH.yaml)")


def stated_releases(text: str) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """The releases the first engine named with a version in `text` stands for: (first, first after them);
    "vLLM 0.6.3.post1" is 0.6.3 alone, "vLLM 0.7" every 0.7.x, "vLLM 0.7.4.dev181" 0.7.4 (a build is placed as
    the release it leads to). None if no version is named."""
    stated = stated_version(text)
    if stated is None:
        return None
    major, minor, patch, _ = stated.release
    if stated.series:
        return (major, minor, 0), (major, minor + 1, 0)
    return (major, minor, patch), (major, minor, patch + 1)
