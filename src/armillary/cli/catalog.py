"""What ships and what a specification may hold: `armillary presets` and `armillary schema`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from armillary.cli.common import print_json, show
from armillary.errors import SpecError
from armillary.presets.registry import KINDS
from armillary.report import tables


def presets_cmd(
    kind: Annotated[str | None, typer.Argument(help=f"one of {', '.join(KINDS)}; or show")] = None,
    name: Annotated[str | None, typer.Argument(help="with show: the preset to print")] = None,
    of_kind: Annotated[str | None, typer.Option("--kind", help="with show: the kind the name is of, where "
                                                "it is ambiguous")] = None,
) -> None:
    """List the shipped presets (models, devices, systems, software stacks, engines); `presets show NAME`
    prints one as resolved YAML with its sources and calibration status."""
    if kind == "show":
        if name is None:
            raise SpecError("presets show NAME: give the preset's name, e.g. armillary presets show h100-sxm")
        from armillary.report.presets import preset_document

        sys.stdout.write(preset_document(name, of_kind))
        return
    if kind is not None and kind not in KINDS:
        raise SpecError(f"kind {kind!r}: allowed values are {', '.join(KINDS)}, or show NAME")
    if name is not None:
        raise SpecError(f"presets {kind} {name}: to print a preset, use armillary presets show {name}")
    show(tables.presets_lines((kind,) if kind else KINDS))


def schema_cmd(kind: Annotated[str, typer.Argument(
        help="model, device, system, strategy, workload (training), inference or run")]) -> None:
    """Print the JSON Schema of a specification."""
    from armillary.specs.schema import SCHEMAS

    if kind not in SCHEMAS:
        raise SpecError(f"kind {kind!r}: allowed values are {', '.join(SCHEMAS)}")
    print_json(SCHEMAS[kind].model_json_schema())
