"""SpeechPipeline: a word-conditioned MusicGen decoder over a mel codec, decoded by any mmspec method.

The shipped speech model (`mmspec.assets.SPEECH_ASSETS`) says one of ten digit words. Its
decoder is transformers' `MusicgenForCausalLM`, served by the same `MusicgenLM` adapter as
MusicGen checkpoints, with a `WordCondition` table in place of T5; its tokens are the K
codebooks of a residual-VQ `MelCodec` under MusicGen's delay pattern.

Example:
    >>> from mmspec.pipelines.audio import SpeechPipeline
    >>> from mmspec.assets import SPEECH_ASSETS
    >>> pipe = SpeechPipeline.from_pretrained(SPEECH_ASSETS)  # doctest: +SKIP
    >>> out = pipe("seven", decoding="mc-sjd", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.audios.shape, out.sample_rate, out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from diffusers.utils import BaseOutput

from mmspec.utils.checkpoint import check_fits_memory, load_into, read_state_dict
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.stats import DecodeStats
from mmspec.metrics.spoken_words import WordClassifier, WordClassifierConfig
from mmspec.models.adapters.musicgen import MusicgenLM, WordCondition
from mmspec.pipelines.base import MMSpecPipeline, attention_heads
from mmspec.pipelines.checks import as_prompts, check_decoding_memory, check_generator, sampling_config
from mmspec.pipelines.components import Component, own_module, self_saving, transformers_model
from mmspec.pipelines.loading import save_module
from mmspec.utils.json_files import read_json
from mmspec.tokenizers.audio_codec import MelCodec

OUTPUT_TYPES = ("pt", "np", "tokens")
MAX_AUDIOS_PER_CALL = 256  # a bound on one call's work; the cache of a clip is a few hundred kB


@dataclass
class AudioPipelineOutput(BaseOutput):
    """Attributes:
    audios: float waveforms `[B, samples]` in [-1, 1] (`torch.Tensor` or `np.ndarray`, as
        `output_type` asked), or the decoded steps `[B, T, K]` for "tokens".
    sample_rate (`int`): samples per second of `audios`.
    stats (`list[DecodeStats]`): one per clip.
    tokens (`torch.Tensor`): long `[B, T, K]`, the generated steps (delay pattern included).
    codes (`torch.Tensor`): long `[B, K, frames]`, the codec codes (the pattern undone).
    """

    audios: object
    sample_rate: int
    stats: list[DecodeStats]
    tokens: torch.Tensor
    codes: torch.Tensor


def load_word_condition(folder: Path, dtype: torch.dtype | None) -> WordCondition:
    """A `WordCondition` from `config.json` (its words and width, checked before the table is
    allocated) and `model.safetensors`, in float32 (`SpeechPipeline.from_pretrained` casts it
    to the decoder's dtype)."""
    spec = read_json(folder / "config.json", "word condition")
    words, hidden = spec.get("words"), spec.get("hidden_size")
    if not isinstance(words, list) or not words or not all(isinstance(w, str) for w in words):
        raise ValueError(f"{folder / 'config.json'}: 'words' must be a non-empty list of strings, got {words!r}")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise ValueError(f"{folder / 'config.json'}: 'hidden_size' must be a whole number >= 1, got {hidden!r}")
    check_fits_memory(4 * len(words) * hidden, "the word condition's table", "check hidden_size in its config.json")
    condition = WordCondition(words, hidden)
    load_into(condition, read_state_dict(folder / "model.safetensors"), what="word condition")
    return condition.eval()


# its config is a plain dict (`WordCondition.config`)
WORD_CONDITION = Component(WordCondition.__module__, WordCondition.__name__, load=load_word_condition,
                           save=lambda condition, folder: save_module(folder, condition, condition.config))


class SpeechPipeline(MMSpecPipeline):
    """`decoder` (`MusicgenForCausalLM`) + `condition` (`WordCondition`) + `codec`
    (`MelCodec`), and optionally the `classifier` that judges the words it says.

    Saved as transformers saves the decoder (`decoder/`), safetensors + JSON for the other
    components, and a `model_index.json`; load with `from_pretrained` or
    `mmspec.pipelines.load_pipeline`.

    Args:
        frames (`int`): codec frames of a clip the decoder was trained on: the longest
            clip it makes.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model.
        metadata (`dict`, *optional*): other `model_index.json` entries (training provenance).
    """

    model_cpu_offload_seq = "condition->decoder->codec"
    _optional_components = ["classifier"]
    declared_components = {
        "decoder": transformers_model("MusicgenForCausalLM"),
        "condition": WORD_CONDITION,
        "codec": self_saving(MelCodec),
        "classifier": own_module(WordClassifier, WordClassifierConfig, "word classifier"),
    }
    config_attributes = {"frames": "frames", "default_sampling": "_saved_sampling"}
    keeps_metadata = True
    condition_kind = "prompt"

    def __init__(self, decoder, condition: WordCondition, codec: MelCodec, classifier: WordClassifier | None = None,
                 frames: int = 48, default_sampling: dict | None = None, metadata: dict | None = None):
        super().__init__()
        self.register_modules(decoder=decoder, condition=condition, codec=codec, classifier=classifier)
        self.frames = int(frames)
        self.keep_default_sampling(default_sampling)
        self.metadata = dict(metadata or {})
        limit = decoder.model.decoder.embed_positions.weights.shape[0] - 1 - (decoder.num_codebooks - 1)
        if not 1 <= self.frames <= limit:
            raise ValueError(f"frames must lie in [1, {limit}] (the decoder's positions), got {frames}")

    # --- what a front end reads ----------------------------------------------------------

    @property
    def words(self) -> list[str]:
        return list(self.condition.words)

    @property
    def sample_rate(self) -> int:
        return self.codec.config.sample_rate

    @property
    def codebooks(self) -> int:
        return self.decoder.num_codebooks

    @property
    def max_duration_s(self) -> float:
        """The longest clip: the length the decoder was trained on."""
        return self.frames / self.codec.frame_rate

    @property
    def device(self) -> torch.device:
        return self.decoder.device

    @property
    def dtype(self) -> torch.dtype:
        """The decoder's dtype (the codec and the classifier compute in float32)."""
        return self.decoder.dtype

    def to(self, *args, **kwargs) -> "SpeechPipeline":
        """Moves every component to a device, as `torch.nn.Module.to` takes it (`"cuda"`,
        `torch.bfloat16`, or both); a dtype casts the decoder and the word condition, while the
        codec (mel filterbanks, Griffin-Lim) and the classifier stay float32."""
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"a SpeechPipeline casts to a floating dtype such as torch.bfloat16, got {dtype}")
        for module in (self.decoder, self.condition):
            module.to(device, dtype)
        for module in (self.codec, self.classifier):
            if module is not None and device is not None:
                module.to(device)
        return self

    def steps_for(self, duration_s: float | None) -> int:
        """Decoder steps of a clip of `duration_s` seconds (frames + K - 1 under the delay
        pattern); a duration the model cannot make is refused."""
        if duration_s is None:
            return self.frames + self.codebooks - 1
        if isinstance(duration_s, bool) or not isinstance(duration_s, (int, float)) or not math.isfinite(duration_s):
            raise ValueError(f"duration must be a finite number of seconds, from {1 / self.codec.frame_rate:.3f} to "
                             f"{self.max_duration_s:.3f}, got {duration_s!r}")
        # compared before rounding: 1e308 seconds times the frame rate is inf, which round() cannot take
        seconds_per_frame = 1 / self.codec.frame_rate
        frames = round(duration_s * self.codec.frame_rate) if 0 < duration_s <= self.max_duration_s + seconds_per_frame else 0
        if not 1 <= frames <= self.frames:
            raise ValueError(f"duration {duration_s:g} s is outside what this model makes: "
                             f"{1 / self.codec.frame_rate:.3f} to {self.max_duration_s:.3f} s")
        return frames + self.codebooks - 1

    def token_model(self, steps: int) -> MusicgenLM:
        return MusicgenLM(self.decoder, steps, condition=self.condition, codebook_vectors=self.codec.codebook)

    def check_decoding(self, decoding: str | DecodingConfig, steps: int | None = None, rows: int = 1) -> DecodingConfig:
        """`decoding` parsed and checked over `rows` clips (`check_decoding_memory`): a window
        longer than the longest clip, or branches past the codebook's size or the memory of a
        forward, is refused; a window longer than a shorter clip of `steps` decoder steps (a
        short `duration_s` with the default window of 16) is cut to that clip."""
        config = check_decoding_memory(decoding, self.token_model(self.steps_for(None)).layout(), rows,
                                       attention_heads(self.decoder.config), device=self.device)
        steps = steps or self.steps_for(None)
        if config.method != "ar" and config.window is not None and config.window > steps:
            config = dataclasses.replace(config, window=steps)
        return config

    # --- loading and saving --------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs) -> "SpeechPipeline":
        """Loads a directory written by `save_pretrained` (the shipped model:
        `mmspec.assets.SPEECH_ASSETS`); `torch_dtype` casts the decoder, and the word condition
        follows the decoder's dtype."""
        pipe = super().from_pretrained(pretrained_model_name_or_path, **kwargs)
        pipe.condition.to(pipe.decoder.dtype)
        return pipe

    # --- the call ----------------------------------------------------------------------

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
        decoding: str | DecodingConfig = "auto",
        duration_s: float | None = None,
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        num_audios_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        output_type: str = "pt",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Says each word of `prompt`.

        Args:
            prompt (`str` or `list[str]`): words from `pipe.words`.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd+pcg", ...; `init="previous-step"`
                drafts each codebook's token from its previous step).
            duration_s (`float`, *optional*): clip length, at most `max_duration_s` (the default).
            guidance_scale, temperature, top_k, top_p (*optional*): sampling; default the
                pipeline's default sampling.
            num_audios_per_prompt (`int`, *optional*, defaults to 1): clips per word.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): every random
                draw; a list gives one per clip.
            output_type (`str`, *optional*, defaults to "pt"): "pt", "np" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): an `AudioPipelineOutput`, else
                a tuple `(audios, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p)
        words = as_prompts(prompt)
        word_ids = self.condition.word_ids([w.strip().lower() for w in words])
        if isinstance(num_audios_per_prompt, bool) or not isinstance(num_audios_per_prompt, int) or num_audios_per_prompt < 1:
            raise ValueError(f"num_audios_per_prompt must be an integer >= 1, got {num_audios_per_prompt!r}")
        n = len(words) * num_audios_per_prompt
        if n > MAX_AUDIOS_PER_CALL:
            raise ValueError(f"{n} clips in one call exceed {MAX_AUDIOS_PER_CALL}; split the request")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"unknown output_type {output_type!r}; choose from {', '.join(OUTPUT_TYPES)}")
        steps = self.steps_for(duration_s)
        decoding = self.check_decoding(decoding, steps, n)
        generator = check_generator(generator, n)
        # 2. the condition: word ids, which the token model's WordCondition embeds
        condition = word_ids.repeat_interleave(num_audios_per_prompt)
        # 3. the token model and its layout (delay pattern, codec vectors for pcg)
        lm = self.token_model(steps)
        # 4. decode
        tokens, stats = self.decode_tokens(lm, condition, lm.layout(), decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize
        codes = lm.frames(tokens)
        if output_type == "tokens":
            audios = tokens
        else:
            audios = self.codec.decode(codes)
            audios = audios.numpy() if output_type == "np" else audios
        # 6. return
        if not return_dict:
            return audios, stats
        return AudioPipelineOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, tokens=tokens, codes=codes)
