"""A tiny random `SpeechPipeline`: a 1-layer MusicGen decoder, a word table and a mel codec
with random codebooks, built from configs (no training, no download)."""

import torch
import transformers as tf

from mmspec.models.adapters.musicgen import WordCondition
from mmspec.pipelines.audio import SpeechPipeline
from mmspec.tokenizers.audio_codec import MelCodec, MelCodecConfig

WORDS = ["zero", "one", "two"]


def tiny_speech_pipeline(vocab_size: int = 8, codebooks: int = 4, frames: int = 14, seed: int = 0) -> SpeechPipeline:
    torch.manual_seed(seed)
    config = tf.MusicgenDecoderConfig(vocab_size=vocab_size, num_codebooks=codebooks, hidden_size=16, num_hidden_layers=1,
                                      num_attention_heads=2, ffn_dim=32, max_position_embeddings=32, pad_token_id=vocab_size,
                                      bos_token_id=vocab_size, decoder_start_token_id=vocab_size)
    decoder = tf.MusicgenForCausalLM(config).eval()
    codec = MelCodec(MelCodecConfig(n_mels=16, codebooks=codebooks, codebook_size=vocab_size, griffin_lim_iters=2))
    codec.codebook.normal_(generator=torch.Generator().manual_seed(seed))
    return SpeechPipeline(decoder, WordCondition(WORDS, 16).eval(), codec, frames=frames)
