"""Tiny random Emu3 and Janus models with offline tokenizers and processors, shared by
the adapter and pipeline tests. Nothing is downloaded: the tokenizers are `tokenizers`
WordLevel models wrapped in `PreTrainedTokenizerFast` with the special tokens the
transformers processors look up."""

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import (
    Emu3Config,
    Emu3ForConditionalGeneration,
    Emu3ImageProcessor,
    Emu3Processor,
    GenerationConfig,
    JanusConfig,
    JanusForConditionalGeneration,
    JanusImageProcessor,
    JanusProcessor,
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


def word_level_tokenizer(tokens: list[str], special: dict, named: dict, padding_side: str,
                         add_bos: bool = False) -> PreTrainedTokenizerFast:
    vocab = {t: i for i, t in enumerate(["[UNK]", *tokens])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # "2*3" -> "2", "*", "3"
    if add_bos:  # as Llama's tokenizer does (Janus); Emu3's processor adds its BOS itself
        bos = special["bos_token"]
        tok.post_processor = processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, vocab[bos])])
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


# Janus: 4 x 4 codes of a 12-code VQ, decoded to 8 x 8 pixels
JANUS_GRID = (4, 4)
JANUS_SPECIAL = dict(pad_token="<|pad|>", bos_token="<|begin_of_sentence|>", eos_token="<|end_of_sentence|>")
JANUS_NAMED = dict(image_token="<image_placeholder>", boi_token="<begin_of_image>", eoi_token="<end_of_image>")


def tiny_janus() -> tuple[JanusForConditionalGeneration, JanusProcessor]:
    """A 2-layer Llama (hidden 32, GQA 4:2) Janus with a 12-code VQ; the known-good
    config quirks: VQ projection and token embedding dims equal the text hidden size, and
    the vision grid (20 / 5 = 4 patches a side) sets the 16 image tokens."""
    tokenizer = word_level_tokenizer([*JANUS_SPECIAL.values(), *JANUS_NAMED.values(), *WORDS], JANUS_SPECIAL, JANUS_NAMED,
                                     "left", add_bos=True)
    processor = JanusProcessor(JanusImageProcessor(), tokenizer, num_image_tokens=16)
    torch.manual_seed(0)
    config = JanusConfig(
        text_config=dict(
            model_type="llama", vocab_size=len(tokenizer), hidden_size=32, intermediate_size=37, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
            pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        ),
        vision_config=dict(image_size=20, patch_size=5, num_image_tokens=16, hidden_size=32, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=37, projection_dim=32),
        vq_config=dict(embed_dim=12, num_embeddings=12, latent_channels=12, base_channels=32, channel_multiplier=[1, 1],
                       projection_dim=32, image_token_embed_dim=32),
        image_token_id=tokenizer.image_token_id,
    )
    model = JanusForConditionalGeneration(config).eval()
    # as the hub checkpoints ship it: transformers' image mode reads these (its own file, not
    # one derived from the model config, so that save/load keeps `generation_kwargs`)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        generation_kwargs={"boi_token_id": tokenizer.boi_token_id},
    )
    # larger than the 0.02 init, so that the image tokens steer the next one and greedy
    # choices vary (at 0.02 the prompt dominates and greedy repeats one code)
    for name in ("language_model", "generation_embeddings", "generation_aligner", "generation_head"):
        for weight in getattr(model.model, name).parameters():
            if weight.dim() == 2:
                torch.nn.init.normal_(weight, std=0.5)
    return model, processor


def janus_inputs(processor, prompts: list[str]):
    return processor(text=prompts, generation_mode="image", padding=True, return_tensors="pt")
