"""Import paths the docs name keep working after a module is split: `armillary.specs.system.Device` (docs/api.md
named it there before `specs/device.py` held it) and the top-level names of the hardware specs."""

import armillary
from armillary.specs import device, memory, system


def test_device_still_imports_from_system() -> None:
    assert system.Device is device.Device


def test_top_level_hardware_names() -> None:
    assert armillary.Device is device.Device
    assert armillary.Precision is device.Precision
    assert armillary.MemoryTier is memory.MemoryTier
    assert armillary.System is system.System
