"""`armillary serve`: a request stream on the run's replicas (continuous batching, chunked prefill)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from armillary import api, defaults
from armillary.cli.common import JsonFlag, load_run_file, print_json, show, writable
from armillary.errors import SpecError
from armillary.report import records, tables
from armillary.specs.workload import Inference


def serve_cmd(
    run_file: Annotated[Path, typer.Argument(help="RUN.yaml with an inference workload")],
    rate: Annotated[float | None, typer.Option(help="Poisson arrivals, requests/s (without a trace)")] = None,
    duration: Annotated[float, typer.Option(help="seconds of arrivals (without a trace)")] = (
        defaults.SERVE_DURATION_S),
    find_max_rate: Annotated[bool, typer.Option(
        "--max-rate", help="search the largest rate meeting P90 TTFT and P99 TPOT (workload.serving SLOs)")] = False,
    json_out: JsonFlag = False,
    csv_out: Annotated[Path | None, typer.Option("--save", "--csv", help="also save per-request times: .csv, "
                                                 ".json or .parquet")] = None,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="override any field, e.g. --set workload.serving.max_batch=128 (repeatable)")] = None,
) -> None:
    """Simulate serving a request stream (continuous batching, chunked prefill, KV capacity)."""
    writable(csv_out, table=True)
    model, system, strategy, workload = load_run_file(run_file, set_)
    if not isinstance(workload, Inference):
        raise SpecError("serve needs an inference workload (workload.kind: inference)")
    if workload.serving.trace is None and rate is None and not find_max_rate:
        raise SpecError("give --rate (requests/s), --max-rate, or a trace file in workload.serving.trace")
    best = None
    if find_max_rate:
        from armillary.serving.run import max_rate

        best, found = max_rate(lambda r: api.simulate_serving(model, system, strategy, workload, r, duration))
        if found is None:
            raise SpecError(f"no rate meets P90 TTFT <= {workload.serving.ttft_slo_s} s and P99 TPOT <= "
                            f"{workload.serving.tpot_slo_s} s")
        result = found
    else:
        result = api.simulate_serving(model, system, strategy, workload, rate, duration)
    if csv_out is not None:
        from armillary.report.files import save_rows

        save_rows(records.request_rows(result), csv_out)
    if json_out:
        print_json(records.rate_record(result, best))
        return
    show(tables.serving_report(result, model, system, best))
