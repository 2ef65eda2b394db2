"""A chosen configuration as the arguments of the frameworks that run it: Megatron-LM / NeMo (Megatron-Core)
for a training strategy (`report.deploy_megatron`), vLLM and TensorRT-LLM for an inference one
(`report.deploy_serving`). Pure functions from specs to argument lists; what a framework cannot express is
said in `notes`, never dropped silently."""

from __future__ import annotations

import yaml

from armillary.errors import SpecError
from armillary.report.deploy_megatron import megatron
from armillary.report.deploy_serving import trtllm, vllm
from armillary.report.launch import Command, Deployment, Target
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training, Workload

__all__ = ["Command", "Deployment", "Target", "deployment", "megatron", "run_file_text", "trtllm", "vllm"]


def deployment(target: Target, model: Model, system: System, strategy: Strategy, workload: Workload) -> Deployment:
    """The arguments of `target` for this run; a training target for an inference run (or back) is an error."""
    if target is Target.MEGATRON:
        if not isinstance(workload, Training):
            raise SpecError("--emit megatron needs a training workload; vllm or trtllm export an inference run")
        return megatron(model, system, strategy, workload)
    if not isinstance(workload, Inference):
        raise SpecError(f"--emit {target.value} needs an inference workload; megatron exports a training run")
    return vllm(model, system, strategy, workload) if target is Target.VLLM else trtllm(model, strategy, workload)


def run_file_text(model: str, system: str, gpus: int, strategy: Strategy, workload: Workload,
                  comment: str = "") -> str:
    """A run file (RUN.yaml) for `strategy`: the model and system as named (presets or paths), the strategy's
    fields that differ from their defaults, and the workload."""
    data = {"model": model, "system": system, "gpus": gpus,
            "strategy": strategy.model_dump(mode="json", exclude_defaults=True),
            "workload": {"kind": workload.kind, **workload.model_dump(mode="json", exclude_defaults=True)}}
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.safe_dump(data, sort_keys=False)
