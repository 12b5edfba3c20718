"""DiaPipeline: text to dialogue with Nari Labs' Dia through transformers, decoded by any mmspec method.

Dia (nari-labs/Dia-1.6B) reads the text's UTF-8 bytes (speaker tags `[S1]` and `[S2]` are
one id each: `DiaTokenizer`, which needs no files) and writes 9 DAC codebooks per step under
its delay pattern until it says EOS; the DAC (descript/dac_44khz) turns the codes into
44.1 kHz audio. The decoder is served by `mmspec.models.adapters.dia.DiaLM`, which keeps
every rule of transformers' Dia `generate` (guidance and its top-k, the EOS channel filter,
the delayed tail), so greedy decoding returns `generate`'s codes and the keyed methods
return AR's for a seed.

Example:
    >>> from mmspec.pipelines.dia import DiaPipeline
    >>> pipe = DiaPipeline.from_dia("Dia-1.6B-0626", "dac_44khz", torch_dtype=torch.bfloat16)  # doctest: +SKIP
    >>> out = pipe("[S1] Hello there. [S2] Hi!", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> out.audios[0].shape, out.sample_rate, out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import torch

from mmspec.core.bounds import images_within_budget
from mmspec.decoding.config import DecodingConfig
from mmspec.models.adapters.dia import DiaLM
from mmspec.pipelines.base import MMSpecPipeline, attention_heads
from mmspec.pipelines.checks import (
    SAMPLING_KEYS,
    as_prompts,
    check_decoding_memory,
    check_generator,
    sampling_config,
)
from mmspec.pipelines.components import transformers_model, transformers_processor
from mmspec.pipelines.loading import as_dtype
from mmspec.pipelines.pipeline_output import SpeechPipelineOutput

OUTPUT_TYPES = ("pt", "np", "tokens")
TRANSFORMERS_MAX_LENGTH = 20  # what transformers' generate takes when a generation config sets no max_length

_DAC = transformers_model("DacModel")
# the codec decodes in float32 whatever dtype the model is cast to
CODEC = dataclasses.replace(_DAC, load=lambda folder, dtype: _DAC.load(folder, None))


class DiaPipeline(MMSpecPipeline):
    """`model` (`DiaForConditionalGeneration`) + `processor` (`DiaTokenizer`: the text's bytes)
    + `codec` (`DacModel`), saved as transformers saves each (`model/`, `processor/`,
    `codec/`) plus a `model_index.json`; load with `from_pretrained`, or build from the
    folders a user downloads with `from_dia`.

    Args:
        default_sampling (`dict`, *optional*): sampling defaults saved with the pipeline
            (`from_dia`: the checkpoint's generation config); unset keys take transformers'
            Dia defaults (`family_sampling`).
    """

    model_cpu_offload_seq = "model->codec"
    declared_components = {
        "model": transformers_model("DiaForConditionalGeneration"),
        "processor": transformers_processor("DiaTokenizer"),
        "codec": CODEC,
    }
    config_attributes = {"default_sampling": "_saved_sampling"}
    # the generation config transformers writes for Dia (its conversion script)
    family_sampling = {"guidance_scale": 3.0, "temperature": 1.2, "top_k": 45, "top_p": 0.95}
    condition_kind = "prompt"
    speaks_text = True  # any text (the shipped digit model says words from a list)

    def __init__(self, model, processor, codec, default_sampling: dict | None = None):
        super().__init__()
        if getattr(model.config, "model_type", None) != "dia":
            raise ValueError(f"model must be a DiaForConditionalGeneration, got {type(model).__name__}")
        decoder = model.config.decoder_config
        if codec.config.n_codebooks != decoder.num_channels or codec.config.codebook_size > decoder.eos_token_id:
            raise ValueError(f"the codec has {codec.config.n_codebooks} codebooks of {codec.config.codebook_size} codes; Dia writes "
                             f"{decoder.num_channels} of {decoder.eos_token_id}: give the DAC it was trained with")
        self.register_modules(model=model, processor=processor, codec=codec)
        self.keep_default_sampling(default_sampling)

    # --- what a front end reads ----------------------------------------------------------

    @property
    def sample_rate(self) -> int:
        return self.codec.config.sampling_rate

    @property
    def voices(self) -> list[str]:
        """None: Dia's text says who speaks (`[S1] ... [S2] ...`)."""
        return []

    @property
    def max_new_tokens(self) -> int:
        """The steps a call generates at most by default: as transformers' `generate` without
        `max_new_tokens`, the generation config's `max_length` plus the largest delay (the tail)."""
        max_length = self.model.generation_config.max_length or TRANSFORMERS_MAX_LENGTH
        return max_length + max(self.model.config.delay_pattern)

    @property
    def device(self) -> torch.device:
        return self.model.device

    @property
    def dtype(self) -> torch.dtype:
        """The model's dtype (the codec decodes in float32)."""
        return self.model.dtype

    @property
    def text_limit(self) -> int:
        """The most bytes of text the encoder reads."""
        return self.model.config.encoder_config.max_position_embeddings

    @property
    def attention_heads(self) -> int:
        """The decoder's attention heads held at once (`attention_heads`)."""
        return attention_heads(self.model.config.decoder_config)

    def max_audios_for(self, steps: int) -> int:
        """Clips of `steps` steps whose cache (both guidance rows) fits the call's budget."""
        d = self.model.config.decoder_config
        return images_within_budget(d.num_hidden_layers, d.num_key_value_heads, d.head_dim, 1 + steps, self.dtype)

    def to(self, *args, **kwargs) -> "DiaPipeline":
        """Moves the model and the codec to a device, as `torch.nn.Module.to` takes it; a dtype
        casts the model only (the codec decodes in float32)."""
        device, dtype, *_ = torch._C._nn._parse_to(*args, **kwargs)
        if dtype is not None and not dtype.is_floating_point:
            raise ValueError(f"a DiaPipeline casts to a floating dtype such as torch.bfloat16, got {dtype}")
        self.model.to(device, dtype)
        if device is not None:
            self.codec.to(device)
        return self

    def token_model(self, steps: int, guidance_scale: float = 1.0, top_k: int = 0) -> DiaLM:
        """The decoder as a TokenModel of `steps` steps under Dia's guidance (its top-k: the
        sampling `top_k`, as transformers takes it; 0 combines the rows without one)."""
        return DiaLM(self.model, steps, guidance_scale=guidance_scale, guidance_top_k=top_k or None)

    def check_decoding(self, decoding: str | DecodingConfig, rows: int = 1) -> DecodingConfig:
        """`decoding` parsed and checked over `rows` clips of the default length
        (`check_decoding_memory`): a window longer than the clip, or branches past the
        vocabulary or the memory of a forward, is refused in one line."""
        return check_decoding_memory(decoding, self.token_model(self.max_new_tokens).layout(), rows, self.attention_heads,
                                     device=self.device)

    # --- loading -------------------------------------------------------------------------

    @classmethod
    def from_dia(cls, checkpoint_dir: str | Path, codec_dir: str | Path, torch_dtype: torch.dtype | str | None = None) -> "DiaPipeline":
        """Builds the pipeline from a transformers-layout Dia folder (nari-labs/Dia-1.6B-0626:
        `config.json`, `model.safetensors`, `generation_config.json`, the tokenizer's files)
        and a DAC folder (descript/dac_44khz), loading weights only (safetensors, or
        `torch.load(weights_only=True)`) and never code from the folders. The model is cast
        to `torch_dtype` when given; the codec stays float32. The sampling defaults are the
        checkpoint's generation config (greedy if it does not sample); without tokenizer
        files, `DiaTokenizer()` (bytes) is the same tokenizer."""
        import transformers

        dtype = as_dtype(torch_dtype)
        checkpoint_dir, codec_dir = Path(checkpoint_dir), Path(codec_dir)
        for folder, what in ((checkpoint_dir, "Dia checkpoint"), (codec_dir, "DAC")):
            if not folder.is_dir():
                raise ValueError(f"{folder} is not a directory holding the {what}")
        model = cls.declared_components["model"].load(checkpoint_dir, dtype)
        if (checkpoint_dir / "tokenizer_config.json").is_file():
            processor = cls.declared_components["processor"].load(checkpoint_dir, None)
        else:
            processor = transformers.DiaTokenizer()
        codec = cls.declared_components["codec"].load(codec_dir, None)
        generation = model.generation_config
        saved = {key: getattr(generation, key) for key in SAMPLING_KEYS if getattr(generation, key, None) is not None}
        if generation.do_sample is False:
            saved["temperature"] = 0.0
        return cls(model, processor, codec, default_sampling=saved)

    # --- the call ----------------------------------------------------------------------

    def encode(self, prompts: list[str]) -> list[list[int]]:
        """Each text's ids as `DiaProcessor` writes them for `generate` (no special tokens);
        a text longer than the encoder reads is refused."""
        ids = [self.processor(p, add_special_tokens=False)["input_ids"] for p in prompts]
        for i, row in enumerate(ids):
            if len(row) > self.text_limit:
                raise ValueError(f"prompt {i} is {len(row)} tokens long (its bytes; [S1] and [S2] one each), more than the "
                                 f"{self.text_limit} Dia's text encoder reads; shorten or split it")
        return ids

    def check_text(self, text: str, voice: str | None = None, max_new_tokens: int | None = None) -> list[int]:
        """One text's ids, refused in one line when it is empty, longer than the encoder
        reads, given a voice (Dia has none), or asked for a length the decoder cannot make."""
        if voice is not None:
            raise ValueError(f"Dia has no named voices (its text says who speaks: [S1] ... [S2] ...); give voice=None, got {voice!r}")
        if max_new_tokens is not None:
            self.token_model(max_new_tokens)
        return self.encode(as_prompts(text, "the text"))[0]

    def commit_grid(self, commit_iteration: torch.Tensor) -> torch.Tensor:
        """`[1, steps]`: the forward that committed each step (its nine codebooks at once)."""
        return commit_iteration[None]

    def decode_audio(self, codes: torch.Tensor) -> torch.Tensor:
        """A float32 waveform `[samples]` in [-1, 1] of DAC `codes [C, F]`, as
        `DiaProcessor.batch_decode` decodes a clip (one at a time); empty for no frame."""
        if codes.shape[-1] == 0:
            return torch.zeros(0)
        audio = self.codec.decode(audio_codes=codes[None].to(self.codec.device)).audio_values[0]
        return audio.float().clamp(-1, 1).cpu()

    @torch.no_grad()
    def __call__(
        self,
        prompt: str | list[str],
        voice: str | None = None,
        decoding: str | DecodingConfig = "auto",
        max_new_tokens: int | None = None,
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
        """Speaks each text of `prompt`.

        Args:
            prompt (`str` or `list[str]`): the dialogue, speakers tagged `[S1]` and `[S2]`.
            voice (`str`, *optional*): must be None: Dia has no named voices.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding` ("ar", "sjd", "mc-sjd", "keyed", ...).
            max_new_tokens (`int`, *optional*): steps at most (the tail of the delay pattern
                included); defaults to `pipe.max_new_tokens`.
            guidance_scale (`float`, *optional*): Dia's guidance `c + s (c - u)`, 1 (off) or > 1.
            temperature (`float`, *optional*): 0 (greedy) or at least 1, as Dia samples.
            top_k (`int`, *optional*): top-k of sampling and of Dia's guidance (0: none).
            top_p (`float`, *optional*): nucleus mass.
                Unset sampling arguments take `pipe.default_sampling`.
            num_audios_per_prompt (`int`, *optional*, defaults to 1): clips per text.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): every random
                draw; a list gives one per clip.
            output_type (`str`, *optional*, defaults to "pt"): "pt", "np" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): a `SpeechPipelineOutput`, else
                a tuple `(audios, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, steps_done, {})`
                after every forward.

        Returns:
            `SpeechPipelineOutput`: `audios` one waveform per clip (its own length), `tokens`
            `[B, T, 9]` the generated steps in Dia's channel order (pad after each clip's end),
            `codes` per clip the DAC codes `[9, frames]`.
        """
        # 1. check inputs
        if voice is not None:
            raise ValueError(f"Dia has no named voices (its text says who speaks: [S1] ... [S2] ...); give voice=None, got {voice!r}")
        prompts = as_prompts(prompt)
        ids = self.encode(prompts)
        if isinstance(num_audios_per_prompt, bool) or not isinstance(num_audios_per_prompt, int) or num_audios_per_prompt < 1:
            raise ValueError(f"num_audios_per_prompt must be an integer >= 1, got {num_audios_per_prompt!r}")
        if output_type not in OUTPUT_TYPES:
            raise ValueError(f"unknown output_type {output_type!r}; choose from {', '.join(OUTPUT_TYPES)}")
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature, top_k=top_k,
                                   top_p=top_p)
        if 0 < sampling.temperature < 1:
            raise ValueError(f"Dia samples at temperature 0 (greedy) or >= 1 (transformers' Dia raises lower ones to 1), "
                             f"got {sampling.temperature}")
        steps = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        lm = self.token_model(steps, sampling.guidance_scale, sampling.top_k)
        n = len(prompts) * num_audios_per_prompt
        if n > self.max_audios_for(steps):
            raise ValueError(f"{n} clips of {steps} steps in one call exceed this model's {self.max_audios_for(steps)}; "
                             "split the request")
        layout = lm.layout()
        decoding = check_decoding_memory(decoding, layout, n, self.attention_heads, device=self.device)
        generator = check_generator(generator, n)
        # 2. encode the texts: their bytes padded on the right, as DiaProcessor pads them
        width = max(len(row) for row in ids)
        input_ids = torch.tensor([row + [self.processor.pad_token_id] * (width - len(row)) for row in ids])
        mask = torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in ids])
        condition = {"input_ids": input_ids.repeat_interleave(num_audios_per_prompt, 0),
                     "attention_mask": mask.repeat_interleave(num_audios_per_prompt, 0)}
        # 3. decode: guidance is the token model's own (Dia's rule), so the engine samples without it
        tokens, stats = self.decode_tokens(lm, condition, layout, decoding, dataclasses.replace(sampling, guidance_scale=1.0),
                                           generator, callback_on_step_end, stop_tokens=lm.stop_tokens, pad_token_id=lm.pad_id)
        # 4. detokenize: each clip's codes up to its EOS, through the DAC one clip at a time
        lengths = torch.cat([s.lengths for s in stats])
        codes = lm.codes(tokens, lengths)
        steps_out = lm.channels(tokens)
        if output_type == "tokens":
            audios = [row[:length] for row, length in zip(steps_out, lengths.tolist())]
        else:
            audios = [self.decode_audio(c) for c in codes]
            audios = [a.numpy() for a in audios] if output_type == "np" else audios
        # 5. return
        if not return_dict:
            return audios, stats
        return SpeechPipelineOutput(audios=audios, sample_rate=self.sample_rate, stats=stats, tokens=steps_out, codes=codes)
