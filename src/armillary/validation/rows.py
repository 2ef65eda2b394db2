"""Turn one measured training row of the validation CSV into specifications.

The model comes from the preset the row names (any spelling) and its architecture columns; a preset fills
only what the row leaves empty (MLP kind, norm, positions). The system comes from `gpu`, `n_gpus` and the
network columns; the strategy from the parallelism columns, and what they leave unstated from the row's
software stack (presets/stacks). Whatever the row does not state is assumed and written down.

This module assembles a run and reads its system; the rest is read by `row_columns` (numbers, `Unsupported`),
`row_model` (model, MTP), `row_layout` (batches, GPUs, pipeline layout), `row_stack` (software stack and its
recipe), `row_strategy` (parallel degrees, precision, sharding, experts), `row_recompute` (recomputation) and
`row_finetune` (LoRA / QLoRA); callers import those names from the modules that define them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from armillary.plan.layout import chunk_size, embedding_and_loss_split
from armillary.specs.loading import load_system
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training
from armillary.validation.gpu_words import memory_gb_of, system_preset_for
from armillary.validation.reading import search_run
from armillary.validation.row_columns import SHAPE, Unsupported, int_column, qualified_readings
from armillary.validation.row_finetune import read_finetune
from armillary.validation.row_layout import global_batch, read_devices, read_pipeline_layout
from armillary.validation.row_model import read_model, read_mtp
from armillary.validation.row_recompute import recompute_choices
from armillary.validation.row_stack import read_stack, recipe_of
from armillary.validation.row_strategy import read_strategy

# `load_system` is read from this module's globals, so tools/calibrate.py can patch it here
__all__ = ["RowSpecs", "row_specs"]


@dataclass(frozen=True)
class RowSpecs:
    model: Model
    system: System
    strategy: Strategy
    workload: Training
    assumptions: tuple[str, ...] = field(default_factory=tuple)


def _system(row: dict[str, str], n_gpus: int, notes: list[str]) -> System:
    preset = system_preset_for(row.get("gpu"))
    if preset is None:
        raise Unsupported(f"gpu: no system preset for {row.get('gpu')!r}")
    system = load_system(preset)
    stated_gb = memory_gb_of(row.get("gpu"))
    hbm = system.device.hbm
    if stated_gb is not None and abs(stated_gb * 2**30 / hbm.capacity - 1) > 0.1:
        # "80GB" parts hold about 80 GiB: the size in the GPU's name is read as GiB, like the presets
        device = system.device.model_copy(update={"memory": (
            hbm.model_copy(update={"capacity": stated_gb * 2**30}), *system.device.memory[1:])})
        system = system.model_copy(update={"device": device})
        notes.append(f"HBM {stated_gb:g} GiB as the gpu column states (the {preset} preset has "
                     f"{hbm.capacity / 2**30:g} GiB); its peak rates kept")
    # the compute fabric only: a storage, management or front-end network named beside it is not read (the
    # NIC reading the collective rows use, fabric_words.nic_bandwidth_per_gpu)
    from armillary.validation.fabric_words import compute_network_text, nic_bandwidth_per_gpu, split_port_named

    inter = row.get("inter_net", "")
    per_node = search_run(r"(\d+)\s*Gbps node-node", inter)  # llm-foundry's table heading
    rate, _ = nic_bandwidth_per_gpu(compute_network_text(inter), system.devices_per_node)
    if rate is None and per_node is None and (split := split_port_named(compute_network_text(inter))) is not None:
        # the generation's full rate would be read (the preset's NDR 400 Gb/s): the split port's is half of it
        raise Unsupported(f"inter_net: {inter!r} names {split.upper()} ports without the NICs' count and rate "
                          "(e.g. '8x 200 Gb/s NDR200 per node')")
    if per_node:
        gbps: float | None = float(per_node.group(1)) / system.devices_per_node
    elif rate is not None:
        gbps = rate * 8 / 1e9
    else:
        gbps = None
        notes.append(f"scale-out network not stated: {system.network[-1].name} of the {preset} preset")
    if gbps is not None:
        system = system.with_dimension(-1, bandwidth=gbps * 1e9 / 8)
    return _on_stated_fabric(system, preset, inter, gbps, notes).with_devices(n_gpus)


def _on_stated_fabric(system: System, preset: str, inter: str, gbps: float | None, notes: list[str]) -> System:
    """A stated scale-out fabric other than the InfiniBand of the preset (RoCE, EFA, Omni-Path, Pollara, TCPXO)
    on the fabric preset the collective rows are read with (`fabric_words`: one reading of a network's words
    for every kind of row); InfiniBand keeps the system preset's own calibrated tier."""
    from armillary.comm.fabrics import with_fabric
    from armillary.validation.fabric_words import compute_network_text, fabric_family, fabric_of

    family, _ = fabric_family(compute_network_text(inter))
    if family is None or family == "infiniband" or len(system.network) < 2:
        return system
    if family == "ethernet":
        notes.append(f"scale-out fabric plain Ethernet ({inter!r}): no fabric preset; the {preset} preset's tier at "
                     "the stated bandwidth")
        return system
    rate = gbps * 1e9 / 8 if gbps is not None else None
    name = fabric_of(family, compute_network_text(inter), rate, preset, False)
    notes.append(f"scale-out fabric {name} (inter_net: {family})"
                 + ("" if rate is not None else f", its NICs at the {preset} preset's rate per GPU"))
    return with_fabric(system, name, rate if rate is not None else system.network[-1].bandwidth)


