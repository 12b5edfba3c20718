"""Decoding engine: AR baseline and parallel decoding over any TokenModel.

`generate` (in `generate.py`) is the entry point; `loop/` holds the AR and Jacobi loops,
`branches/` the tree-attention branches, `auto/` the hardware-aware chooser. A map of the
modules in the order a call meets them is in docs/engine.md ("Layers").
"""
