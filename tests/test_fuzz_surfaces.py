"""Fuzzed inputs on the surfaces added since the first fuzz suite (issue 46): serving traces through the Python
API, torch.profiler traces, HLO text, Chakra files, synthesis options and runtime tuning tables. Each example
gives a result whose numbers are finite, or an error of armillary's own (`ArmillaryError`): never another
exception, never a hang. Derandomized (a fixed seed) and small by default, seconds in CI; FUZZ_EXAMPLES
sets the examples per test for a longer run."""

from __future__ import annotations

import copy
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from test_fuzz_inputs import no_hang

import armillary
from armillary.errors import ArmillaryError

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
DATA = Path(__file__).parent / "data"
ODD_NUMBERS = hs.sampled_from([0, -1, 1, 2, 0.5, -0.5, 1e300, -1e300, math.nan, math.inf, -math.inf, 2**63, 10**30])
NUMBERS = hs.one_of(ODD_NUMBERS, hs.floats(-1e6, 1e6), hs.integers(-10, 5000))
ODD = hs.one_of(NUMBERS, hs.sampled_from([None, True, "", "x", "12", [], [1], {}, {"a": 1}, [[1, 2], [3]]]))


def _finite(value: Any) -> bool:
    arrays = [np.asarray(v, dtype=float) for v in value] if isinstance(value, tuple) else [np.asarray(value, float)]
    return all(np.isfinite(a).all() for a in arrays)


@FUZZ
@given(arrival=hs.lists(NUMBERS, min_size=1, max_size=4), input_len=hs.lists(NUMBERS, min_size=1, max_size=4),
       output_len=hs.lists(NUMBERS, min_size=1, max_size=4))
def test_a_fuzzed_trace_is_served_or_refused(arrival, input_len, output_len):
    from armillary.serving.trace import Trace

    workload = {"kind": "inference", "input_len": 128, "output_len": 16}
    with no_hang(60), np.errstate(all="ignore"):
        try:
            result = armillary.simulate_serving("llama3-8b", "dgx-h100", {"tp": 8}, workload, gpus=8,
                                                trace=Trace(arrival, input_len, output_len))
        except ArmillaryError as err:
            assert "trace" in str(err).lower(), str(err)
            return
    assert result.completed + result.rejected == result.requests == len(arrival)
    assert math.isfinite(result.makespan_s) and result.makespan_s >= 0


@FUZZ
@given(tp=hs.sampled_from([1, 2, 3, 4, 8, 16]), pp=hs.sampled_from([1, 2, 3, 80, 200]),
       dp=hs.sampled_from([None, 1, 2, 5, 8, 100]), gpus=hs.sampled_from([1, 6, 8, 16]))
def test_a_served_layout_uses_the_devices_as_estimate_requires(tp, pp, dp, gpus):
    workload = {"kind": "inference", "input_len": 64, "output_len": 8}
    strategy = {"tp": tp, "pp": pp, **({"dp": dp} if dp is not None else {})}
    with no_hang(60), np.errstate(all="ignore"):
        try:
            result = armillary.simulate_serving("llama3-8b", "dgx-h100", strategy, workload, 1.0, 2.0, gpus=gpus)
        except ArmillaryError:
            return
    assert result.devices == gpus and tp * pp * result.replicas == gpus


_EVENT_KEYS = ("ph", "ts", "dur", "name", "tid", "cat", "args")


@FUZZ
@given(data=hs.data())
def test_a_fuzzed_torch_trace_is_read_or_refused(tmp_path, data):
    from armillary.ingest.torch_trace import read_torch_traces

    trace = json.loads((DATA / "torch_trace" / "rank0.json").read_text())
    events = trace["traceEvents"]
    for _ in range(data.draw(hs.integers(1, 4), label="edits")):
        i = data.draw(hs.integers(0, len(events) - 1), label="event")
        if not isinstance(events[i], dict):
            continue
        key = data.draw(hs.sampled_from(_EVENT_KEYS), label="key")
        if key == "args" and isinstance(events[i].get("args"), dict) and events[i]["args"]:
            arg = data.draw(hs.sampled_from(sorted(events[i]["args"])), label="arg")
            events[i]["args"][arg] = copy.deepcopy(data.draw(ODD, label="value"))
        else:
            events[i][key] = copy.deepcopy(data.draw(ODD, label="value"))  # the strategy's objects are shared
    if data.draw(hs.booleans(), label="distributedInfo"):
        trace["distributedInfo"] = data.draw(hs.dictionaries(hs.sampled_from(["rank", "world_size"]), ODD),
                                             label="info")
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(trace))
    if data.draw(hs.booleans(), label="two ranks"):  # the folder: this rank and the untouched other one
        (tmp_path / "rank1.json").write_text((DATA / "torch_trace" / "rank1.json").read_text())
        path = tmp_path
    with no_hang(60):
        try:
            traces = read_torch_traces(path)
        except ArmillaryError as err:
            assert "--torch-trace" in str(err) and len(str(err)) < 600, str(err)
            return
    for r in traces.ranks:
        assert math.isfinite(r.step_s) and all(math.isfinite(c.bytes) and c.bytes >= 0 for c in r.collectives)
    from armillary.ingest.torch_replay import replay
    from armillary.specs.loading import load_system

    with no_hang(60), np.errstate(all="ignore"):
        try:
            result = replay(traces, load_system("dgx-h100", 8))
        except ArmillaryError:
            return
    assert math.isfinite(result.step_time_s) and result.step_time_s >= 0


_HLO = (DATA / "hlo" / "forms.hlo.txt").read_text()
_HLO_WORDS = ("constant(5)", "%body", "%cond", "%helper", "index=1", "f32[1024]", "to_apply=%add", "num_partitions=8",
              "replica_groups={{0,1,2,3},{4,5,6,7}}", "(", ")", "{", "}", "ROOT ")


