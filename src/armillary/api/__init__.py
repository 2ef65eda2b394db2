"""The public facade: one call from specifications to a typed result.

Every function accepts spec objects, preset names, file paths or mappings alike (`specs.loading`), and
`gpus` sizes the system (default: the system's own size). Internal modules never import this one: they
call the layer below (`estimate.run`, `search.run`, `simulate.run`...).

One module per kind of call: `estimates` (run_estimate, compare_variants, parameters), `serving`
(simulate_serving, max_rate, serve_benchmark), `searches` (run_search, run_codesign), `simulations`
(run_simulation), `validation` (validate), `collectives` (collective); `inputs`: what they accept, loaded.
The formulas, the simulators (numba kernels), search spaces, the validation harness, collective sweeps and
run files load on the first call that needs them: `import armillary` costs about what the specs cost.
"""

from armillary.api.collectives import collective
from armillary.api.estimates import compare_variants, estimate, parameters, run_estimate
from armillary.api.inputs import ModelLike, StrategyLike, SystemLike, WorkloadLike
from armillary.api.searches import codesign, run_codesign, run_search, search
from armillary.api.serving import max_rate, serve_benchmark, simulate_serving
from armillary.api.simulations import run_simulation, simulate
from armillary.api.validation import validate

# in the order the API reference lists them (docs/api.md: members_order __all__), not sorted
__all__ = [  # noqa: RUF022
           "run_estimate", "estimate", "compare_variants", "simulate_serving", "max_rate", "serve_benchmark",
           "run_search", "search", "run_codesign", "codesign", "run_simulation", "simulate", "validate", "collective",
           "parameters", "ModelLike", "SystemLike", "StrategyLike", "WorkloadLike"]
