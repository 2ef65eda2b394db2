"""`python -m armillary.cli`."""

from armillary.cli import app

app()
