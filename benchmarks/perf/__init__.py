"""Performance tools: memory of the engine, the original code's AR beside mmspec's (see benchmarks/__init__.py)."""
