"""armillary: analytical performance, memory and cost models of LLM training and inference on large systems."""

from armillary.api import estimate, parameters, simulate_serving
from armillary.comm.collectives import all_to_all_matrix, collective, collective_time
from armillary.comm.placement import Placement
from armillary.errors import SpecError
from armillary.estimate.inference_result import InferenceEstimate, InferenceMemory, PassTime
from armillary.estimate.result import MemoryBreakdown, StepEstimate, TimeBreakdown, Traffic
from armillary.serving.run import Percentiles, ServingResult
from armillary.serving.trace import Trace, load_trace, poisson_trace
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.model import MlpKind, Model, NormKind, PositionKind
from armillary.specs.strategy import (
    Offload,
    Overlap,
    Recompute,
    Schedule,
    Strategy,
    TrainingPrecision,
    ZeroStage,
)
from armillary.specs.system import Device, EfficiencyCurve, MemoryTier, Network, Precision, System
from armillary.specs.workload import Inference, KvCache, Serving, StoredPrecision, Training

__all__ = [
    "Algorithm",
    "Collective",
    "Device",
    "EfficiencyCurve",
    "Inference",
    "InferenceEstimate",
    "InferenceMemory",
    "KvCache",
    "MemoryBreakdown",
    "MemoryTier",
    "MlpKind",
    "Model",
    "Network",
    "NormKind",
    "Offload",
    "Overlap",
    "PassTime",
    "Percentiles",
    "Placement",
    "PositionKind",
    "Precision",
    "Recompute",
    "Schedule",
    "Serving",
    "ServingResult",
    "SpecError",
    "StepEstimate",
    "StoredPrecision",
    "Strategy",
    "System",
    "TimeBreakdown",
    "Trace",
    "Traffic",
    "Training",
    "TrainingPrecision",
    "ZeroStage",
    "all_to_all_matrix",
    "collective",
    "collective_time",
    "estimate",
    "load_model",
    "load_strategy",
    "load_system",
    "load_trace",
    "load_workload",
    "parameters",
    "poisson_trace",
    "simulate_serving",
]
