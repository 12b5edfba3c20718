"""Decoding engine: AR baseline and parallel decoding over any TokenModel."""
