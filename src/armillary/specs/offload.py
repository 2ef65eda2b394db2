"""What a training run keeps outside HBM (docs/memory-pool.md)."""

from __future__ import annotations

from typing import Self

from pydantic import Field, PositiveInt, model_validator

from armillary.specs.base import Spec


class Offload(Spec):
    """What lives outside HBM: in the system's memory pool where it has one, else in the device's second tier
    (`System.offload_path`; docs/memory-pool.md)."""

    weights: bool = Field(False, description="every weight, each layer's fetched before its forward and its "
                          "backward, two layers held in HBM")
    activations: bool = False
    optimizer: bool = Field(False, description="the optimizer states; the step streams them over the offload path")
    gradients: bool = Field(False, description="the gradient buffer, each micro-batch's gradients sent out as the "
                            "backward makes them and accumulated there, two layers' held in HBM (ZeRO-Offload, Ren "
                            "et al. ATC'21 §4.1: fp32 gradients and the optimizer step off the device); needs "
                            "optimizer")
    experts: bool = Field(False, description="the routed experts' weights only (MoE), each MoE layer's fetched before "
                          "its forward and its backward, two layers' held in HBM")
    activation_layers: PositiveInt | None = Field(
        None, description="with activations: offload those of only the first this many layers of each model "
        "chunk, the others stay in HBM (Transformer Engine cpu_offloading num_layers, Megatron-Core "
        "--cpu-offloading-num-layers, which NVIDIA's GB200 / GB300 recipes set); None: every layer's")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.activation_layers is not None and not self.activations:
            raise ValueError("offload.activation_layers needs offload.activations")
        if self.gradients and not self.optimizer:
            raise ValueError("offload.gradients needs offload.optimizer: the gradients go where the optimizer step "
                             "runs (ZeRO-Offload)")
        return self
