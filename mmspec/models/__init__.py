"""Adapters that turn a network into a TokenModel."""
