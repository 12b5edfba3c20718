"""transformers' `custom_generate` entry point to mmspec's parallel decoding:

    model.generate(**inputs, custom_generate=mmspec.CUSTOM_GENERATE, trust_remote_code=True,
                   decoding="mc-sjd+lookup", max_new_tokens=64)
"""

from mmspec.pipelines.text import generate_from_transformers


def generate(model, **kwargs):
    return generate_from_transformers(model, **kwargs)
