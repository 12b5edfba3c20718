"""mmspec: many tokens per forward pass for autoregressive multimodal generators.

The public names load on first use (as diffusers does), so `import mmspec` stays cheap:

    from mmspec import generate, DecodingConfig, SamplingConfig, LlamaGenPipeline, SpeechPipeline, load_pipeline
    from mmspec import generate_text  # transformers LMs and VLMs
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

# every pipeline by its class name (`mmspec.load_pipeline` reads a saved folder's class here)
PIPELINES = {
    "LlamaGenPipeline": "mmspec.pipelines.llamagen",
    "Emu3Pipeline": "mmspec.pipelines.emu3",
    "JanusPipeline": "mmspec.pipelines.janus",
    "LuminaMGPTPipeline": "mmspec.pipelines.lumina_mgpt",
    "CaptioningPipeline": "mmspec.pipelines.captioning",
    "MeshPipeline": "mmspec.pipelines.mesh",
    "SpeechPipeline": "mmspec.pipelines.audio",
    "VideoPipeline": "mmspec.pipelines.video",
    "LPDPipeline": "mmspec.pipelines.lpd",
    "OrpheusPipeline": "mmspec.pipelines.orpheus",
    "CosmosPipeline": "mmspec.pipelines.cosmos",
    "DiaPipeline": "mmspec.pipelines.dia",
}

_EXPORTS = {
    "generate": "mmspec.decoding.generate",
    "DecodingConfig": "mmspec.decoding.config",
    "DecodeStats": "mmspec.decoding.stats",
    "SamplingConfig": "mmspec.core.sampling",
    "TokenLayout": "mmspec.core.layout",
    **PIPELINES,  # as diffusers exports its pipelines
    "load_pipeline": "mmspec.pipelines",
    "generate_text": "mmspec.pipelines.text",
    "CUSTOM_GENERATE": "mmspec.pipelines.text",
    "TransformersLM": "mmspec.models.adapters.transformers_lm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'mmspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
