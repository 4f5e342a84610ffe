"""Benchmark wiring: the same server fixtures as the tests (`tests.fixtures`).

``./dev test`` runs this directory in a quick mode (few rounds, JSON to .benchmarks/latest.json,
and ``LAMINAR_BENCH_QUICK=1``, which every suite honours by shrinking its batch sizes);
``./dev bench`` runs it fully.
"""

pytest_plugins = ["tests.fixtures"]
