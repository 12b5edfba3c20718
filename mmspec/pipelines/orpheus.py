"""OrpheusPipeline: text to speech with an Orpheus-format Llama over SNAC, decoded by any exact method.

Orpheus (canopylabs/orpheus-3b-0.1-ft), Maya1 and the fine-tunes that keep Orpheus's token
layout write 24 kHz SNAC codes as Llama tokens, seven a frame, about 82 a second of audio:
a 14-second clip is 1,200 sequential forwards under AR. The layout, the prompt framing and
the sampling recipe are Orpheus's (`mmspec.models.adapters.orpheus`); the network is
transformers' `LlamaForCausalLM`, unmodified.

Example:
    >>> from mmspec import OrpheusPipeline
    >>> pipe = OrpheusPipeline.from_orpheus("orpheus-3b-0.1-ft", "snac_24khz")  # doctest: +SKIP
    >>> out = pipe("Hey there, how are you?", voice="tara", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.audios[0].shape, out.sample_rate, out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from mmspec.core.noise import Noise
from mmspec.core.processors import RepetitionPenalty
from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.orpheus import FRAME, OrpheusFormat, OrpheusLM
from mmspec.pipelines.base import MMSpecPipeline, attention_heads
from mmspec.pipelines.checks import as_prompts, check_decoding_memory, check_generator, sampling_config
from mmspec.pipelines.components import self_saving, transformers_model, transformers_processor
from mmspec.pipelines.loading import as_dtype
from mmspec.pipelines.pipeline_output import SpeechPipelineOutput
from mmspec.pipelines.text import TEXT_DRAFTERS, check_text_decoding
from mmspec.tokenizers.snac_codec import SnacCodec

OUTPUT_TYPES = ("pt", "np", "tokens")
MAX_CLIPS_PER_CALL = 64
# the drafters of a text, with the same slot of the frame before in the place of the previous step
ORPHEUS_DRAFTERS = tuple(d for d in TEXT_DRAFTERS if d != "previous-step") + ("previous-frame",)
STREAM_WINDOW = 4  # frames SNAC decodes for one streamed frame, as Orpheus's decoder does


def clip_seed(noise: Noise, row: int) -> int:
    """The seed of SNAC's decoder noise for a clip: its row's key, so the waveform follows the
    caller's generator as the tokens do."""
    k0, k1 = (int(k) for k in noise.keys[row].cpu())
    return (k0 << 31) ^ k1


class AudioStream:
    """Audio as frames commit, the way Orpheus's decoder streams it: once n >= 4 frames of a
    clip are committed, SNAC decodes frames n-4 .. n-1 (its noise seeded `seed + n - 4`) and
    the second of the four frames' samples go to `on_audio(row, samples)`. So a clip streams
    from its second frame to its third-last, each frame decoded with context on both sides.
    """

    def __init__(self, audio_format: OrpheusFormat, codec: SnacCodec, seeds: list[int], on_audio: Callable):
        self.audio_format, self.codec, self.seeds, self.on_audio = audio_format, codec, seeds, on_audio
        self.frames_sent = [0] * len(seeds)

    def __call__(self, tokens: torch.Tensor) -> None:
        committed = (tokens >= 0).long().cumprod(1).sum(1)
        stop = tokens == self.audio_format.stop_token_id
        for row, seed in enumerate(self.seeds):
            prefix = tokens[row, : int(committed[row])]
            frames = int((~stop[row, : len(prefix)]).long().cumprod(0).sum()) // FRAME
            for n in range(max(self.frames_sent[row], STREAM_WINDOW - 1) + 1, frames + 1):
                window = self.audio_format.codes(prefix[(n - STREAM_WINDOW) * FRAME : n * FRAME])
                samples = 4 * self.codec.hop_length  # a frame: four codes of the finest level
                audio = self.codec.decode(window, seed + n - STREAM_WINDOW)[0]
                self.on_audio(row, audio[samples : 2 * samples])
            self.frames_sent[row] = max(self.frames_sent[row], frames)


