"""Which project and which releases an engine profile describes (`Family`, `ReleaseRange`, in PEP 440 order:
`release_key`), and the values of some of its releases that differ from the profile's own (`ReleaseDefaults`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field, PositiveInt, model_validator

from armillary.specs.base import Spec
from armillary.specs.workload import Fp8Kernels, MlaDecode


class Family(StrEnum):
    """The project an engine profile describes (its PyPI package): what the rules that hold for one engine
    only go by (a benchmark client that launches it, a checkpoint's cache defaults, the error bands' regime),
    never the profile's name."""

    VLLM = "vllm"
    SGLANG = "sglang"
    TENSORRT_LLM = "tensorrt-llm"


_FAMILIES = ", ".join(f.value for f in Family)


class ReleaseRange(Spec):
    """The releases of an engine from `since` up to, not including, `before` (PEP 440 order: 0.4.4 before
    0.4.4.post1 before 0.4.5)."""

    since: str = Field(pattern=r"^\d+\.\d+(\.\d+)?(\.post\d+)?$", description="first release "
                       "(major.minor[.patch][.postN])")
    before: str = Field(pattern=r"^\d+\.\d+(\.\d+)?(\.post\d+)?$", description="first release after them")

    @model_validator(mode="after")
    def _ordered(self) -> ReleaseRange:
        if release_key(self.before) <= release_key(self.since):
            raise ValueError(f"before ({self.before}) must be a later release than since ({self.since})")
        return self

    def within(self, first: str, after: str) -> bool:
        """Whether these releases all lie from release `first` up to, not including, `after`."""
        return release_key(first) <= release_key(self.since) and release_key(self.before) <= release_key(after)

    def holds(self, release: tuple[int, int, int, int]) -> bool:
        """Whether release `release` ((major, minor, patch, post), `release_key`) is one of these."""
        return release_key(self.since) <= release < release_key(self.before)

    def covers(self, first: tuple[int, int, int], after: tuple[int, int, int]) -> bool:
        """Whether the releases from `first` up to, not including, `after` ((major, minor, patch), as
        `engine_versions.stated_releases` gives them) all lie within these."""
        return release_key(self.since) <= (*first, 0) and (*after, 0) <= release_key(self.before)

    @property
    def span(self) -> str:
        """The releases in words."""
        return f"releases {self.since} to before {self.before}"


def release_key(version: str) -> tuple[int, int, int, int]:
    """(major, minor, patch, post) of "0.7", "0.7.1" or "0.4.4.post1", patch and post 0 where not given: in
    PEP 440 order, a release's post releases after it and before the next."""
    release, _, post = version.partition(".post")
    major, minor, patch = [*release.split("."), "0"][:3]
    return int(major), int(minor), int(patch), int(post or 0)


class ReleaseDefaults(ReleaseRange):
    """Defaults of some of a profile's releases that differ from the profile's own (which are those of its
    latest releases): the releases from `since` up to, not including, `before`. It applies to a run whose
    stated version lies wholly within them (`resolve_defaults`): "vLLM 0.6.3" within 0.6 to 0.7.1, but "vLLM
    0.7", which spans 0.7.0 and 0.7.1 onwards, not; a run naming no version keeps the profile's numbers."""

    mla_decode: MlaDecode | None = Field(None, description="decode of multi-head latent attention; none: the "
                                         "profile's")
    chunked_token_budget: PositiveInt | None = Field(None, description="token budget with chunked prefill; none: "
                                                     "the profile's")
    mla_without_chunked_prefill: bool | None = Field(None, description="a model with multi-head latent attention "
                                                     "runs without chunked prefill; none: as the profile")
    mla_forces_no_chunked_prefill: bool | None = Field(None, description="a model with multi-head latent "
                                                       "attention runs without chunked prefill and prefix caching "
                                                       "even when launched with them; none: as the profile")
    memory_fraction: float | None = Field(None, gt=0, le=1, description="share of the memory the engine may use; "
                                          "none: the profile's")
    block_fp8_kernels: Fp8Kernels | None = Field(None, description="its GEMM kernels for fp8 weights with per-block "
                                                 "scales (vLLM before 0.20: Triton / CUTLASS, DeepGEMM not installed "
                                                 "with the wheel); none: the profile's")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the value comes from")

    def settings(self) -> dict[str, Any]:
        """The Engine fields these releases set (those left unset omitted)."""
        return {k: v for k in type(self).model_fields if k not in ("since", "before", "sources")
                and (v := getattr(self, k)) is not None}
