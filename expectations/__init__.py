"""Expectation suites as Python code: ``suites(entity)`` gives frame -> expectation factory for one
entity's warehouse (``SUITES``: the default customer entity's)."""

from expectations.warehouse_suite import SUITES, suites

__all__ = ["SUITES", "suites"]
