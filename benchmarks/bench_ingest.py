"""Speed of the HLO import (a module of at least 100,000 instructions parsed and costed), of the torch
trace replay (generated two-rank traces of 100K and 1M events replayed) and of the Chakra export and import
of every rank of a 1,024-GPU training step.

Run: python benchmarks/bench_ingest.py [hlo|torch|torch-json|chakra [MODEL]]   (targets: < 2 s for parse + cost;
1M events replayed in < 10 s; a 1,024-rank Chakra export in < 10 s and < 1 GB, issue 47). torch-json reads and
replays chrome-trace files of 1M events (the two-rank fixture of tests/data/torch_trace tiled).

The module is the compiled JAX GPT step of tests/data/hlo (TP over 8 devices) repeated: its entry
computation copied under new names until the module holds 100,000 instructions, a new entry calling every
copy in turn, so that every instruction is costed.
"""

from __future__ import annotations

import random
import re
import resource
import sys
import tempfile
import time
from pathlib import Path

from armillary.ingest.hlo_cost import cost_module
from armillary.ingest.hlo_parse import parse_hlo
from armillary.ingest.torch_replay import replay
from armillary.ingest.torch_trace import RankTrace, TorchTraces, TraceCollective, TraceOp
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system

FIXTURE = Path(__file__).parent.parent / "tests" / "data" / "hlo" / "gpt_small_tp.hlo.txt"


