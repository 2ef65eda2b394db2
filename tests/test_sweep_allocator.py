"""numerics.keep_sweep_memory: glibc's malloc told to keep freed memory for a search's next temporaries (issue
47: each block's temporaries of a few hundred KiB came in as fresh pages). It changes where arrays come from,
never a value: a search gives the same top 10 and counts before and after it is set."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from armillary import numerics


def test_an_allocator_chosen_by_the_environment_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert numerics._set_sweep_allocator() is False
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=131072")
    assert numerics._set_sweep_allocator() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_set_once_with_the_same_answer() -> None:
    first = numerics.keep_sweep_memory()
    assert numerics.keep_sweep_memory() is first
    assert len(numerics._sweep_allocator) == 1


SEARCH = """
from armillary.search.run import search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
r = search(load_model("gpt3-175b"), load_system("dgx-a100", 64),
           load_workload({"seq_len": 2048, "global_batch": 64}), load_strategy({"attention": "flash"}),
           StrategySpace(zero=(0, 1, 3), micro_batch=(1, 2)), top_k=10, chunk=4096)
print(repr(([(c.index, c.step_time_s) for c in r.top], r.points, r.evaluated, r.feasible)))
"""


def test_a_search_is_the_same_either_way() -> None:
    """The same search in a process whose allocator the environment fixes (never set here) and in one where
    it is set: the same top 10, bit for bit, and the same counts."""
    runs = {}
    for name, env in (("glibc's own", {"MALLOC_TRIM_THRESHOLD_": "131072"}), ("kept", {})):
        environment = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env
        runs[name] = subprocess.run([sys.executable, "-c", SEARCH], env=environment, check=True, capture_output=True,
                                    text=True).stdout
    assert runs["kept"] == runs["glibc's own"] and runs["kept"].startswith("([(")
