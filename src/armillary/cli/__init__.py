"""Command line: each command parses its options, makes one library call (`armillary.api`, or the module
function where the facade has none) and renders the result with `armillary.report`. One module per
command group; errors are turned into `error: message` and exit code 2 in one place (`common.handled`)."""

from __future__ import annotations

import typer

from armillary.cli import (
    calibrate,
    catalog,
    compare,
    estimate,
    network,
    report,
    search,
    serve,
    simulate,
    sweep,
    synthesis,
    validate,
)
from armillary.cli.common import handled, quiet_flag_types, version_option

quiet_flag_types()

app = typer.Typer(add_completion=True, no_args_is_help=True,
                  help="Predict time, memory and traffic of LLM training and inference on large systems.")

# in the order `armillary --help` lists them
for name, command in (("estimate", estimate.estimate_cmd), ("serve", serve.serve_cmd), ("search", search.search_cmd),
                      ("comm-profile", estimate.comm_profile_cmd), ("validate", validate.validate_cmd),
                      ("collective", network.collective_cmd), ("commbench", network.commbench_cmd),
                      ("calibrate-network", network.calibrate_network_cmd), ("presets", catalog.presets_cmd),
                      ("schema", catalog.schema_cmd), ("simulate", simulate.simulate_cmd),
                      ("calibrate-compute", calibrate.calibrate_compute_cmd),
                      ("synthesize", synthesis.synthesize_cmd), ("network-optimize", network.network_optimize_cmd),
                      ("compare", compare.compare_cmd), ("sweep", sweep.sweep_cmd), ("report", report.report_cmd)):
    app.command(name)(handled(command))
app.callback()(version_option)

__all__ = ["app"]
