"""Codecs between media and tokens."""
