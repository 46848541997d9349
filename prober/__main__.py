"""`python -m prober`: the same entry point as the `prober` console script."""

from prober.commands.cli import main

main()
