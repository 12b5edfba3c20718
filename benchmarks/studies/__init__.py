"""One-off studies: the analyses behind a setting or a finding recorded in docs/ (see benchmarks/__init__.py)."""
