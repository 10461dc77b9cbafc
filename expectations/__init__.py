"""Expectation suites as Python code. Each module exposes ``SUITES``: table -> expectation factory."""

from expectations.warehouse_suite import SUITES

__all__ = ["SUITES"]