@FUZZ
@given(data=hs.data())
def test_a_fuzzed_hlo_module_is_simulated_or_refused(data):
    from armillary.ingest.hlo_parse import parse_hlo
    from armillary.ingest.hlo_run import simulate_hlo
    from armillary.specs.loading import load_system

    text = _HLO
    for _ in range(data.draw(hs.integers(1, 3), label="edits")):
        word = data.draw(hs.sampled_from(_HLO_WORDS), label="word")
        new = data.draw(hs.sampled_from(["", "constant(1000000000000)", "%main", "%helper", "index=7", "f32[0]",
                                         "f32[99999999999]", "replica_groups={{0,9}}", "to_apply=%helper",
                                         "num_partitions=0", "num_partitions=99999999", "((", "}", "x"]),
                        label="new")
        text = text.replace(word, new, 1)
    with no_hang(60), np.errstate(all="ignore"):
        try:
            result = simulate_hlo(parse_hlo(text), load_system("dgx-h100", 8))
        except ArmillaryError:
            return
    assert math.isfinite(result.step_time_s) and result.step_time_s >= 0


@FUZZ
@given(data=hs.data())
def test_a_damaged_chakra_file_is_read_or_refused(tmp_path, data):
    from armillary.simulate.chakra import read_chakra, write_chakra
    from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskKind, Tier

    b = GraphBuilder()
    a = b.add("a", TaskKind.COMPUTE, Category.COMPUTE, (0,), Stream.COMPUTE, 1e-3)
    c = b.add("c", TaskKind.COMPUTE, Category.COMPUTE, (1,), Stream.COMPUTE, 1e-3)
    b.add("ar", TaskKind.COLLECTIVE, Category.DP, (0, 1), Stream.DP, 2e-3, [a, c], Tier.SCALE_UP, bytes=1e6,
          group="dp", collective="all_reduce")
    paths = write_chakra(b.graph(2), tmp_path)
    target = paths[data.draw(hs.integers(0, 1), label="file")]
    raw = bytearray(target.read_bytes())
    for _ in range(data.draw(hs.integers(1, 6), label="flips")):
        raw[data.draw(hs.integers(0, len(raw) - 1), label="at")] = data.draw(hs.integers(0, 255), label="byte")
    target.write_bytes(bytes(raw[:data.draw(hs.integers(1, len(raw)), label="cut")]))
    with no_hang(60):
        try:
            graph = read_chakra(tmp_path)
        except ArmillaryError:
            return
    assert all(0 <= d < i for i, t in enumerate(graph.tasks) for d in t.deps)


@FUZZ
@given(op=hs.sampled_from(["all_gather", "reduce_scatter", "all_reduce", "all_to_all"]),
       devices=hs.one_of(hs.integers(-2, 12), hs.sampled_from([10**6, 10**12])),
       size=hs.one_of(NUMBERS, hs.just(1e6)), chunks=hs.one_of(hs.integers(-1, 3), hs.just(10**9)),
       seeds=hs.one_of(hs.integers(-1, 3), hs.just(10**6)))
def test_fuzzed_synthesis_options_give_a_schedule_or_are_refused(op, devices, size, chunks, seeds):
    from armillary.comm.synthesis import check_synthesis, ring, synthesize_best
    from armillary.specs.communication import Collective

    with no_hang(60):
        try:
            check_synthesis(Collective(op), devices, size, chunks, seeds)
            schedule = synthesize_best(Collective(op), ring(devices, 1e9, 1e-6), size, chunks, seeds)
        except ArmillaryError:
            return
    assert math.isfinite(schedule.time) and schedule.time >= schedule.bound * (1 - 1e-9)


@FUZZ
@given(data=hs.recursive(ODD, lambda inner: hs.one_of(hs.lists(inner, max_size=3),
                                                      hs.dictionaries(hs.sampled_from(
                                                          ["version", "default", "entries", "machine", "op",
                                                           "dtype", "bucket", "group_size", "backend", "x"]),
                                                          inner, max_size=4)), max_leaves=12))
def test_a_fuzzed_tuning_table_loads_or_is_refused(tmp_path, data):
    import yaml

    from armillary.runtime.table import load_table

    path = tmp_path / "table.yaml"
    path.write_text(yaml.safe_dump(data))
    try:
        table = load_table(path)
    except ArmillaryError as err:
        assert "tuning table" in str(err)
        return
    assert table.default


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


@FUZZ
@given(kind=hs.sampled_from(["ring", "torus", "mesh", "switch", "", "x"]),
       shape=hs.lists(hs.one_of(hs.integers(-1, 6), hs.sampled_from([10**6, 10**20])), min_size=0, max_size=4),
       size=hs.sampled_from(["1GiB", "-1GiB", "0", "nan", "1e400B", "x", "1MiB"]),
       seeds=hs.sampled_from(["0", "1", "2", "-3", "100000"]))
def test_fuzzed_synthesize_options_on_the_command_line(kind, shape, size, seeds):
    import re

    from typer.testing import CliRunner

    from armillary.cli import app

    topology = f"{kind}:{'x'.join(map(str, shape))}"
    with no_hang(60):
        out = CliRunner().invoke(app, ["synthesize", "--topology", topology, "--size", size, "--seeds", seeds,
                                       "--json"])
    assert out.exit_code in (0, 2), (topology, size, seeds, out.output[-800:])
    if out.exit_code == 0:
        times = json.loads(out.output)["times_s"]
        assert all(t is None or (math.isfinite(t) and t >= times["lower bound"] * (1 - 1e-9)) for t in times.values())
    else:
        assert "Traceback" not in out.output and re.search(r"--(topology|size|seeds|gpus)|error", out.output)
