"""`armillary search`: the best strategies of a training run, the best serving configurations within a
latency limit (`--tpot-limit`), or the best strategy per system of a system space (`--space`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from armillary import api, defaults
from armillary.cli.common import JsonFlag, SystemOption, print_json, show, stderr_console, writable
from armillary.errors import SpecError
from armillary.report import records, search_tables
from armillary.search.inference import InferenceSearchResult
from armillary.search.run import Objective, SearchResult
from armillary.search.space import StrategySpace
from armillary.search.systems import CoDesignResult
from armillary.specs.loading import load_model, load_spec, load_system
from armillary.writing import replaced

if TYPE_CHECKING:
    from armillary.search.executors import Executor
    from armillary.specs.model import Model
    from armillary.specs.strategy import Strategy
    from armillary.specs.system import System
    from armillary.specs.workload import Workload

_BASE = ", ".join(f"{k}: {v}" for k, v in defaults.SEARCH_BASE_STRATEGY.items()) or (
    "the Strategy spec's defaults, as estimate's; armillary.defaults")
# help text is rich markup: the extras' brackets escaped
_DASK_HELP = ("run the chunks on a Dask cluster: tcp://scheduler:8786, or local (a LocalCluster); "
              + escape("pip install 'armillary[dask]'"))
_SAVE_HELP = ("also save the top strategies: .csv, .json or .parquet ("
              + escape("pip install 'armillary[parquet]'") + ")")


def search_cmd(
    model: Annotated[str, typer.Option(help="model preset or file")],
    system: SystemOption,
    gpus: Annotated[int, typer.Option(help="devices to use")],
    global_batch: Annotated[int | None, typer.Option(help="samples per iteration (training)")] = None,
    seq_len: Annotated[int, typer.Option(help="tokens per sample")] = defaults.SEQ_LEN,
    tpot_limit: Annotated[float | None, typer.Option(help="inference: the most output tokens/s per device with "
                                                          "time per output token at most this (s)")] = None,
    ttft_limit: Annotated[float | None, typer.Option(help="inference: time to first token at most this (s)")] = None,
    input_len: Annotated[int, typer.Option(help="inference: prompt tokens")] = defaults.INPUT_LEN,
    output_len: Annotated[int, typer.Option(help="inference: generated tokens")] = defaults.OUTPUT_LEN,
    strategy: Annotated[Path | None, typer.Option(help=f"base strategy (YAML) for the fields not searched (default: "
                                                       f"{_BASE})")] = None,
    strategies: Annotated[Path | None, typer.Option(help="strategy space (YAML): values per axis")] = None,
    space: Annotated[Path | None, typer.Option(help="system space (YAML): GPU counts, memory, bandwidths, "
                                                    "prices, power; the best strategy of each system")] = None,
    pareto: Annotated[Path | None, typer.Option(help="with --space: draw the time / cost front (PNG)")] = None,
    budget: Annotated[float | None, typer.Option(help="with --space: best systems costing at most this (USD)")] = None,
    objective: Annotated[str, typer.Option(help="time or memory")] = Objective.TIME.value,
    top: Annotated[int, typer.Option(help="how many strategies to keep")] = defaults.SEARCH_TOP,
    workers: Annotated[int, typer.Option(help="local processes (1 = serial), or Dask workers with --dask local")] = 1,
    dask: Annotated[str | None, typer.Option(help=_DASK_HELP)] = None,
    json_out: JsonFlag = False,
    save: Annotated[Path | None, typer.Option("--save", "--csv", help=_SAVE_HELP)] = None,
    resume: Annotated[Path | None, typer.Option(help="checkpoint file: finished blocks are appended, and a rerun "
                                                     "of the same search skips them")] = None,
    emit: Annotated[Path | None, typer.Option(help="also write the best strategy as a run file (RUN.yaml) that "
                                                   "`armillary estimate` reads")] = None,
    lora_rank: Annotated[int | None, typer.Option(help="training: LoRA fine-tuning of a frozen base with adapters "
                                                       "of this rank (workload.finetune)")] = None,
    lora_targets: Annotated[str | None, typer.Option(help="with --lora-rank: adapted layers, comma-separated from "
                                                          "q, k, v, o, gate, up, down (default q,k,v,o)")] = None,
    lora_base: Annotated[str | None, typer.Option(help="with --lora-rank: the frozen base's storage: bf16, fp8 or "
                                                       "nf4 (QLoRA); default bf16")] = None,
) -> None:
    """The fastest (or leanest) parallelization strategies for a model on a system."""
    writable(save, table=True)
    writable(emit)
    writable(pareto)
    writable(resume)
    goal = _objective(objective)
    m, sysm = load_model(model), load_system(system, gpus)
    base = str(strategy) if strategy is not None else None  # None: api.search's default base strategy
    emit_best = _emitter(emit, model, system, gpus)
    if tpot_limit is not None:
        _inference_search(m, sysm, base, strategies, {"tpot_limit_s": tpot_limit, "ttft_limit_s": ttft_limit},
                          {"kind": "inference", "input_len": input_len, "output_len": output_len}, top, json_out,
                          emit_best)
        return
    workload = _training_workload(seq_len, global_batch, lora_rank, lora_targets, lora_base)
    axes = load_spec(StrategySpace, str(strategies), "--strategies") if strategies is not None else None
    with _progress_bar() as tick:
        executor = _executor(workers, dask)
        result = (api.codesign(m, sysm, workload, str(space), base, axes, executor) if space is not None
                  else api.search(m, sysm, workload, base, axes, objective=goal, top=top,
                                  executor=executor, progress=tick, checkpoint=resume))
    if isinstance(result, CoDesignResult):
        _show_codesign(result, m, json_out, pareto, budget)
        return
    assert isinstance(result, SearchResult)  # a training workload
    _show_search(result, m, sysm, goal, json_out, save)
    if not result.top:
        raise typer.Exit(1)
    from armillary.specs.workload import Training

    emit_best(result.top[0].strategy, Training.model_validate(workload))


def _training_workload(seq_len: int, global_batch: int | None, lora_rank: int | None, lora_targets: str | None,
                       lora_base: str | None) -> dict[str, Any]:
    """The training workload the options describe (--global-batch is needed)."""
    if global_batch is None:
        raise SpecError("--global-batch is needed for a training search (or give --tpot-limit for inference)")
    return {"seq_len": seq_len, "global_batch": global_batch,
            "finetune": _finetune(lora_rank, lora_targets, lora_base)}


def _show_search(result: SearchResult, m: Model, sysm: System, goal: Objective, json_out: bool,
                 save: Path | None) -> None:
    """The strategies found as JSON or tables, printed before saving: a failed save does not lose the search."""
    if json_out:
        print_json(records.search_record(result))
    else:
        show(search_tables.search_report(result, m, sysm, goal))
    if save is not None:
        from armillary.report.files import save_rows

        save_rows(records.search_rows(result), save)


def _finetune(rank: int | None, targets: str | None, base: str | None) -> dict[str, Any] | None:
    """The workload's `finetune` (a LoRA spec) from the options; None: every weight trained."""
    if rank is None:
        if targets is not None or base is not None:
            raise SpecError("--lora-targets / --lora-base need --lora-rank")
        return None
    lora: dict[str, Any] = {"method": "lora", "rank": rank}
    if targets is not None:
        lora["target_modules"] = [t.strip() for t in targets.split(",") if t.strip()]
    if base is not None:
        lora["base_precision"] = base
    return lora


