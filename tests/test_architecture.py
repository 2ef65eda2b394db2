"""The shape of the package: a curated public API, imports that point down, no module below the facade
importing it."""

import ast
import pathlib

import armillary

SRC = pathlib.Path(armillary.__file__).parent

PUBLIC = sorted([  # the calls: `from armillary import *` and help(armillary) cover these (the specs are attributes)
    "__version__", "codesign", "collective", "compare_variants", "estimate", "load_device", "load_model", "load_run",
    "load_strategy", "load_system", "load_trace", "load_workload", "max_rate", "parameters", "poisson_trace",
    "run_codesign", "run_estimate", "run_search", "run_simulation", "search", "serve_benchmark", "simulate",
    "simulate_serving", "to_frame", "validate",
])
ATTRIBUTES = [  # specifications, results and errors, reachable as armillary.NAME
    "Algorithm", "ArmillaryError", "Attention", "Candidate", "CoDesignResult", "Collective", "CommCall", "Comparison",
    "Device", "EfficiencyCurve", "Inference", "InferenceEstimate", "InferenceMemory", "InferenceSearchResult",
    "InferenceSimulation", "InferenceSpace", "KvCache", "LayerCost", "Lora", "MaxRate", "MemoryBreakdown",
    "MemoryTier", "MissingExtra", "Model", "NetworkDimension", "NetworkKind", "CollectiveLibrary", "Composition",
    "Objective", "Offload", "Overlap", "PassTime", "Percentiles", "Precision", "RankOrder", "Recompute", "RowResult",
    "RunConfig", "Schedule", "SearchResult", "Serving", "ServingResult", "SimulationResult", "SpecError",
    "StepEstimate", "StoredPrecision", "Strategy", "StrategySpace", "SweepRow", "System", "SystemSpace",
    "TimeBreakdown", "Trace", "Traffic", "Training", "TrainingPrecision", "ZeroStage",
]


def _imports(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_public_api_is_pinned():
    assert sorted(armillary.__all__) == PUBLIC
    assert all(hasattr(armillary, name) for name in [*armillary.__all__, *ATTRIBUTES])
    assert isinstance(armillary.__version__, str) and armillary.__version__
    assert (SRC / "py.typed").is_file()


def test_only_the_package_and_the_command_line_import_the_facade():
    users = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if "armillary.api" in _imports(p)}
    assert users <= {"__init__.py"} | {str(p.relative_to(SRC)) for p in (SRC / "cli").rglob("*.py")}


def test_lower_layers_never_import_upper_ones():
    # each layer may import only those listed after it (and itself)
    order = ["cli", "report", "api", "validation", "search", "serving", "simulate", "estimate", "cost", "comm",
             "workload", "plan", "specs", "presets"]
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC).parts
        layer = parts[0].removesuffix(".py")
        if layer not in order:
            continue
        above = order[:order.index(layer)]
        for module in _imports(path):
            top = module.split(".")[1] if module.startswith("armillary.") else None
            # the specs' validators call plan.rules, a leaf module that depends only on numerics
            if layer == "specs" and module == "armillary.plan":
                continue
            assert top not in above, f"{path.relative_to(SRC)} imports {module}"
