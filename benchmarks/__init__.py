"""Benchmarks, side by side in one run; each is a module run from the project root:
``.venv/bin/python -m benchmarks.<name> --help``. Kept out of the test run (``make benchmark``)."""