def _objective(text: str) -> Objective:
    try:
        return Objective(text)
    except ValueError:
        raise SpecError(f"--objective {text!r}: {' or '.join(o.value for o in Objective)}") from None


def _executor(workers: int, dask: str | None) -> Executor:
    from armillary.search.executors import dask_cluster, process_pool, serial

    if dask:
        return dask_cluster(dask, max(workers, 2))
    return process_pool(workers) if workers > 1 else serial


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None]]:
    """A transient bar on stderr; yields the `progress(done, total)` callback of the search. It shows the
    points per second so far and the time the rest of the space would take at that rate (`pace`), so that a
    space too large to finish says how long it would take."""
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    columns = (*Progress.get_default_columns()[:-1], TextColumn("{task.fields[rate]} points/s, ETA {task.fields[eta]}"),
               TimeElapsedColumn())
    with Progress(*columns, console=stderr_console(), transient=True) as bar:
        task = bar.add_task("searching", total=None, rate="-", eta="-")
        started = time.perf_counter()

        def tick(done: int, total: int) -> None:
            rate, eta = pace(done, total, time.perf_counter() - started)
            bar.update(task, completed=done, total=total, rate=rate, eta=eta)

        yield tick


def pace(done: int, total: int, elapsed_s: float) -> tuple[str, str]:
    """(points per second so far, time left at that rate) as the progress bar prints them: seconds,
    minutes, hours or days ('-' before the first points are done)."""
    if done <= 0 or elapsed_s <= 0:
        return "-", "-"
    rate = done / elapsed_s
    left = max(total - done, 0) / rate
    for unit, seconds in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if left >= 2 * seconds:
            return f"{rate:,.0f}", f"{left / seconds:,.1f} {unit}"
    return f"{rate:,.0f}", f"{left:.0f} s"


