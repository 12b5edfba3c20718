"""Probabilistic verification: a PyTorch reference and a Triton kernel for CUDA tensors (`verify`)."""
