"""The layout of a run, derived once from its strategy and system: data-parallel ranks, micro-batches,
layers per pipeline stage (in each flavour a caller needs), and the tokens each rank works on. Functions
over numbers broadcast over arrays (a search evaluates many layouts at once); the spec-level ones take
specs. Where the ranks of each group sit is `plan.placement`.
"""

from __future__ import annotations

import math

from armillary.errors import SpecError
from armillary.numerics import Array, maximum, minimum, where
from armillary.plan import rules
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System


def data_parallel_degree(devices: Array, tp: Array, cp: Array, pp: Array) -> Array:
    """Data-parallel ranks of a layout that uses every device: devices // (tp cp pp), at least 1 (a layout
    whose degrees do not divide the devices is refused by `plan.rules.devices_match`)."""
    return maximum(devices // (tp * cp * pp), 1)


def data_parallel(strategy: Strategy, system: System) -> int:
    """Data-parallel ranks (model replicas in inference): the strategy's dp, else devices / (tp cp pp)."""
    model_parallel = strategy.tp * strategy.cp * strategy.pp
    dp = strategy.dp if strategy.dp is not None else system.devices // model_parallel
    if dp < 1:
        raise SpecError(f"strategy: tp*cp*pp = {model_parallel} exceeds the system's {system.devices} devices")
    return dp


def microbatch_count(global_batch: Array, micro_batch: Array, dp: Array) -> Array:
    """Micro-batches each pipeline runs per iteration: m = B / (b d) (SC'21 §3.4)."""
    return global_batch / (micro_batch * dp)


def rank_queries(seq_len: Array, cp: Array) -> Array:
    """Tokens of each sequence one rank works on: context parallelism splits the sequence over cp ranks,
    q = s / cp; attention still reads all s keys (Liu et al. 2023 §3; Megatron CP)."""
    return seq_len / cp


def stage_layers(layers: Array, pp: Array, first: Array, last: Array) -> tuple[Array, Array, Array]:
    """(first, middle, last) stage layer counts, fractional where the split is uneven: what the estimator
    prices. `first` / `last` = 0 means not given: the stages without a given count share the remaining
    layers evenly (Megatron's --decoder-first/last-pipeline-num-layers)."""
    given_first, given_last = first > 0, last > 0
    others = pp - given_first * 1.0 - given_last * 1.0
    share = (layers - first - last) / maximum(others, 1)
    return where(given_first, first, share), share, where(given_last, last, share)


def embedding_and_loss_split(layers: int, pp: int, vpp: int) -> tuple[int, int] | None:
    """(first, last) stage layer counts of Megatron-Core's uneven layouts, for layers that do not fill
    pp x vpp equal model chunks: the embedding takes the place of e layers in the first chunk and the loss
    (with any multi-token-prediction head) of t >= e layers in the last, the fewest e + t that make every
    chunk equal (`account_for_embedding_in_pipeline_split` / `account_for_loss_in_pipeline_split`: e = t = 1,
    Llama 3.1 405B's 126 layers on pp 8 x vpp 8; with interleaving the last chunk may hold the loss alone,
    DeepSeek-V3 on pp 8 x vpp 4 as Megatron-Bridge's H100 config's `Et|(tt|)*30mL`). A generic rule, not a
    recipe's table: DeepSeek-V3's 61 layers on pp 16 read 3 / 2 here, where Megatron-Bridge's recipe sets 4 / 1
    (a stack's `pipeline_layouts`, which the validation harness takes first). None when the layers split
    evenly, with one stage, or when no such layout leaves a layer in every other chunk
    (`rules.stages_split`)."""
    chunks = pp * vpp
    if layers % chunks == 0 or pp < 2:
        return None
    for slots in range(1, chunks):
        per_chunk, e = (layers + slots) // chunks, slots // 2
        loss_alone = vpp > 1  # the last chunk may then be the loss alone
        if (layers + slots) % chunks == 0 and e < per_chunk and slots - e <= per_chunk - (0 if loss_alone else 1):
            return vpp * per_chunk - e, vpp * per_chunk - (slots - e)
    return None


def stage_dense_layers(dense: Array, pp: Array, n_first: Array, n_mid: Array, n_last: Array) -> tuple[
        Array, Array, Array]:
    """How many of the leading `dense` layers (MoE models' first-k-dense layers; all layers of a dense
    model) each stage kind holds: the first stage takes them first; the middle stage reported is the last
    one, with the fewest; the last stage takes what reaches it (a single stage is its own last stage)."""
    first = minimum(dense, n_first)
    middle = minimum(maximum(dense - n_first - maximum(pp - 3, 0) * n_mid, 0), n_mid)
    last = where(pp == 1, first, minimum(maximum(dense - n_first - maximum(pp - 2, 0) * n_mid, 0), n_last))
    return first, middle, last


def whole_layers(layers: int, stages: int) -> list[int]:
    """Layers per (virtual) stage in whole numbers, as the simulator runs them: an even split, the
    remainder on the last stages."""
    return [layers // stages + (1 if v >= stages - layers % stages else 0) for v in range(stages)]


def busiest_stage_layers(layers: Array, pp: Array) -> int:
    """Layers of the fullest stage of an even whole split: ceil(L / pp) (inference memory and KV cache)."""
    return math.ceil(float(layers) / float(pp))


def fewest_stage_layers(layers: Array, pp: Array) -> Array:
    """Layers of the emptiest stage of an even whole split: floor(L / pp) (lower bounds of the search)."""
    return layers // pp


def chunk_size(layers: int, strategy: Strategy) -> float:
    """Layers of one full model chunk of `strategy` (`rules.chunk_layers` of its `stage_layers`)."""
    counts = stage_layers(layers, strategy.pp, strategy.first_stage_layers or 0, strategy.last_stage_layers or 0)
    return float(rules.chunk_layers(*counts, strategy.pp, strategy.vpp))


def stage_layer_kinds(model: Model, strategy: Strategy) -> list[list[bool]]:
    """Per virtual stage (chunk c of rank s is c pp + s), its layers as the simulator runs them: True for an
    MoE layer. Layers are split evenly in whole numbers (`whole_layers`), or as the strategy's first/last
    stage layer counts say with the other stages sharing the rest (`stage_layers`); leading dense layers
    come first."""
    pp, vpp, virtual = strategy.pp, strategy.vpp, strategy.pp * strategy.vpp
    first, last = strategy.first_stage_layers, strategy.last_stage_layers
    if first or last:
        n_first, share, n_last = (float(n) for n in stage_layers(model.layers, pp, first or 0, last or 0))
        split = rules.stages_split(model.layers, n_first, share, n_last, pp, vpp)
        if not split.ok:
            raise SpecError(f"simulate: {model.layers - (first or 0) - (last or 0)} layers over the stages "
                            f"without a given count: {split.message}")
        chunk = float(rules.chunk_layers(n_first, share, n_last, pp, vpp))
        # the first model chunk (rank 0's first) and the last (rank pp-1's last) hold what the first and
        # last stages lack (Megatron's uneven layouts); every other chunk the middle stages' share
        counts = [int(chunk)] * virtual
        counts[0] = int(n_first - (vpp - 1) * chunk)
        counts[-1] = int(n_last - (vpp - 1) * chunk)
    else:
        counts = whole_layers(model.layers, virtual)
    dense = model.moe.dense_layers if model.moe is not None else model.layers
    kinds, seen = [], 0
    for n in counts:
        kinds.append([seen + i >= dense for i in range(n)])
        seen += n
    return kinds
