"""mmspec: many tokens per forward pass for autoregressive multimodal generators."""

__version__ = "0.1.0"
