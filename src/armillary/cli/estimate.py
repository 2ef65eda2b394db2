"""`armillary estimate` (an iteration, a static batch, or a trace served) and `armillary comm-profile`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from armillary import api
from armillary.cli.common import (
    GpusOption,
    JsonFlag,
    PriceOption,
    PueOption,
    RunFileArg,
    SetOption,
    load_costs_file,
    load_run_file,
    print_json,
    show,
    writable,
)
from armillary.errors import SpecError
from armillary.estimate.economics import economics_of, serving_economics
from armillary.estimate.result import CommCall
from armillary.report import records, tables
from armillary.report.deploy import Target
from armillary.specs.workload import BasePrecision, Inference, Training


def estimate_cmd(
    run_file: RunFileArg,
    json_out: JsonFlag = False,
    gpus: GpusOption = None,
    tp: Annotated[int | None, typer.Option(help="override strategy.tp")] = None,
    pp: Annotated[int | None, typer.Option(help="override strategy.pp")] = None,
    micro_batch: Annotated[int | None, typer.Option(help="override strategy.micro_batch")] = None,
    set_: SetOption = None,
    show_infeasible: Annotated[bool, typer.Option(help="print the numbers of an infeasible run too (it still "
                                                       "exits with 1)")] = False,
    pue: PueOption = None,
    usd_per_gpu_hour: PriceOption = None,
    emit: Annotated[str | None, typer.Option(help="print the run as deployment arguments instead: megatron "
                                                  "(Megatron-LM / NeMo, training), vllm or trtllm (inference)")] = None,
) -> None:
    """Estimate one training iteration, or a static inference batch (or, with workload.serving.trace, serve
    that trace), of the run described in RUN_FILE."""
    model, system, strategy, workload = load_run_file(run_file, set_, {
        "gpus": gpus, "strategy.tp": tp, "strategy.pp": pp, "strategy.micro_batch": micro_batch})
    target = _target(emit)
    costs = load_costs_file(run_file, set_, pue, usd_per_gpu_hour)
    if isinstance(workload, Inference) and workload.serving.trace is not None:  # a trace: serve it
        served = api.simulate_serving(model, system, strategy, workload)
        money = serving_economics(served.output_tokens_per_s, served.devices, system, costs)
        if json_out:
            print_json({**records.serving_record(served), "economics": money.to_dict()})
            return
        show([*tables.serving_report(served, model, system, trace=workload.serving.trace),
              tables.economics_line(money)])
        return
    result = api.estimate(model, system, strategy, workload)
    feasible = bool(result.feasible)
    econ = economics_of(result, system, costs)
    if target is not None and feasible:
        from armillary.report.deploy import deployment

        sys.stdout.write(deployment(target, model, system, strategy, workload).text())
        return
    if json_out:
        run = records.run_record(model, system, strategy, workload)
        print_json({**records.estimate_record(result, run), "economics": econ.to_dict()}
                   if feasible or show_infeasible else
                   {"feasible": False, "infeasible_reasons": list(result.infeasible_reasons),
                    "advice": list(getattr(result, "advice", ())), "run": run})
    elif feasible or show_infeasible:
        unread = records.run_record(model, system, strategy, workload)["model_keys_not_modelled"]
        show([records.strategy_line(strategy, system), *_finetune_line(workload),
              *tables.estimate_report(result, model, system),
              tables.economics_line(econ),
              *([f"note: config.json keys not modelled: {escape(', '.join(unread))}"] if unread else [])])
    else:
        show([f"infeasible: {'; '.join(result.infeasible_reasons)} (--show-infeasible prints the numbers)",
              *(escape(a) for a in getattr(result, "advice", ()))])
    if not feasible:
        raise typer.Exit(1)


def _finetune_line(workload: Training | Inference) -> list[str]:
    """A line saying the run fine-tunes with LoRA / QLoRA (none for full training or inference)."""
    lora = workload.finetune if isinstance(workload, Training) else None
    if lora is None:
        return []
    kind = "QLoRA" if lora.base_precision is BasePrecision.NF4 else "LoRA"
    return [f"fine-tuning: {kind} rank {lora.rank} on {', '.join(t.value for t in lora.target_modules)}"
            f"{' (fused adapters)' if lora.fused else ''}, frozen base in {lora.base_precision.value}: no weight "
            "gradients or optimizer states for the base"]


def _target(emit: str | None) -> Target | None:
    try:
        return Target(emit) if emit is not None else None
    except ValueError:
        raise SpecError(f"--emit {emit!r}: one of {', '.join(t.value for t in Target)}") from None


def _moving(calls: tuple[CommCall, ...]) -> list[int]:
    """The calls that communicate: a dimension of size 1 (tp = 1) lists its calls at no time and no bytes."""
    return [i for i, c in enumerate(calls)
            if float(c.time_each_s) > 0 or float(c.scale_up_bytes_each) > 0 or float(c.scale_out_bytes_each) > 0]


def comm_profile_cmd(
    run_file: RunFileArg,
    json_out: Annotated[bool, typer.Option("--json", help="print the calls as JSON")] = False,
    plot: Annotated[Path | None, typer.Option(help="also save a message-size histogram (PNG, SVG, PDF)")] = None,
) -> None:
    """Every collective and point-to-point transfer of one step: count, size, bytes per tier, time."""
    writable(plot)
    model, system, strategy, workload = load_run_file(run_file)
    if not isinstance(workload, Training):
        raise SpecError("comm-profile profiles a training step: the run's workload is not training")
    every = api.estimate(model, system, strategy, workload).communication
    kept = _moving(every)
    calls = tuple(every[i] for i in kept)
    if json_out:  # printed first: a failed save does not lose the profile
        print_json(records.comm_records(calls), indent=1)
    else:
        show([tables.comm_profile_table(calls, model, system)])
        from armillary.comm.libraries import library_names, with_library

        if library_names(system):  # the network lists several communication libraries: which one each call uses
            from armillary.report.backends import library_choice

            singles = {n: api.estimate(model, with_library(system, n), strategy, workload).communication
                       for n in library_names(system)}
            show(library_choice(calls, {n: tuple(c[i] for i in kept) for n, c in singles.items()}))
    if plot is not None:
        from armillary.report.plots import message_size_histogram

        message_size_histogram(calls, plot)
