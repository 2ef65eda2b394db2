"""An engine's defaults by the device it starts on and the size of its launch (`DeviceDefaults`, one tier
of a profile's `devices`): vLLM V1's batch limits and CUDA-graph sizes by device, SGLang's chunk, CUDA-graph batch
and memory share by device memory, tp x pp ranks and data-parallel attention groups."""

from __future__ import annotations

from typing import Any

from pydantic import Field, NonNegativeFloat, PositiveInt

from armillary.specs.base import Spec
from armillary.specs.device import Device

# DeviceDefaults' fields that say which devices a tier fits or how its memory share is computed, not Engine fields
_TIER_TERMS = ("at_least_gib", "names", "except_names", "memory_fraction", "memory_fraction_by_ranks",
               "graph_max_batch_by_tp", "memory_reserve_gib", "reserve_per_rank_gib", "reserve_per_graph_batch_mib",
               "dp_attention_reserve_gib", "dp_attention_reserve_per_graph_batch_mib", "prefill_graph_reserve_gib",
               "reserve_floor_gib")
# The tensor parallelism a run that states none is taken at (tp x pp = 8, one 8-GPU server): the device tiers'
# memory shares were read at it before they were read by the run's own
ASSUMED_TP = 8


class Step(Spec):
    """One step of a value that an engine chooses by a count (tp x pp ranks, tp, CUDA-graph batch): it applies
    from `at_least` on; of a list in decreasing `at_least`, the first the count reaches applies (`step_value`)."""

    at_least: NonNegativeFloat = Field(description="the count from which the value applies")
    value: NonNegativeFloat = Field(description="the value")


def step_value(steps: tuple[Step, ...], count: float) -> float | None:
    """The value of the first of `steps` whose `at_least` `count` reaches (None: none, or no steps)."""
    return next((s.value for s in steps if count >= s.at_least), None)



