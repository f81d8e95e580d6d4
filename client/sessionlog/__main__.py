"""`python -m sessionlog` runs the CLI."""

from sessionlog.cli.main import main

main()
