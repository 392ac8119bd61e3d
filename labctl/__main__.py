"""`python -m labctl`: the same command line as `labctl`."""

from labctl.cli import main

main()
