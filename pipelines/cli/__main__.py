"""`python -m pipelines.cli`: the `finops` command."""

from pipelines.cli.main import main

main()
