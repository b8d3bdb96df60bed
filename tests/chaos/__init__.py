"""Chaos tests: real worker processes, really killed, on real databases."""
