"""Benchmarks of objectspace: plain scripts that print their figures and record them in
BENCHMARKS.md. ``python -m benchmarks`` runs them all; ``python -m benchmarks.bench_buffer``
(and so on) runs one. ``--quick`` shrinks the sizes for a smoke run and records nothing.
"""
