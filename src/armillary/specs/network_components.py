"""Cost and power of network bandwidth by component class (`presets/network/components.yaml`): what one
device's GB/s on a dimension costs in dollars and watts, for `network-optimize` (LIBRA-style cost models,
Won et al., ISPASS'24). A network dimension names its class with `component:`."""

from __future__ import annotations

import functools

from pydantic import Field, model_validator

from armillary.presets.registry import preset_dir, read_data_file
from armillary.specs.base import Spec


class ComponentClass(Spec):
    """One class: $ and W per GB/s of per-device injection bandwidth (one direction), each with its source."""

    description: str
    includes: tuple[str, ...] = Field(min_length=1, description="what the figures cover: link, switch port, NIC...")
    dollars_per_gbps: float | None = Field(None, gt=0, description="US dollars per GB/s per device")
    watts_per_gbps: float | None = Field(None, gt=0, description="watts per GB/s per device")
    confidence: str = Field(description="how far to trust the figures, and why")
    sources: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _sourced(self) -> ComponentClass:
        if self.dollars_per_gbps is None and self.watts_per_gbps is None:
            raise ValueError("give dollars_per_gbps, watts_per_gbps or both")
        for name in ("dollars_per_gbps", "watts_per_gbps"):
            if getattr(self, name) is not None and name not in self.sources:
                raise ValueError(f"{name} needs a source (sources.{name})")
        return self


class ComponentTable(Spec):
    classes: dict[str, ComponentClass] = Field(min_length=1)


@functools.cache
def component_classes() -> dict[str, ComponentClass]:
    """The shipped table, by class name."""
    return dict(ComponentTable.model_validate(read_data_file(preset_dir("network") / "components.yaml")).classes)


def component_class(name: str) -> ComponentClass:
    """The class called `name`; an unknown name is an error that lists the known ones."""
    classes = component_classes()
    if name not in classes:
        raise ValueError(f"unknown network component class {name!r}; known: {', '.join(sorted(classes))}")
    return classes[name]
