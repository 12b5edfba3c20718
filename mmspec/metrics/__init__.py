"""Quality measures used by tests and benchmarks."""
