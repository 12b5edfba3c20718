"""A tiny random captioner (the shipped architecture at test size) built offline."""

import functools

import numpy as np
import torch
from transformers import LlavaForConditionalGeneration

from mmspec.datasets.shape_captions import caption, render_scenes
from mmspec.models.networks.captioner import PROMPT, build_processor, captioner_config, train_tokenizer
from mmspec.pipelines.captioning import CaptioningPipeline


@functools.cache
def tiny_processor():
    rng = np.random.default_rng(0)
    _, scenes = render_scenes(np.arange(40) % 10, rng)
    return build_processor(train_tokenizer([caption(s, rng) for s in scenes] + [PROMPT.replace("<image>", "")], vocab_size=400))


def tiny_captioner(seed: int = 0) -> CaptioningPipeline:
    processor = tiny_processor()
    tokenizer = processor.tokenizer
    config = captioner_config(len(tokenizer), tokenizer.convert_tokens_to_ids("<image>"), tokenizer.pad_token_id,
                              tokenizer.eos_token_id, text_layers=2, text_hidden=64, vision_layers=1, vision_hidden=32)
    torch.manual_seed(seed)
    model = LlavaForConditionalGeneration(config).eval()
    return CaptioningPipeline(model, processor)
