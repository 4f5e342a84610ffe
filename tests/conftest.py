"""Test-suite wiring: the shared server fixtures live in the `tests.fixtures` plugin."""

pytest_plugins = ["tests.fixtures"]
