"""`python -m armillary.cli`."""

from armillary.cli import main

main()
