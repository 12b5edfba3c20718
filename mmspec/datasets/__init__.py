"""Procedural datasets generated from a seed (nothing is downloaded)."""
