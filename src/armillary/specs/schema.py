"""The JSON Schemas users validate their data files against (`armillary schema KIND`)."""

from __future__ import annotations

from pydantic import BaseModel

from armillary.specs.device import Device
from armillary.specs.model import Model
from armillary.specs.run import RunFile
from armillary.specs.stack import SoftwareStack
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training

SCHEMAS: dict[str, type[BaseModel]] = {
    "model": Model, "device": Device, "system": System, "strategy": Strategy, "workload": Training,
    "inference": Inference, "run": RunFile, "stack": SoftwareStack,
}
