"""What armillary raises, by kind. Every message names the field, file or option and what is allowed.

- `SpecError`: a specification, file or option that cannot be used (a field, a value, a missing file).
- `MissingExtra`: an optional dependency is not installed; the message gives the pip extra to install.
- `ResultError`: a result that breaks an invariant (a time that is not finite and positive, MFU above 100%,
  a negative bubble): refused rather than printed (`estimate.invariants`).

All derive from `ArmillaryError`, which the command line turns into a one-line message and exit code 2.
Infeasible configurations are not errors: estimates report them (`feasible`, `infeasible_reasons`).
"""

from __future__ import annotations


class ArmillaryError(Exception):
    """Base of every error armillary raises on purpose."""


class SpecError(ArmillaryError, ValueError):
    """A specification that cannot be used, with the field and the allowed values in the message."""


class MissingExtra(ArmillaryError, ImportError):  # noqa: N818 - reads as what is missing
    """An optional dependency is not installed."""

    def __init__(self, what: str, extra: str, package: str) -> None:
        super().__init__(f"{what} needs {package}: pip install 'armillary[{extra}]'")
        self.extra = extra


class ResultError(ArmillaryError, ArithmeticError):
    """A result that breaks an invariant of the physics; the message names the quantity and its value."""


SHOWN_CHARACTERS = 40  # of one value of a user's file that an error message quotes


def shown_value(value: object, at_most: int = SHOWN_CHARACTERS) -> str:
    """A value of a user's file as an error message quotes it: its repr if short, else its start (a message
    says what is wrong without printing the file)."""
    text = repr(value)
    return text if len(text) <= at_most else text[:max(at_most - 3, 0)] + "..."
