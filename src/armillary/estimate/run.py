"""One call from specifications to an estimate: a training iteration or a static inference batch."""

from __future__ import annotations

from armillary.errors import SpecError
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.invariants import check_estimate
from armillary.estimate.result import StepEstimate
from armillary.estimate.static_batch import estimate_inference
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import data_parallel
from armillary.specs.model import Model
from armillary.specs.pipeline_layout import layout_layers, layout_mtp
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training, Workload


def estimate_run(model: Model, system: System, strategy: Strategy, workload: Workload) -> (
        StepEstimate | InferenceEstimate):
    """Estimate one training iteration (a training workload) or a static inference batch (an inference
    workload) on all of `system`'s devices: dp data-parallel ranks (model replicas in inference) from
    `plan.layout.data_parallel`."""
    dp = data_parallel(strategy, system)
    if not isinstance(workload, Inference) and strategy.attention_dp > 1:
        raise SpecError("strategy.attention_dp: data-parallel attention is a serving layout; training needs "
                        "attention_dp: 1")
    if strategy.pipeline_layout is not None and (layers := layout_layers(strategy.pipeline_layout)) != model.layers:
        raise SpecError(f"strategy.pipeline_layout: its chunks hold {layers} transformer layers ('t'), the model has "
                        f"{model.layers}: give every layer once (Megatron-Core validate_layer_layout)")
    if (isinstance(workload, Training) and strategy.pipeline_layout is not None
            and (placed := layout_mtp(strategy.pipeline_layout)) != (trained := model.mtp_layers * workload.mtp)):
        raise SpecError(f"strategy.pipeline_layout: it places {placed} multi-token-prediction modules ('m'), the run "
                        f"trains {trained} (model.mtp_layers {model.mtp_layers}, training.mtp {workload.mtp})")
    if isinstance(workload, Inference):
        return check_estimate(estimate_inference(ModelArrays.of(model), strategy, workload, system, dp))
    return check_estimate(estimate_training(ModelArrays.of(model), StrategyArrays.of(strategy, dp),
                                            TrainingArrays.of(workload), system))


def estimate_training_run(model: Model, system: System, strategy: Strategy, workload: Training) -> StepEstimate:
    """`estimate_run` of a training workload, typed as such."""
    result = estimate_run(model, system, strategy, workload)
    assert isinstance(result, StepEstimate)
    return result


def estimate_inference_run(model: Model, system: System, strategy: Strategy, workload: Inference) -> (
        InferenceEstimate):
    """`estimate_run` of an inference workload, typed as such."""
    result = estimate_run(model, system, strategy, workload)
    assert isinstance(result, InferenceEstimate)
    return result
