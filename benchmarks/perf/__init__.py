"""Performance tools: memory of the engine, the original code's AR beside mmspec's, no_grad against inference mode,
eager against torch.compile (see benchmarks/__init__.py)."""
