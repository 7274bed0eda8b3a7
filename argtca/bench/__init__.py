"""The throughput benchmark: ``python -m argtca.bench`` (see ``benchmarks/README.md``)."""
