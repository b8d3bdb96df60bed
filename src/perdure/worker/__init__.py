"""Workers: claim runs, execute them, keep their leases, stop gracefully."""

from .worker import Worker

__all__ = ["Worker"]
