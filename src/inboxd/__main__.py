"""`python -m inboxd` runs the command line."""

from inboxd.cli import main

main()
