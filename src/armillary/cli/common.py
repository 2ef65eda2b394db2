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

from armillary.errors import ArmillaryError, SpecError

if TYPE_CHECKING:
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload

console = Console()

P = ParamSpec("P")
R = TypeVar("R")

# Options more than one command takes
RunFileArg = Annotated[Path, typer.Argument(help="RUN.yaml with model, system, strategy, workload")]
JsonFlag = Annotated[bool, typer.Option("--json", help="print the result as JSON")]
GpusOption = Annotated[int | None, typer.Option(help="size the system to this many devices")]
SetOption = Annotated[list[str] | None, typer.Option(
    "--set", help="override any field of the run file, e.g. --set strategy.recompute=full (repeatable)")]
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
    if not path.parent.is_dir():
        raise SpecError(f"cannot write {path}: the folder {path.parent} does not exist")
    from armillary.report.files import FORMATS

    if table and path.suffix.lower() not in FORMATS:
        raise SpecError(f"{path}: the file name must end in one of {', '.join(FORMATS)}")


def load_run_file(path: Path, sets: list[str] | None = None, named: Mapping[str, Any] | None = None) -> tuple[
        Model, System, Strategy, Workload]:
    """The run file with the `--set FIELD=VALUE` overrides, then the `named` ones (dotted field: the value of
    an option such as --tp; None: not given)."""
    from armillary.specs.run import load_run, parse_override

    overrides = [parse_override(s) for s in sets or []]
    overrides += [(key, value) for key, value in (named or {}).items() if value is not None]
    return load_run(path, overrides)


def print_json(data: Any, indent: int | None = 2, default: Callable[[Any], Any] | None = None) -> None:
    sys.stdout.write(json.dumps(data, indent=indent, default=default) + "\n")


def show(renderables: Iterable[RenderableType]) -> None:
    for r in renderables:
        console.print(r)


def stderr_console() -> Console:
    """For progress bars: they go to stderr, so that stdout holds only the result."""
    return Console(stderr=True)
