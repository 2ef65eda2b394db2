"""What every command shares: the console, the one error handler, output-file checks, option types and
printing of results."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.markup import escape
from rich.measure import Measurement

from armillary.errors import ArmillaryError, SpecError
from armillary.writing import check_writable, finite_for_json

if TYPE_CHECKING:
    from armillary.specs.costs import Costs
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload

console = Console()

P = ParamSpec("P")
R = TypeVar("R")

# Options more than one command takes
RunFileArg = Annotated[Path, typer.Argument(help="RUN.yaml with model, system, strategy, workload")]
def quiet_flag_types() -> None:
    """Flags take no value, so their help shows no type: typer 0.25+ prints `<bool>` beside every flag
    (`--json <bool>` reads as if it wanted one). Typer's own rule for an option with a metavar, applied to
    flags: display nothing."""
    from typer.core import TyperOption

    shown = TyperOption.display_type_rich
    if getattr(shown, "quiet_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: Any) -> str | None:
        return None if self.is_flag and self.metavar is None else shown(self, ctx)

    display_type_rich.quiet_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]


JsonFlag = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
GpusOption = Annotated[int | None, typer.Option(help="size the system to this many devices")]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", help="override any field of the run file or of the presets it names, e.g. --set "
    "strategy.recompute=full, --set system.scale_out.bandwidth=+20%, --set model.layers=40 (repeatable)")]
PueOption = Annotated[float | None, typer.Option(
    "--pue", help="power usage effectiveness (facility / IT power; default 1.56, Uptime Institute 2024 survey "
    "average) for the energy per token; or costs.pue in the run file")]
PriceOption = Annotated[float | None, typer.Option(
    "--usd-per-gpu-hour", help="price of one device-hour in US dollars, for the cost per million tokens "
    "(none by default: no dollar figures); or costs.usd_per_gpu_hour in the run file")]
SystemOption = Annotated[str, typer.Option(help="system preset or file")]


def fail(message: str) -> NoReturn:
    """`error: message` on stderr (the message printed as it is, brackets included), exit code 2."""
    Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(message)}", highlight=False)
    raise typer.Exit(2)


@contextmanager
def reported(*also: type[Exception]) -> Iterator[None]:
    """Turn what the library raises on purpose (ArmillaryError: bad specifications, missing extras) and
    ValueError, and the exception types in `also`, into `fail`."""
    caught: tuple[type[Exception], ...] = (ArmillaryError, ValueError, *also)
    try:
        yield
    except typer.Exit:
        raise
    except caught as err:
        fail(str(err))


def handled(command: Callable[P, R]) -> Callable[P, R]:
    """`command` with its errors `reported` (the signature, which typer reads, kept)."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with reported():
            return command(*args, **kwargs)

    return run


def writable(path: Path | None, table: bool = False) -> None:
    """Fail early when an output file cannot be written (`table`: nor its format named by its suffix)."""
    if path is None:
        return
    check_writable(path)
    from armillary.report.files import FORMATS

    if table and path.suffix.lower() not in FORMATS:
        raise SpecError(f"{path}: the file name must end in one of {', '.join(FORMATS)}")


def load_run_file(path: Path, sets: list[str] | None = None, named: Mapping[str, Any] | None = None) -> tuple[
        Model, System, Strategy, Workload]:
    """The run file with the `--set FIELD=VALUE` overrides, then the `named` ones (`_overrides`)."""
    from armillary.specs.run import load_run

    return load_run(path, _overrides(sets, named or {}))


def load_costs_file(path: Path, sets: list[str] | None = None, pue: float | None = None,
                    usd_per_gpu_hour: float | None = None) -> Costs:
    """The run file's `costs:` block with the `--set costs.*` overrides, then `--pue` and `--usd-per-gpu-hour`
    where given."""
    from armillary.specs.run import load_costs

    return load_costs(path, _overrides(sets, {"costs.pue": pue, "costs.usd_per_gpu_hour": usd_per_gpu_hour}))


def _overrides(sets: list[str] | None, named: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The `--set FIELD=VALUE` overrides, then the `named` ones (dotted field: the value of an option such as
    --tp; None: not given)."""
    from armillary.specs.run import parse_override

    return [parse_override(s) for s in sets or []] + [(key, value) for key, value in named.items() if value is not None]


def print_json(data: Any, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> None:
    """Valid JSON: a number that is not finite (a percentile of no requests, an unbounded capacity) is null."""
    sys.stdout.write(json.dumps(finite_for_json(data), indent=indent, default=default, allow_nan=False) + "\n")


def show(renderables: Iterable[RenderableType]) -> None:
    """Print to the terminal at its width; piped or redirected, each table at its natural width, so no
    cell is cut (rich would otherwise fit everything into 80 columns, or the width of the terminal)."""
    for r in renderables:
        if console.is_terminal:
            console.print(r)
            continue
        natural = Measurement.get(console, console.options.update_width(_PIPED_MAX_WIDTH), r).maximum
        Console(file=console.file, width=max(80, natural), soft_wrap=isinstance(r, str)).print(r)


_PIPED_MAX_WIDTH = 2000  # columns a piped table may take at most


def _print_version(value: bool) -> None:
    if value:
        from armillary import __version__

        sys.stdout.write(f"armillary {__version__}\n")
        raise typer.Exit()


VersionFlag = Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                           help="print the armillary version and exit")]


def version_option(version: VersionFlag = False) -> None:
    """Predict time, memory and traffic of LLM training and inference on large systems."""


@contextmanager
def working(message: str) -> Iterator[None]:
    """A transient spinner with `message` on stderr while a long step runs (nothing when stderr is not a
    terminal, so piped output and logs stay clean)."""
    err = stderr_console()
    if not err.is_terminal:
        yield
        return
    with err.status(escape(message)):
        yield


def stderr_console() -> Console:
    """For progress bars: they go to stderr, so that stdout holds only the result."""
    return Console(stderr=True)