class DeviceDefaults(Spec):
    """One tier of the defaults an engine sets from the device it starts on (vLLM V1's get_batch_defaults and
    largest CUDA-graph capture size; SGLang's chunk size, CUDA-graph batch and the memory it reserves out of
    mem_fraction_static). A profile lists its tiers in order and the first the device fits applies:
    memory at least `at_least_gib`, a name containing one of `names` (if any) and none of `except_names`. A
    number the tier leaves unset is the profile's own; a device no tier fits keeps the profile's numbers."""

    at_least_gib: float = Field(0.0, ge=0, description="device memory (GiB, 2^30 bytes) from which it applies")
    names: tuple[str, ...] = Field((), description="only devices whose name contains one of these (lower-case "
                                   "substrings); empty: any device")
    except_names: tuple[str, ...] = Field((), description="not devices whose name contains one of these")
    max_batch: PositiveInt | None = Field(None, description="sequences per iteration; none: the profile's")
    max_batched_tokens: PositiveInt | None = Field(None, description="new tokens per iteration; none: the profile's")
    graph_max_batch: PositiveInt | None = Field(None, description="largest CUDA-graph decode batch; none: the "
                                                "profile's")
    memory_fraction: float | None = Field(None, gt=0, le=1, description="the engine's memory share on such a "
                                          "device (SGLang 0.4.5.post3-0.4.7's fixed mem_fraction_static); none: "
                                          "by ranks (memory_fraction_by_ranks), else from memory_reserve_gib, else "
                                          "the profile's")
    memory_fraction_by_ranks: tuple[Step, ...] = Field(
        (), description="the memory share by the run's tp x pp ranks, where memory_fraction is unset (SGLang "
        "0.4.0-0.4.7's mem_fraction_static table: 0.79 from 16 ranks, 0.81 from 8, 0.85 from 4, 0.87 from 2, 0.88 "
        "at 1); empty: from memory_reserve_gib")
    graph_max_batch_by_tp: tuple[Step, ...] = Field(
        (), description="the largest CUDA-graph decode batch by the run's tp (SGLang: smaller below tp 4); empty: "
        "graph_max_batch")
    memory_reserve_gib: NonNegativeFloat | None = Field(
        None, description="memory (GiB) the engine keeps out of its static share on such a device whatever the "
        "launch, where memory_fraction and memory_fraction_by_ranks are unset: memory_fraction = (memory - "
        "reserve) / memory, rounded to 3 places, the reserve this plus the terms below (SGLang's "
        "mem_fraction_static when unset, ServerArgs._handle_gpu_memory_settings); none: the profile's "
        "memory_fraction")
    reserve_per_rank_gib: NonNegativeFloat = Field(0.0, description="reserve (GiB) added per tp x pp rank of the "
                                                   "run (SGLang 0.4.7.post1-0.5.2: 0.5 or 0.1; 0.5.3 on: 1/8)")
    reserve_per_graph_batch_mib: NonNegativeFloat = Field(0.0, description="reserve (MiB) added per sequence of the "
                                                          "largest CUDA-graph decode batch (SGLang 0.5.3 on: 2)")
    dp_attention_reserve_gib: NonNegativeFloat = Field(0.0, description="reserve (GiB) added with data-parallel "
                                                       "attention (SGLang 0.4.7.post1-0.5.2: 4)")
    dp_attention_reserve_per_graph_batch_mib: tuple[Step, ...] = Field(
        (), description="with data-parallel attention, reserve (MiB) added per sequence of the largest CUDA-graph "
        "batch and attention group, by that batch (SGLang 0.5.3 on: 3, 4.5 above 300 sequences); empty: none")
    prefill_graph_reserve_gib: NonNegativeFloat = Field(0.0, description="reserve (GiB) of the prefill (piecewise) "
                                                        "CUDA graphs, which data-parallel attention and pp > 1 turn "
                                                        "off (SGLang 0.5.10 on: 8 MiB per captured size)")
    reserve_floor_gib: NonNegativeFloat = Field(0.0, description="the least reserve (GiB) on such a device (SGLang "
                                                "0.5.3 on: 10 above 60 GiB)")

    def fits(self, device: Device) -> bool:
        """Whether `device` is one of this tier's (memory, names, excluded names)."""
        name = device.name.lower()
        return (device.hbm.capacity >= self.at_least_gib * 2**30
                and (not self.names or any(n in name for n in self.names))
                and not any(n in name for n in self.except_names))

    def settings(self, device: Device, graph_max_batch: int | None = None, tp: int | None = None, pp: int = 1,
                 attention_dp: int = 1) -> dict[str, Any]:
        """The Engine fields this tier sets on `device` (those it leaves unset omitted) for a run of `tp` x `pp`
        ranks (tp None: `ASSUMED_TP`) with `attention_dp` data-parallel attention groups: the batch numbers,
        and the memory share (`memory_share`); `graph_max_batch` is the profile's, for a tier that sets none."""
        tp = ASSUMED_TP if tp is None else tp
        found: dict[str, Any] = {k: v for k in type(self).model_fields if k not in _TIER_TERMS
                                 and (v := getattr(self, k)) is not None}
        if (by_tp := step_value(self.graph_max_batch_by_tp, tp)) is not None:
            found["graph_max_batch"] = int(by_tp)
        share = self.memory_share(device, found.get("graph_max_batch", graph_max_batch), tp, pp, attention_dp)
        if share is not None:
            found["memory_fraction"] = share
        return found

    def memory_share(self, device: Device, graph_max_batch: int | None, tp: int, pp: int = 1,
                     attention_dp: int = 1) -> float | None:
        """The engine's memory share on `device` for a run of `tp` x `pp` ranks with `attention_dp` attention
        groups and decode graphs to `graph_max_batch` sequences (None: none): the tier's fixed share, else its
        share by ranks, else (memory - reserve) / memory rounded to 3 places, the reserve its constant plus its
        terms per rank, per graph sequence, for data-parallel attention and for the prefill graphs (off with
        data-parallel attention or pp > 1), at least its floor (SGLang's mem_fraction_static when unset:
        ServerArgs.__post_init__ / _handle_gpu_memory_settings; each profile's sources say its release's rule);
        None: the profile's own."""
        if self.memory_fraction is not None:
            return self.memory_fraction
        if (by_ranks := step_value(self.memory_fraction_by_ranks, tp * pp)) is not None:
            return by_ranks
        if self.memory_reserve_gib is None:
            return None
        graphs = float(graph_max_batch or 0)
        dp = attention_dp > 1
        reserve = (self.memory_reserve_gib + self.reserve_per_rank_gib * tp * pp
                   + self.reserve_per_graph_batch_mib * graphs / 1024)
        if dp:
            per_group = step_value(self.dp_attention_reserve_per_graph_batch_mib, graphs) or 0.0
            reserve += self.dp_attention_reserve_gib + per_group * graphs * attention_dp / 1024
        elif pp == 1:
            reserve += self.prefill_graph_reserve_gib
        reserve = max(reserve, self.reserve_floor_gib)
        memory = float(device.hbm.capacity) / 2**30
        return round((memory - reserve) / memory, 3)
