"""Workload: what is run. Training now; inference arrives as another tagged member."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveInt

from armillary.specs.base import Spec


class Training(Spec):
    kind: Literal["training"] = "training"
    seq_len: PositiveInt = Field(description="tokens per sample")
    global_batch: PositiveInt = Field(description="samples per iteration (all data-parallel ranks)")


Workload = Training
