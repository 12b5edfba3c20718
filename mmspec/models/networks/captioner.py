"""The shipped Shapes captioner: a transformers LLaVA (tiny CLIP vision tower, projector,
small Llama) and its processor (a byte-level BPE tokenizer trained on the captions).

Images are 64x64 and the vision tower cuts them into 8x8 patches: 64 image tokens (CLIP's
class token is dropped by the "default" feature strategy), then the prompt, then the
caption. Everything here builds from configs and works offline.

Example:
    >>> from mmspec.models.networks.captioner import captioner_config, PROMPT
    >>> config = captioner_config(vocab_size=600, image_token_id=3, pad_token_id=0)
    >>> config.vision_config.patch_size, config.image_seq_length, PROMPT
    (8, 64, '<image>describe the picture .')
"""

from __future__ import annotations

from transformers import (
    CLIPImageProcessor,
    CLIPVisionConfig,
    LlamaConfig,
    LlavaConfig,
    LlavaProcessor,
    PreTrainedTokenizerFast,
)

from mmspec.datasets.shapes import IMAGE_SIZE

PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2
PROMPT = "<image>describe the picture ."
# a prompt with an example caption: the captioner answers in the example's template (its
# sentence pattern), with the words about colours, sizes and places read from the image.
# The answer then repeats most of the prompt's words, which n-gram lookup drafts copy.
STYLE_PROMPT = "<image>describe the picture like this : {example}"


def default_prompt() -> str:
    """The shipped captioner's default prompt (after `<image>`): `STYLE_PROMPT` with the fourth
    object template's caption of a small red circle on blue (of the four, the one with the
    fewest words that change from image to image, so lookup drafts copy the most)."""
    from mmspec.datasets.shape_captions import Scene, caption

    example = caption(Scene(0, "red", "blue", "small", "middle centre", "waves"), template=3)
    return STYLE_PROMPT.format(example=example).removeprefix("<image>")


def draft_texts() -> list[str]:
    """One caption in each of the captioner's sentence patterns (4 for objects, 3 each for
    dots, stripes, checkerboards and sunsets), for prompt-lookup to copy drafts from when
    an image's pattern is not the prompt example's."""
    from mmspec.datasets.shape_captions import CLASS_NAMES, Scene, caption

    scenes = [Scene(CLASS_NAMES.index(name), "red", "blue", size, where, pattern) for name, size, where, pattern in (
        ("circle", "small", "middle centre", "waves"), ("dots", "small", "everywhere", "waves"),
        ("stripes", "large", "everywhere", "vertical"), ("checkerboard", "large", "everywhere", "small"),
        ("sunset", "medium", "bottom centre", "low"))]
    return list(dict.fromkeys(caption(scene, template=t) for scene in scenes for t in range(12)))


SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "image_token": "<image>"}
MAX_POSITIONS = 256  # 64 image tokens + prompt + a caption of at most ~60 tokens, with room


def captioner_config(vocab_size: int, image_token_id: int, pad_token_id: int, eos_token_id: int | None = None,
                     text_layers: int = 4, text_hidden: int = 192, vision_layers: int = 2, vision_hidden: int = 128) -> LlavaConfig:
    """A LLaVA config with a CLIP vision tower over 64x64 images (8x8 patches) and a small
    Llama; the defaults are the shipped model's."""
    vision = CLIPVisionConfig(
        hidden_size=vision_hidden, intermediate_size=2 * vision_hidden, num_hidden_layers=vision_layers,
        num_attention_heads=4, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, projection_dim=vision_hidden,
    )
    text = LlamaConfig(
        vocab_size=vocab_size, hidden_size=text_hidden, intermediate_size=8 * text_hidden // 3 // 64 * 64,
        num_hidden_layers=text_layers, num_attention_heads=4, num_key_value_heads=4,
        max_position_embeddings=MAX_POSITIONS, tie_word_embeddings=True,
        pad_token_id=pad_token_id, eos_token_id=eos_token_id, bos_token_id=None,
    )
    return LlavaConfig(
        vision_config=vision, text_config=text, image_token_index=image_token_id,
        vision_feature_select_strategy="default", vision_feature_layer=-1,
        image_seq_length=IMAGE_TOKENS, projector_hidden_act="gelu", tie_word_embeddings=True,
    )


def train_tokenizer(texts, vocab_size: int = 1024) -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer trained on `texts` (every byte stays encodable, so any
    prompt tokenizes), wrapped for transformers with the special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS.values()),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(texts, trainer)
    named = {k: v for k, v in SPECIAL_TOKENS.items() if k != "image_token"}
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, extra_special_tokens={"image_token": "<image>"}, **named)


def build_processor(tokenizer: PreTrainedTokenizerFast) -> LlavaProcessor:
    """A `LlavaProcessor` that maps 64x64 RGB images to pixels in [-1, 1] (the Shapes range)
    and expands `<image>` into the 64 image tokens."""
    image_processor = CLIPImageProcessor(
        do_resize=False, do_center_crop=False, do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": IMAGE_SIZE}, crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
    )
    return LlavaProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=PATCH_SIZE,
        vision_feature_select_strategy="default", num_additional_image_tokens=1, image_token="<image>",
    )
