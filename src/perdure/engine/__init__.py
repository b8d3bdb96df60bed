"""The replay engine: one pass of a workflow body over its journal."""