def _described(choice: dict[str, Any]) -> str:
    """A recomputation choice in words: 'recompute=full, recompute_layers=5, offload.activation_layers=40'."""
    said: list[str] = []
    for key, value in choice.items():
        if isinstance(value, dict):
            said.extend(f"{key}.{k}={v}" for k, v in value.items())
        else:
            said.append(f"{key}={'+'.join(value) if isinstance(value, tuple) else value}")
    return ", ".join(said)


def row_specs(row: dict[str, str]) -> list[RowSpecs]:
    """Candidate specifications for a row (several when recomputation is not stated, least first)."""
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported("n_gpus: not stated")
    notes: list[str] = []
    finetune = read_finetune(row, notes)
    stack = read_stack(row, notes)
    seq, gbs = int_column(row, "seq"), global_batch(row, stack, n_gpus, notes)
    if seq is None and stack.seq_len is not None:
        seq = stack.seq_len
        notes.append(f"seq={seq}: the default of {stack.name} training configs (not stated)")
    if seq is None or gbs is None:
        raise Unsupported(f"{'seq' if seq is None else 'gbs'}: not stated")
    n_gpus = read_devices(row, n_gpus, gbs, notes)
    model = read_model(row, notes)
    system = _system(row, n_gpus, notes)
    strategy = read_strategy(row, n_gpus, stack, notes)
    recipe = recipe_of(row, stack)
    mtp = read_mtp(row, model, notes, recipe)
    layout = read_pipeline_layout(row, stack, strategy["pp"], strategy["vpp"], model.mtp_layers if mtp else 0, notes,
                                  recipe)
    uneven = None if layout is not None else embedding_and_loss_split(model.layers, strategy["pp"], strategy["vpp"])
    if layout is not None:
        strategy["pipeline_layout"] = layout
    elif uneven is not None:
        strategy.update(first_stage_layers=uneven[0], last_stage_layers=uneven[1])
        notes.append(f"{model.layers} layers do not fill pp x vpp = {strategy['pp'] * strategy['vpp']} equal chunks: "
                     f"the embedding and loss stand in for layers (Megatron-Core's uneven layout), first / last "
                     f"stage {uneven[0]} / {uneven[1]} layers")
    notes.extend(qualified_readings(row, ("n_gpus", "seq", "gbs", "mbs", "tp", "pp", "dp", "cp", "ep", "vpp", *SHAPE,
                                          "experts", "topk")))
    workload = Training(seq_len=seq, global_batch=gbs, finetune=finetune, mtp=mtp)
    chunk = int(chunk_size(model.layers, Strategy.model_validate(strategy)))
    out = []
    for recompute in recompute_choices(row, model, stack, chunk, notes):
        st = Strategy.model_validate({**strategy, **recompute})
        out.append(RowSpecs(model, system, st, workload, (*notes, _described(recompute))))
    return out
