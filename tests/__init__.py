"""Laminar's test suite (a package so that ``tests.fixtures`` is importable from benches/ too)."""
