"""The version of perdure (one place, read by the package and by migrations)."""

__version__ = "0.1.0"
