"""The `finops` command line and what it prints."""
