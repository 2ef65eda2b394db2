"""armillary: analytical performance, memory and cost models of LLM training on large systems."""

from armillary.api import estimate, parameters
from armillary.comm.collectives import all_to_all_matrix, collective, collective_time
from armillary.comm.placement import Placement
from armillary.estimate.result import MemoryBreakdown, StepEstimate, TimeBreakdown, Traffic
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import SpecError, load_model, load_strategy, load_system, load_workload
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
from armillary.specs.workload import Training

__all__ = [
    "Algorithm",
    "Collective",
    "Device",
    "EfficiencyCurve",
    "MemoryBreakdown",
    "MemoryTier",
    "MlpKind",
    "Model",
    "Network",
    "NormKind",
    "Offload",
    "Overlap",
    "Placement",
    "PositionKind",
    "Precision",
    "Recompute",
    "Schedule",
    "SpecError",
    "StepEstimate",
    "Strategy",
    "System",
    "TimeBreakdown",
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
    "load_workload",
    "parameters",
]