def big_module(target: int = 100_000) -> str:
    """The fixture's step repeated: all its computations copied under new names until the module holds
    `target` instructions (each copy's entry becomes a called computation), a new entry calling every copy
    in turn."""
    text = FIXTURE.read_text()
    start = text.index("\n%")  # every computation (fused ones included) is copied: each fusion its own
    first = text[start:].index("\nENTRY ") + start
    head, others = text[:start], text[start:first]
    start = first
    end = text.index("\n}\n", start) + 3
    entry = text[start + 1:end]
    body = others + "\n" + entry.replace("ENTRY ", "", 1)
    params = [line for line in entry.splitlines() if " parameter(" in line]
    root = next(line for line in entry.splitlines() if "ROOT " in line)
    root_shape = root.split(" = ", 1)[1].rsplit(" tuple(", 1)[0]
    args = ", ".join(line.split(" = ")[0].strip() for line in params)
    copies, calls = [], []
    for k in range(target // text.count(" = ") + 1):
        copies.append(re.sub(r"%([\w.\-]+)", lambda m, k=k: f"%{m.group(1)}__{k}", body))
        name = entry.split()[1].lstrip("%")
        calls.append(f"  %call.{k} = {root_shape} call({args}), to_apply=%{name}__{k}")
    calls[-1] = calls[-1].replace("  %call", "  ROOT %call", 1)
    signature = entry.split("(", 1)[1].split("{\n", 1)[0]
    new_entry = "ENTRY %bench (" + signature + "{\n" + "\n".join(params + calls) + "\n}\n"
    return head + "\n".join(copies) + "\n" + new_entry


def torch_rank(rank: int, events: int, seed: int = 0) -> RankTrace:
    """A rank's step of `events` events: operators of 10-300 us, a collective (DDP-like bucket sizes) issued
    after one in eight, idle gaps of the main thread: most under 1 us, one in five either a wait until the last
    collective ends or plain idle time of 0.4-3 ms. Both ranks of a trace share the program (same seed)."""
    rng = random.Random(seed)
    ops: list[TraceOp] = []
    collectives: list[TraceCollective] = []
    t = 0.0
    while len(ops) + len(collectives) < events:
        d = rng.uniform(10, 300)
        ops.append(TraceOp("aten::mm", t, d))
        t += d
        if rng.random() < 1 / 8:
            size = rng.choice((1e6, 2.5e7, 1e8))
            collectives.append(TraceCollective(Collective.ALL_REDUCE, t, t + 5, t + rng.uniform(600, 3000), size, 2))
        if rng.random() < 0.8:
            t += rng.uniform(0, 1)
        elif collectives and collectives[-1].end_us > t:
            t = collectives[-1].end_us + rng.uniform(0, 20)
        else:
            t += rng.uniform(400, 3000)
    return RankTrace(rank, 0.0, t + 10, tuple(ops), tuple(collectives))


def torch_replay_speed(events: int) -> None:
    traces = TorchTraces(tuple(torch_rank(r, events // 2) for r in range(2)))
    system = load_system("dgx-a100", 8)
    t0 = time.perf_counter()
    result = replay(traces, system)
    seconds = time.perf_counter() - t0
    print(f"torch replay, {events:,} events (2 ranks, {len(traces.ranks[0].collectives):,} collectives, "
          f"{len(result.graph.tasks):,} tasks): {seconds:.2f} s -> {events / seconds:,.0f} events/s "
          f"(step {result.step_time_s:.3f} s)")


def main() -> None:
    part = sys.argv[1] if len(sys.argv) > 1 else "all"
    if part in ("torch", "all"):
        replay(TorchTraces(tuple(torch_rank(r, 100) for r in range(2))), load_system("dgx-a100", 8))  # warm
        for events in (100_000, 1_000_000):
            torch_replay_speed(events)
    if part in ("torch-json", "all"):
        torch_json_speed(1_000_000)
    if part in ("hlo", "all"):
        hlo_speed()
    if part in ("chakra", "all"):
        chakra_speed(sys.argv[2] if len(sys.argv) > 2 else "llama3-8b")


def torch_json_speed(events: int) -> None:
    """The fixture's step (tests/data/torch_trace, two ranks) repeated back to back until the two files hold
    `events` complete events, one ProfilerStep# spanning them; read (JSON parse and checks) and replayed."""
    import json

    from armillary.ingest.torch_trace import read_torch_traces

    with tempfile.TemporaryDirectory() as folder:
        for rank in (0, 1):
            data = json.loads((FIXTURE.parent.parent / "torch_trace" / f"rank{rank}.json").read_text())
            step = next(e for e in data["traceEvents"] if e.get("name", "").startswith("ProfilerStep#"))
            body = [e for e in data["traceEvents"] if e is not step and e.get("ph") == "X"]
            copies = events // 2 // len(body)
            data["traceEvents"] = [e for e in data["traceEvents"] if e.get("ph") != "X"] + [
                {**step, "dur": step["dur"] * copies}] + [
                {**e, "ts": e["ts"] + k * step["dur"]} for k in range(copies) for e in body]
            (Path(folder) / f"rank{rank}.json").write_text(json.dumps(data))
        t0, c0 = time.perf_counter(), time.process_time()
        traces = read_torch_traces(folder)
        t1, c1 = time.perf_counter(), time.process_time()
        result = replay(traces, load_system("dgx-a100", 8))
        print(f"torch chrome traces, {events:,} events: read {t1 - t0:.1f} s ({c1 - c0:.1f} s CPU), replay "
              f"{time.perf_counter() - t1:.1f} s ({time.process_time() - c1:.1f} s CPU), {len(result.graph.tasks):,} "
              "tasks")


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def chakra_speed(model: str) -> None:
    """Every rank of a 1,024-GPU step (tp 8, pp 4, dp 32 on DGX H100; seq 2048, global batch 256) written as
    Chakra traces and read back: wall and CPU seconds of each, and the process's peak RSS after each (the
    graph alone first; the import runs with the graph freed)."""
    import armillary
    from armillary.simulate.chakra import read_chakra, write_chakra
    from armillary.specs.workload import Training

    t0 = time.perf_counter()
    graph = armillary.simulate(model, "dgx-h100", {"tp": 8, "pp": 4}, Training(seq_len=2048, global_batch=256),
                               gpus=1024, symmetric=False).graph
    tasks, graph_s, graph_gb = len(graph.tasks), time.perf_counter() - t0, _peak_gb()
    print(f"{model}, 1,024 ranks: {tasks:,} tasks built in {graph_s:.1f} s, peak {graph_gb:.2f} GiB")
    with tempfile.TemporaryDirectory() as folder:
        t0, c0 = time.perf_counter(), time.process_time()
        write_chakra(graph, Path(folder))
        size = sum(p.stat().st_size for p in Path(folder).iterdir())
        print(f"  export: {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} s CPU), "
              f"{size / 1e6:.0f} MB written, peak {_peak_gb():.2f} GiB (target < 10 s, < 1 GB)")
        del graph
        t0, c0 = time.perf_counter(), time.process_time()
        back = read_chakra(Path(folder))
        print(f"  import: {time.perf_counter() - t0:.1f} s ({time.process_time() - c0:.1f} s CPU), "
              f"{len(back.tasks):,} tasks, peak {_peak_gb():.2f} GiB")


def hlo_speed() -> None:
    text = big_module()
    system = load_system("dgx-h100", 8)
    t0 = time.perf_counter()
    module = parse_hlo(text)
    t1 = time.perf_counter()
    cost = cost_module(module, system)
    t2 = time.perf_counter()
    print(f"{module.instruction_count:,} instructions ({len(text) / 1e6:.1f} MB): parse {t1 - t0:.2f} s, "
          f"cost {t2 - t1:.2f} s, total {t2 - t0:.2f} s (target < 2 s); {len(cost.costs)} executed computations")


if __name__ == "__main__":
    main()
