"""armillary: analytical performance, memory and cost models of LLM training and inference on large systems.

The public API: the calls of `api` (every one takes spec objects, preset names, file paths or mappings),
the specifications they take, and the results they return. Everything else is reachable through its
module (`armillary.estimate.training`, `armillary.comm.collectives`, ...) but may change between
versions.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

# the packages `armillary.estimate`, `armillary.search` and `armillary.simulate` first, so that the functions
# of the same names below keep them: importing a package later (its modules load on first use) would
# otherwise rebind the name to it
import armillary.estimate as _estimate_package  # noqa: F401
import armillary.search as _search_package  # noqa: F401
import armillary.simulate as _simulate_package  # noqa: F401
from armillary.api import (
    codesign,
    collective,
    compare_variants,
    estimate,
    parameters,
    search,
    simulate,
    simulate_serving,
    validate,
)
from armillary.errors import ArmillaryError, MissingExtra, SpecError
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.loading import load_device, load_model, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.network import CollectiveLibrary, NetworkDimension, NetworkKind
from armillary.specs.run import load_run
from armillary.specs.strategy import (
    Attention,
    Offload,
    Overlap,
    RankOrder,
    Recompute,
    Schedule,
    Strategy,
    TrainingPrecision,
    ZeroStage,
)
from armillary.specs.system import Device, MemoryTier, Precision, System
from armillary.specs.workload import Inference, KvCache, Lora, Serving, StoredPrecision, Training

if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow
    from armillary.estimate.compare import Comparison
    from armillary.estimate.inference_result import InferenceEstimate, InferenceMemory, PassTime
    from armillary.estimate.result import CommCall, LayerCost, MemoryBreakdown, StepEstimate, TimeBreakdown, Traffic
    from armillary.search.inference import InferenceSearchResult, InferenceSpace
    from armillary.search.run import Candidate, Objective, SearchResult
    from armillary.search.space import StrategySpace
    from armillary.search.systems import CoDesignResult, SystemSpace
    from armillary.serving.run import Percentiles, ServingResult
    from armillary.serving.trace import Trace, load_trace, poisson_trace
    from armillary.simulate.inference import InferenceSimulation
    from armillary.simulate.run import SimulationResult
    from armillary.validation.run import RowResult

# imported on first access, so that `import armillary` costs about what the specs cost: the results of the
# estimators and searches, the simulators' (their numba kernels load in about half a second), and what only
# some calls need (search spaces, serving traces, the validation harness)
_LAZY = {
    **dict.fromkeys(("InferenceEstimate", "InferenceMemory", "PassTime"), "armillary.estimate.inference_result"),
    **dict.fromkeys(("CommCall", "LayerCost", "MemoryBreakdown", "StepEstimate", "TimeBreakdown", "Traffic"),
                    "armillary.estimate.result"),
    **dict.fromkeys(("Candidate", "Objective", "SearchResult"), "armillary.search.run"),
    "StrategySpace": "armillary.search.space", "Comparison": "armillary.estimate.compare",
    **dict.fromkeys(("InferenceSearchResult", "InferenceSpace"), "armillary.search.inference"),
    **dict.fromkeys(("CoDesignResult", "SystemSpace"), "armillary.search.systems"),
    **dict.fromkeys(("Percentiles", "ServingResult"), "armillary.serving.run"),
    "InferenceSimulation": "armillary.simulate.inference", "SimulationResult": "armillary.simulate.run",
    "SweepRow": "armillary.comm.sweep", "RowResult": "armillary.validation.run",
    **dict.fromkeys(("Trace", "load_trace", "poisson_trace"), "armillary.serving.trace"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'armillary' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


try:
    __version__ = version("armillary")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "Algorithm",
    "ArmillaryError",
    "Attention",
    "Candidate",
    "CoDesignResult",
    "Collective",
    "CollectiveLibrary",
    "CommCall",
    "Comparison",
    "Composition",
    "Device",
    "EfficiencyCurve",
    "Inference",
    "InferenceEstimate",
    "InferenceMemory",
    "InferenceSearchResult",
    "InferenceSimulation",
    "InferenceSpace",
    "KvCache",
    "LayerCost",
    "Lora",
    "MemoryBreakdown",
    "MemoryTier",
    "MissingExtra",
    "Model",
    "NetworkDimension",
    "NetworkKind",
    "Objective",
    "Offload",
    "Overlap",
    "PassTime",
    "Percentiles",
    "Precision",
    "RankOrder",
    "Recompute",
    "RowResult",
    "Schedule",
    "SearchResult",
    "Serving",
    "ServingResult",
    "SimulationResult",
    "SpecError",
    "StepEstimate",
    "StoredPrecision",
    "Strategy",
    "StrategySpace",
    "SweepRow",
    "System",
    "SystemSpace",
    "TimeBreakdown",
    "Trace",
    "Traffic",
    "Training",
    "TrainingPrecision",
    "ZeroStage",
    "__version__",
    "codesign",
    "collective",
    "compare_variants",
    "estimate",
    "load_device",
    "load_model",
    "load_run",
    "load_strategy",
    "load_system",
    "load_trace",
    "load_workload",
    "parameters",
    "poisson_trace",
    "search",
    "simulate",
    "simulate_serving",
    "validate",
]