class OrpheusPipeline(MMSpecPipeline):
    """`model` (`LlamaForCausalLM`) + `tokenizer` (its fast tokenizer) + `codec` (`SnacCodec`).

    Args:
        audio_format (`dict`, *optional*): `OrpheusFormat`'s fields (ids of the audio, the stop
            token and the prompt framing); Orpheus's by default.
        voices (`list[str]`, *optional*): the voices the model was tuned on ("tara", "leah",
            ...); empty for a model that takes none (a pretrained Orpheus).
        max_new_tokens (`int`, *optional*, defaults to 1200): the longest clip, in tokens
            (Orpheus's `max_tokens`); cut to whole frames.
        repetition_penalty (`float`, *optional*, defaults to 1.3): Orpheus's; it keeps the
            model from looping.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model
            (Orpheus's temperature 0.6 and top-p 0.8 otherwise).
    """

    model_cpu_offload_seq = "model->codec"
    declared_components = {
        "model": transformers_model("LlamaForCausalLM"),
        "tokenizer": transformers_processor("PreTrainedTokenizerFast"),
        "codec": self_saving(SnacCodec),
    }
    config_attributes = {"audio_format": "audio_format_dict", "voices": "voices", "max_new_tokens": "max_new_tokens",
                         "repetition_penalty": "repetition_penalty", "default_sampling": "_saved_sampling"}
    family_sampling = {"temperature": 0.6, "top_p": 0.8}
    condition_kind = "prompt"
    speaks_text = True  # any text, in named voices (the shipped digit model says words from a list)

    def __init__(self, model, tokenizer, codec: SnacCodec, audio_format: dict | None = None, voices: list | None = None,
                 max_new_tokens: int = 1200, repetition_penalty: float = 1.3, default_sampling: dict | None = None):
        super().__init__()
        self.register_modules(model=model, tokenizer=tokenizer, codec=codec)
        self.audio_format = OrpheusFormat.from_dict(dict(audio_format or {}))
        if self.audio_format.codebook_size != codec.codebook_size or codec.levels != 3:
            raise ValueError(f"the codec has {codec.levels} levels of {codec.codebook_size} codes; the Orpheus format needs "
                             f"SNAC's 3 levels of {self.audio_format.codebook_size}: a mismatched codec")
        self.audio_format.allowed(model.get_output_embeddings().weight.shape[0])  # ids beyond the vocabulary fail here
        if not isinstance(voices, (list, tuple, type(None))) or not all(isinstance(v, str) and v for v in voices or []):
            raise ValueError(f"voices must be a list of names, got {voices!r}")
        self.voices = list(voices or [])
        self.max_new_tokens = self.check_length(max_new_tokens)
        if isinstance(repetition_penalty, bool) or not isinstance(repetition_penalty, (int, float)) or not repetition_penalty > 0:
            raise ValueError(f"repetition_penalty must be a number > 0, got {repetition_penalty!r}")
        self.repetition_penalty = float(repetition_penalty)
        self.keep_default_sampling(default_sampling)

    # --- what a front end reads ----------------------------------------------------------

    @property
    def audio_format_dict(self) -> dict:
        return self.audio_format.to_dict()

    @property
    def sample_rate(self) -> int:
        return self.codec.sample_rate

    @property
    def frame_rate(self) -> float:
        """Frames (seven tokens) a second of audio."""
        return self.sample_rate / (4 * self.codec.hop_length)

    @property
    def context_length(self) -> int:
        return int(self.model.config.max_position_embeddings)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        return self.model.dtype

    def to(self, *args, **kwargs) -> "OrpheusPipeline":
        """Moves the components; a dtype casts the Llama, while SNAC stays float32."""
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"an OrpheusPipeline casts to a floating dtype such as torch.bfloat16, got {dtype}")
        self.model.to(device, dtype)
        if device is not None:
            self.codec.to(device)
        return self

    def check_length(self, max_new_tokens) -> int:
        """Tokens of the longest clip, cut to whole frames; fewer than a frame or more than the
        model's context is refused."""
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not FRAME <= max_new_tokens < self.context_length:
            raise ValueError(f"max_new_tokens must be a whole number from {FRAME} (one frame) to {self.context_length - 1} "
                             f"(the model's context), got {max_new_tokens!r}")
        return max_new_tokens - max_new_tokens % FRAME

    def token_model(self, max_new_tokens: int | None = None) -> OrpheusLM:
        return OrpheusLM(self.model, (max_new_tokens or self.max_new_tokens) // FRAME, self.audio_format)

    def check_decoding(self, decoding: str | DecodingConfig, rows: int = 1, max_new_tokens: int | None = None) -> DecodingConfig:
        """`decoding` parsed and checked: exact methods over a line of tokens (draft inits
        `ORPHEUS_DRAFTERS`), within the sequence and the memory of a forward over `rows` clips."""
        config = check_text_decoding(decoding, ORPHEUS_DRAFTERS)
        return check_decoding_memory(config, self.token_model(max_new_tokens).layout(), rows, attention_heads(self.model.config),
                                     device=self.device)

    def prompt_ids(self, text: str, voice: str | None) -> list[int]:
        """The framed prompt of `text` in `voice`, as Orpheus's `_format_prompt` builds it."""
        if voice is not None and voice not in self.voices:
            raise ValueError(f"unknown voice {voice!r}; this model speaks in "
                             f"{', '.join(self.voices) if self.voices else 'no named voice (give voice=None)'}")
        words = text.strip() if voice is None else self.audio_format.voice_format.format(voice=voice, text=text.strip())
        return self.audio_format.prompt_ids(self.tokenizer(words).input_ids)

    def commit_grid(self, commit_iteration: torch.Tensor) -> torch.Tensor:
        """`[7, frames]`: the forward that committed each slot of each frame of a clip."""
        frames = len(commit_iteration) // FRAME
        return commit_iteration[: frames * FRAME].reshape(frames, FRAME).T

    def check_text(self, text: str, voice: str | None = None, max_new_tokens: int | None = None) -> list[int]:
        """The framed prompt of one text, refused in one line when the text is empty, the
        voice unknown, or the prompt and the clip overrun the model's context."""
        as_prompts(text, "the text")
        length = self.max_new_tokens if max_new_tokens is None else self.check_length(max_new_tokens)
        ids = self.prompt_ids(text, voice)
        if len(ids) + length > self.context_length:
            raise ValueError(f"a prompt of {len(ids)} tokens and a clip of {length} exceed the model's context of "
                             f"{self.context_length} tokens; shorten the text or max_new_tokens")
        return ids

    @classmethod
    def from_orpheus(cls, checkpoint: str | Path, snac: str | Path, voices: list[str] | None = None,
                     audio_format: dict | None = None, **kwargs) -> "OrpheusPipeline":
        """A pipeline from an Orpheus-format checkpoint folder (transformers layout: its
        `config.json`, safetensors weights and tokenizer files, as canopylabs/orpheus-3b-0.1-ft
        is published) and a SNAC folder (hubertsiuzdak/snac_24khz). Nothing from the folders
        is executed. `voices` defaults to Orpheus's eight; `audio_format` and `kwargs`
        (`max_new_tokens`, `repetition_penalty`, `default_sampling`) as the constructor takes them."""
        for folder, what in ((checkpoint, "an Orpheus-format checkpoint (config.json, weights, tokenizer)"),
                             (snac, "a SNAC codec (config.json and its weights)")):
            if not Path(folder).is_dir():
                raise ValueError(f"{folder} is not a folder holding {what}")
        codec = SnacCodec.from_pretrained(snac)  # small: a missing or broken codec fails before the Llama loads
        model = cls.declared_components["model"].load(Path(checkpoint), as_dtype(kwargs.pop("torch_dtype", None)))
        tokenizer = cls.declared_components["tokenizer"].load(Path(checkpoint), None)
        voices = ["tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe"] if voices is None else voices
        return cls(model, tokenizer, codec, audio_format=audio_format, voices=voices, **kwargs)

    # --- the call ----------------------------------------------------------------------

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
        voice: str | list[str | None] | None = None,
        decoding: str | DecodingConfig = "auto",
        max_new_tokens: int | None = None,
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        repetition_penalty: float | None = None,
        num_audios_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        output_type: str = "pt",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
        callback_on_audio: Callable[[int, torch.Tensor], None] | None = None,
    ):
        """Says each text of `prompt`.

        Args:
            prompt (`str` or `list[str]`): the texts.
            voice (`str` or `list`, *optional*): one of `pipe.voices` (or one per text); None
                frames the text alone.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): "auto", "ar",
                "keyed", "sjd", "mc-sjd", each with draft inits of `ORPHEUS_DRAFTERS`
                ("mc-sjd+previous-frame", "keyed+lookup").
            max_new_tokens (`int`, *optional*): the longest clip in tokens (the pipeline's, 1200
                for Orpheus, by default); a clip ends earlier at the stop token.
            guidance_scale (*optional*): Orpheus has no unconditional prompt: only 1.
            temperature, top_k, top_p, repetition_penalty (*optional*): sampling; Orpheus's
                0.6, all, 0.8 and 1.3 by default.
            num_audios_per_prompt (`int`, *optional*, defaults to 1): clips per text.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): every random
                draw (tokens and SNAC's decoder noise); a list gives one per clip.
            output_type (`str`, *optional*, defaults to "pt"): "pt", "np" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): a `SpeechPipelineOutput`, else
                a tuple `(audios, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
            callback_on_audio (`Callable`, *optional*): `fn(clip, samples)` with each frame's
                audio as it commits (`AudioStream`), for playback before the call returns.
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p)
        if sampling.guided:
            raise ValueError("Orpheus has no unconditional prompt to guide against: guidance_scale must be 1")
        penalty = self.repetition_penalty if repetition_penalty is None else repetition_penalty
        if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 0 < penalty <= 10:
            raise ValueError(f"repetition_penalty must be a number in (0, 10], got {penalty!r}")
        texts = as_prompts(prompt)
        if isinstance(num_audios_per_prompt, bool) or not isinstance(num_audios_per_prompt, int) or num_audios_per_prompt < 1:
            raise ValueError(f"num_audios_per_prompt must be an integer >= 1, got {num_audios_per_prompt!r}")
        n = len(texts) * num_audios_per_prompt
        if n > MAX_CLIPS_PER_CALL:
            raise ValueError(f"{n} clips in one call exceed {MAX_CLIPS_PER_CALL}; split the request")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"unknown output_type {output_type!r}; choose from {', '.join(OUTPUT_TYPES)}")
        length = self.max_new_tokens if max_new_tokens is None else self.check_length(max_new_tokens)
        voices = voice if isinstance(voice, list) else [voice] * len(texts)
        if len(voices) != len(texts):
            raise ValueError(f"voice is a list of {len(voices)} for {len(texts)} texts; give one voice or one per text")
        prompts = [self.check_text(text, v, length) for text, v in zip(texts, voices) for _ in range(num_audios_per_prompt)]
        longest = max(len(p) for p in prompts)
        decoding = self.check_decoding(decoding, n, length)
        noise = Noise.from_generator(check_generator(generator, n), n, self.device)
        # 2. the condition: the framed prompts, padded on the left
        ids = torch.zeros(n, longest, dtype=torch.long)
        mask = torch.zeros(n, longest, dtype=torch.long)
        for row, p in enumerate(prompts):
            ids[row, longest - len(p) :], mask[row, longest - len(p) :] = torch.tensor(p), 1
        condition = dict(input_ids=ids.to(self.device), attention_mask=mask.to(self.device))
        # 3. the token model: frames of seven slots, each slot its own ids
        lm = self.token_model(length)
        seeds = [clip_seed(noise, row) for row in range(n)]
        stream = None if callback_on_audio is None else AudioStream(self.audio_format, self.codec, seeds, callback_on_audio)
        # 4. decode
        stop = self.audio_format.stop_token_id
        processors = [] if penalty == 1 else [RepetitionPenalty(float(penalty))]
        tokens, stats = self.decode_tokens(lm, condition, lm.layout(), decoding, sampling, noise, callback_on_step_end,
                                           stop_tokens=[stop], pad_token_id=stop, processors=processors, on_commit=stream)
        # 5. detokenize: each clip's whole frames through SNAC
        codes, audios = [], []
        for row, s in enumerate(stats):
            frames = tokens[row, : int(s.lengths[0])]
            frames = frames[frames != stop]
            codes.append(self.audio_format.codes(frames[: len(frames) - len(frames) % FRAME]))
            if output_type == "tokens":
                audios.append(tokens[row, : int(s.lengths[0])])
            elif codes[-1][0].numel() == 0:
                audios.append(torch.zeros(0))
            else:
                audios.append(self.codec.decode(codes[-1], seeds[row])[0].cpu())
        if output_type == "np":
            audios = [a.numpy() for a in audios]
        # 6. return
        if not return_dict:
            return audios, stats
        return SpeechPipelineOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, tokens=tokens, codes=codes)
