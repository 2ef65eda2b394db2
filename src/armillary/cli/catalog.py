"""What ships and what a specification may hold: `armillary presets` and `armillary schema`."""

from __future__ import annotations

from typing import Annotated

import typer

from armillary.cli.common import print_json, show
from armillary.errors import SpecError
from armillary.presets.registry import KINDS
from armillary.report import tables


def presets_cmd(kind: Annotated[str | None, typer.Argument(help=f"one of {', '.join(KINDS)}")] = None) -> None:
    """List the shipped presets (models, devices, systems, software stacks)."""
    if kind is not None and kind not in KINDS:
        raise SpecError(f"kind {kind!r}: allowed values are {', '.join(KINDS)}")
    show(tables.presets_lines((kind,) if kind else KINDS))


def schema_cmd(kind: Annotated[str, typer.Argument(
        help="model, device, system, strategy, workload (training), inference or run")]) -> None:
    """Print the JSON Schema of a specification."""
    from armillary.specs.schema import SCHEMAS

    if kind not in SCHEMAS:
        raise SpecError(f"kind {kind!r}: allowed values are {', '.join(SCHEMAS)}")
    print_json(SCHEMAS[kind].model_json_schema())
