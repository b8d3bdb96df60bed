"""The `stepwise` command line."""
