"""memo.quick_replace: the same copy as dataclasses.replace, made without __init__ for quick_init classes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from armillary.api import estimate
from armillary.estimate.result import PassCost, StepEstimate
from armillary.memo import quick_init, quick_replace
from armillary.specs.run import load_run


@quick_init
@dataclasses.dataclass(frozen=True)
class _Checked:
    x: float
    y: float = 1.0

    def __post_init__(self) -> None:
        if self.x < 0:
            raise ValueError("x must be >= 0")


@dataclasses.dataclass(frozen=True)
class _Plain:
    x: float
    y: float = 1.0


def test_equal_to_dataclasses_replace() -> None:
    p = PassCost(1.0, 2.0, 3.0)
    q = quick_replace(p, time_s=4.0)
    assert q == dataclasses.replace(p, time_s=4.0) == PassCost(1.0, 2.0, 4.0)
    assert p == PassCost(1.0, 2.0, 3.0)  # the original untouched
    assert type(q) is PassCost and q is not p
    with pytest.raises(dataclasses.FrozenInstanceError):
        q.flop = 5.0  # type: ignore[misc]  # still frozen


def test_a_real_estimate_copies_field_for_field() -> None:
    run = load_run(Path(__file__).parent.parent / "examples" / "gpt3-175b-a100.yaml")
    result = estimate(*run)
    assert isinstance(result, StepEstimate)
    assert quick_replace(result, advice=("x",)) == dataclasses.replace(result, advice=("x",))


def test_post_init_and_plain_classes_go_through_replace() -> None:
    with pytest.raises(ValueError, match="x must be"):
        quick_replace(_Checked(1.0), x=-1.0)  # __post_init__ still runs
    assert quick_replace(_Plain(1.0), y=2.0) == _Plain(1.0, 2.0)


def test_an_unknown_field_fails_as_replace_does() -> None:
    with pytest.raises(TypeError):
        quick_replace(PassCost(1.0, 2.0, 3.0), seconds=1.0)
