"""Typed results of an inference estimate. Times in seconds, memory in bytes per device."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from armillary import display
from armillary.estimate.result import ErrorBand, RunConfig, plain
from armillary.numerics import Array


@dataclass(frozen=True)
class PassTime:
    """Time of one forward pass of the model on a replica (or of a phase's passes), by component."""

    layers: Array  # weight GEMMs and element-wise kernels of all layers
    attention: Array  # fused attention kernels (prompt attention, KV-cache reads in decode)
    tp: Array  # tensor-parallel all-reduces (two per layer, latency-bound in decode) and the embedding's
    ep: Array  # MoE dispatch / combine all-to-alls
    pp: Array  # stage-to-stage sends
    ends: Array  # embedding, LM head, sampling, logits gather
    tier2: Array  # KV-cache reads from the second memory tier
    cp: Array = 0.0  # context parallelism: the K/V ring's exposed part (prefill), the output merge (decode)

    @property
    def total(self) -> Array:
        return self.layers + self.attention + self.tp + self.ep + self.pp + self.ends + self.tier2 + self.cp

    def __add__(self, other: PassTime) -> PassTime:
        return PassTime(*(getattr(self, f) + getattr(other, f) for f in PASS_PARTS))


PASS_PARTS = ("layers", "attention", "tp", "ep", "pp", "ends", "tier2", "cp")


@dataclass(frozen=True)
class InferenceMemory:
    """Bytes per device of the busiest pipeline stage."""

    weights: Array
    kv_cache: Array  # in HBM (whole pages)
    activations: Array  # working set of the largest pass (the prefill)
    kv_cache_tier2: Array  # on the second memory tier
    kv_per_sequence: Array  # cache of one sequence of input + output tokens, both tiers

    @property
    def total(self) -> Array:
        return self.weights + self.kv_cache + self.activations


@dataclass(frozen=True)
class InferenceEstimate:
    """A static batch on each of `replicas` model replicas."""

    batch: int
    input_len: int
    output_len: int
    devices_per_replica: int
    replicas: int
    prefill: PassTime  # the prompt pass: time to first token
    decode: PassTime  # all output_len - 1 decode steps
    ttft_s: Array  # time to first token
    tpot_s: Array  # mean time per output token after the first
    e2e_s: Array  # time to the last token
    output_tokens_per_s: Array  # all replicas
    output_tokens_per_s_per_device: Array
    memory: InferenceMemory
    hbm_capacity_bytes: Array
    max_batch: int  # largest batch whose KV cache fits next to the weights
    max_context: int  # longest sequence (input + output tokens) whose cache fits at this batch (no cache: 2^31-1)
    feasible: bool
    infeasible_reasons: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    error_band: ErrorBand | None = None  # how far to trust it (validation residuals of its regime)
    config: RunConfig | None = None  # the inputs (set by armillary.api)

    def headline(self) -> display.Headline:
        """The figures a repr shows: batch, TTFT, TPOT, output tokens/s per device, memory, feasibility."""
        return [("batch", str(self.batch)), ("ttft", display.seconds(self.ttft_s)),
                ("tpot", display.seconds(self.tpot_s)),
                ("output_tokens_per_s_per_device", display.number(self.output_tokens_per_s_per_device)),
                ("memory", f"{display.gib(self.memory.total)} of {display.gib(self.hbm_capacity_bytes)}"),
                ("feasible", "True" if self.feasible else f"False: {self.infeasible_reasons[0]}"
                 if self.infeasible_reasons else "False")]

    def __repr__(self) -> str:
        return display.short_repr(type(self).__name__, self.headline())

    def _repr_html_(self) -> str:
        return display.html_table(type(self).__name__, self.headline())

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("config")
        for phase in ("prefill", "decode"):
            d[phase]["total"] = getattr(self, phase).total
        d["memory"]["total"] = self.memory.total
        d["infeasible_reasons"], d["notes"] = list(self.infeasible_reasons), list(self.notes)
        return plain(d)
