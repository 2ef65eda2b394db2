"""armillary: analytical performance, memory and cost models of LLM training and inference on large systems.

The calls (each takes preset names, file paths, mappings or spec objects, in the order model, system,
strategy, workload):

    run_estimate      one training step or static inference batch -> StepEstimate / InferenceEstimate
    run_search        the best strategies of a space -> SearchResult / InferenceSearchResult
    run_simulation    a step as a task graph on the event engine -> SimulationResult / InferenceSimulation
    simulate_serving  a request stream on the replicas -> ServingResult
    max_rate          the largest request rate meeting the SLOs -> MaxRate (.rate)
    run_codesign      the fastest strategy per system of a system space, with its Pareto front
    collective, compare_variants, validate, parameters, serve_benchmark (codesign: its old order)
    to_frame          any result as a pandas DataFrame, with the inputs it was computed from
    load_model, load_system, load_strategy, load_workload, load_run, load_trace, poisson_trace

Specifications (attributes of this module): Model, System, Device, Strategy, Training, Inference, Serving,
Lora, KvCache and their enums. Results: StepEstimate, InferenceEstimate, ServingResult, SearchResult, ...
Errors: ArmillaryError, SpecError, MissingExtra.

The subpackages are modules: `armillary.estimate.training`, `armillary.search.sweep.sweep`,
`armillary.simulate.run`, `armillary.comm.collectives`, ... (they may change between versions).
`armillary.estimate(...)`, `armillary.search(...)` and `armillary.simulate(...)` still run the calls they
named before 0.x (search's workload before its strategy), for existing notebooks; typed code should use
the run_* names. Defaults shared with the command line: `armillary.defaults`.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import TYPE_CHECKING, Any

from armillary import api
from armillary.api import (
    codesign,
    collective,
    compare_variants,
    max_rate,
    parameters,
    run_codesign,
    run_estimate,
    run_search,
    run_simulation,
    serve_benchmark,
    simulate_serving,
    validate,
)
from armillary.errors import ArmillaryError as ArmillaryError
from armillary.errors import MissingExtra as MissingExtra
from armillary.errors import SpecError as SpecError
from armillary.specs.communication import Algorithm as Algorithm
from armillary.specs.communication import Collective as Collective
from armillary.specs.communication import Composition as Composition
from armillary.specs.device import Device as Device
from armillary.specs.device import Precision as Precision
from armillary.specs.efficiency import EfficiencyCurve as EfficiencyCurve
from armillary.specs.loading import load_device as load_device
from armillary.specs.loading import load_model as load_model
from armillary.specs.loading import load_strategy as load_strategy
from armillary.specs.loading import load_system as load_system
from armillary.specs.loading import load_workload as load_workload
from armillary.specs.memory import MemoryTier as MemoryTier
from armillary.specs.model import Model as Model
from armillary.specs.network import CollectiveLibrary as CollectiveLibrary
from armillary.specs.network import NetworkDimension as NetworkDimension
from armillary.specs.network import NetworkKind as NetworkKind
from armillary.specs.run import load_run as load_run
from armillary.specs.strategy import Attention as Attention
from armillary.specs.strategy import Offload as Offload
from armillary.specs.strategy import Overlap as Overlap
from armillary.specs.strategy import RankOrder as RankOrder
from armillary.specs.strategy import Recompute as Recompute
from armillary.specs.strategy import Schedule as Schedule
from armillary.specs.strategy import Strategy as Strategy
from armillary.specs.strategy import TrainingPrecision as TrainingPrecision
from armillary.specs.strategy import ZeroStage as ZeroStage
from armillary.specs.system import System as System
from armillary.specs.workload import Inference as Inference
from armillary.specs.workload import KvCache as KvCache
from armillary.specs.workload import Lora as Lora
from armillary.specs.workload import Serving as Serving
from armillary.specs.workload import StoredPrecision as StoredPrecision
from armillary.specs.workload import Training as Training

if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow as SweepRow
    from armillary.estimate.compare import Comparison as Comparison
    from armillary.estimate.inference_result import InferenceEstimate as InferenceEstimate
    from armillary.estimate.inference_result import InferenceMemory as InferenceMemory
    from armillary.estimate.inference_result import PassTime as PassTime
    from armillary.estimate.result import CommCall as CommCall
    from armillary.estimate.result import LayerCost as LayerCost
    from armillary.estimate.result import MemoryBreakdown as MemoryBreakdown
    from armillary.estimate.result import RunConfig as RunConfig
    from armillary.estimate.result import StepEstimate as StepEstimate
    from armillary.estimate.result import TimeBreakdown as TimeBreakdown
    from armillary.estimate.result import Traffic as Traffic
    from armillary.report.frames import to_frame as to_frame
    from armillary.search.inference import InferenceSearchResult as InferenceSearchResult
    from armillary.search.inference import InferenceSpace as InferenceSpace
    from armillary.search.run import Candidate as Candidate
    from armillary.search.run import Objective as Objective
    from armillary.search.run import SearchResult as SearchResult
    from armillary.search.space import StrategySpace as StrategySpace
    from armillary.search.systems import CoDesignResult as CoDesignResult
    from armillary.search.systems import SystemSpace as SystemSpace
    from armillary.serving.rate import MaxRate as MaxRate
    from armillary.serving.run import Percentiles as Percentiles
    from armillary.serving.run import ServingResult as ServingResult
    from armillary.serving.trace import Trace as Trace
    from armillary.serving.trace import load_trace as load_trace
    from armillary.serving.trace import poisson_trace as poisson_trace
    from armillary.simulate.inference import InferenceSimulation as InferenceSimulation
    from armillary.simulate.run import SimulationResult as SimulationResult
    from armillary.validation.run import RowResult as RowResult

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
    "MaxRate": "armillary.serving.rate", "RunConfig": "armillary.estimate.result",
    "to_frame": "armillary.report.frames",
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



class _CallablePackage(ModuleType):
    """`armillary.estimate`, `armillary.search` and `armillary.simulate` are packages (`armillary.search.sweep`
    is a module) that, called, still run the `api` call of their name, as they did when the top level bound
    the calls over them: `run_estimate`, `run_search` (workload before strategy) and `run_simulation` are
    the names to use."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(api, self.__name__.rpartition(".")[2])(*args, **kwargs)


for _name in ("estimate", "search", "simulate"):
    import_module(f"armillary.{_name}").__class__ = _CallablePackage
del _name

# what `from armillary import *` binds and `help(armillary)` documents: the calls (the specifications and
# results are attributes, listed in the docstring above, so that help stays a page rather than 16,000 lines)
__all__ = [
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
    "max_rate",
    "parameters",
    "poisson_trace",
    "run_codesign",
    "run_estimate",
    "run_search",
    "run_simulation",
    "search",
    "serve_benchmark",
    "simulate",
    "simulate_serving",
    "to_frame",
    "validate",
]
