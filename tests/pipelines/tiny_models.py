"""Tiny random Emu3 and Janus models with offline tokenizers and processors, shared by
the adapter and pipeline tests. Nothing is downloaded: the tokenizers are `tokenizers`
WordLevel models wrapped in `PreTrainedTokenizerFast` with the special tokens the
transformers processors look up."""

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import (
    Emu3Config,
    Emu3ForConditionalGeneration,
    Emu3ImageProcessor,
    Emu3Processor,
    PreTrainedTokenizerFast,
)

WORDS = ["a", "cat", "dog", "red", "blue", "green", "bad", "ugly", "blurry", "*"] + [str(i) for i in range(10)]

# Emu3: a 2 x 3 token image (ratio "3:2", area 384 -> round(16 * 2 / 8) x round(16 * 3 / 8))
EMU3_SIZE = dict(ratio="3:2", image_area=384)
EMU3_GRID = (2, 3)
EMU3_SPECIAL = dict(
    pad_token="<|endoftext|>", bos_token="<|extra_203|>", eos_token="<|extra_204|>",
)
EMU3_NAMED = dict(
    image_token="<image>", boi_token="<|image start|>", eoi_token="<|image end|>",
    image_wrapper_token="<|image token|>", eof_token="<|extra_201|>",
)
EMU3_EOL = "<|extra_200|>"
EMU3_CODES = 20


def word_level_tokenizer(tokens: list[str], special: dict, named: dict, padding_side: str) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(["[UNK]", *tokens])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # "2*3" -> "2", "*", "3"
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", extra_special_tokens=named, padding_side=padding_side, **special
    )


def tiny_emu3() -> tuple[Emu3ForConditionalGeneration, Emu3Processor]:
    """A 2-layer Emu3 (hidden 32, GQA 2:1) with a 20-code VQ that decodes 2x3 tokens to 8x12 pixels."""
    visual = [f"<|visual token{i:06d}|>" for i in range(EMU3_CODES)]
    tokenizer = word_level_tokenizer(
        [*EMU3_SPECIAL.values(), *EMU3_NAMED.values(), EMU3_EOL, *visual, *WORDS], EMU3_SPECIAL, EMU3_NAMED, "left"
    )
    processor = Emu3Processor(Emu3ImageProcessor(), tokenizer)
    torch.manual_seed(0)
    config = Emu3Config(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=128,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        ),
        vq_config=dict(
            codebook_size=EMU3_CODES, embed_dim=4, latent_channels=4, temporal_downsample_factor=1, base_channels=32,
            channel_multiplier=[1, 2, 1], hidden_size=32, attn_resolutions=[],
        ),
        vocabulary_map=tokenizer.get_vocab(),
    )
    model = Emu3ForConditionalGeneration(config).eval()
    # sharper than the 0.02 init, so that greedy choices are far from ties
    torch.nn.init.normal_(model.lm_head.weight, std=0.5)
    return model, processor


def emu3_inputs(processor, prompts: list[str]):
    return processor(text=prompts, return_for_image_generation=True, padding=True, return_tensors="pt", **EMU3_SIZE)