def _inference_search(m: Model, sysm: System, base: str | None, space_file: Path | None, limits: dict[str, Any],
                      workload: dict[str, Any], top: int, json_out: bool,
                      emit: Callable[[Strategy, Workload], None]) -> None:
    """The serving configurations (axes from `space_file`, latency `limits` from the options)."""
    from armillary.specs.loading import read_spec_file

    axes = read_spec_file(space_file, "--strategies") if space_file is not None else {}
    if not isinstance(axes, dict):
        raise SpecError(f"{space_file}: expected a mapping of axes (tp, pp, batch, weights)")
    result = api.search(m, sysm, workload, base, {**axes, **limits}, top=top)
    assert isinstance(result, InferenceSearchResult)  # an inference workload
    from armillary.search.inference import JUDGED

    if json_out:  # printed before saving: a failed save does not lose the search
        print_json({**records.inference_search_record(result), "judged": JUDGED})
    else:
        show([*search_tables.inference_search_report(result, m, sysm, limits["tpot_limit_s"]), JUDGED])
    if result.top:
        from armillary.specs.workload import Inference

        best = result.top[0]
        emit(best.strategy, Inference.model_validate({**workload, "batch": best.batch, "weights": best.weights}))


def _emitter(path: Path | None, model: str, system: str, gpus: int) -> Callable[[Strategy, Workload], None]:
    """Writes the best strategy to `path` as a run file (nothing when None); model and system files named by
    a path are written as absolute paths, so the run file works from anywhere."""

    def emit(strategy: Strategy, workload: Workload) -> None:
        if path is None:
            return
        from armillary.report.deploy import run_file_text

        def ref(name: str) -> str:
            return str(Path(name).resolve()) if Path(name).is_file() else name

        with replaced(path) as temporary:
            temporary.write_text(run_file_text(ref(model), ref(system), gpus, strategy, workload,
                                               "the best strategy found by `armillary search`"))
        typer.echo(f"wrote {path}", err=True)

    return emit


def _show_codesign(designs: CoDesignResult, m: Model, json_out: bool, pareto: Path | None,
                   budget: float | None) -> None:
    if json_out:  # printed before the plot is saved: a failed save does not lose the search
        print_json(records.codesign_record(designs, budget), default=str)
    else:
        show(search_tables.codesign_report(designs, m, budget))
    if pareto is not None:
        from armillary.report.plots import codesign_pareto_plot

        codesign_pareto_plot(designs, pareto)
