"""Probabilistic verification kernels (see the kernel issue)."""
