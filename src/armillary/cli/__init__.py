"""Command line: each command parses its options, makes one library call (`armillary.api`, or the module
function where the facade has none) and renders the result with `armillary.report`. One module per
command group; errors are turned into `error: message` and exit code 2 in one place (`common.handled`).

`armillary` (`main`) imports only the module of the command it runs: the other commands' imports (search,
simulation, calibration, reports) cost more than the estimate itself. `app` has every command."""

from __future__ import annotations

import sys
from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import typer

# command -> (module under armillary.cli, function), in the order `armillary --help` lists them
COMMANDS: dict[str, tuple[str, str]] = {
    "estimate": ("estimate", "estimate_cmd"), "serve": ("serve", "serve_cmd"), "search": ("search", "search_cmd"),
    "comm-profile": ("estimate", "comm_profile_cmd"), "validate": ("validate", "validate_cmd"),
    "collective": ("network", "collective_cmd"), "commbench": ("network", "commbench_cmd"),
    "calibrate-network": ("network", "calibrate_network_cmd"), "presets": ("catalog", "presets_cmd"),
    "schema": ("catalog", "schema_cmd"), "simulate": ("simulate", "simulate_cmd"),
    "calibrate-compute": ("calibrate", "calibrate_compute_cmd"), "synthesize": ("synthesis", "synthesize_cmd"),
    "network-optimize": ("network", "network_optimize_cmd"), "compare": ("compare", "compare_cmd"),
    "sweep": ("sweep", "sweep_cmd"), "report": ("report", "report_cmd"),
}


def build(names: list[str] | None = None) -> typer.Typer:
    """The typer application with the commands `names` (all by default)."""
    import typer

    from armillary.cli.common import handled, quiet_flag_types, version_option

    quiet_flag_types()
    app = typer.Typer(add_completion=True, no_args_is_help=True,
                      help="Predict time, memory and traffic of LLM training and inference on large systems.")
    for name in names or COMMANDS:
        module, function = COMMANDS[name]
        app.command(name)(handled(getattr(import_module(f"armillary.cli.{module}"), function)))
    app.callback()(version_option)
    return app


def main() -> None:
    """The `armillary` command: only the command named on the line, every command for help or a bad name."""
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    build([name] if name in COMMANDS else None)()


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # built on first use, then kept
        app = globals()["app"] = build()
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["COMMANDS", "app", "build", "main"]
