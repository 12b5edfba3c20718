"""Diffusers-style pipelines, one file per model family."""
