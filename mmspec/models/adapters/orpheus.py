"""Orpheus-format text-to-speech: a Llama over SNAC codes, as a `TokenModel`.

Orpheus (canopylabs/orpheus-3b-0.1-ft) and the models that share its token layout (Maya1
and Orpheus fine-tunes) speak by writing SNAC 24 kHz codes as ordinary tokens of a Llama:

* a frame of seven tokens holds one code of SNAC's coarse level, two of its middle level
  and four of its fine level; slot i of a frame holds code c as id `audio_token_start + i *
  codebook_size + c` (`audio_token_start` 128266, `codebook_size` 4096 for Orpheus);
* slots go to the levels as [0], [1, 4], [2, 3, 5, 6] (`SLOT_LEVELS`);
* the stop token (128258) ends the clip;
* the prompt is `prompt_prefix` ([128259]), the tokenized "{voice}: {text}" (BOS first, as
  the Llama 3 tokenizer adds it), then `prompt_suffix` ([128009, 128260, 128261, 128257]).

The network is transformers' `LlamaForCausalLM`, unmodified, under `TransformersLM`; what is
Orpheus's here is the layout: `max_frames` frames of seven slots on the axes ("frame",
"slot"), each slot allowing only its own id range, and the stop token only where a frame
would start (so a clip is whole frames). Drafting the same slot of the previous frame is
the engine's "previous-frame" drafter on that layout.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch

from mmspec.core.layout import TokenLayout
from mmspec.models.adapters.transformers_lm import TransformersLM

FRAME = 7  # tokens of a frame
SLOT_LEVELS = (0, 1, 2, 2, 1, 2, 2)  # the SNAC level of each slot of a frame


@dataclass(frozen=True)
class OrpheusFormat:
    """Where an Orpheus-format model keeps its audio in its vocabulary, and how it frames a
    prompt; Orpheus's own values by default, other models' (or a test's tiny vocabulary) by
    config (`from_dict`)."""

    audio_token_start: int = 128266
    codebook_size: int = 4096
    stop_token_id: int = 128258
    prompt_prefix: tuple[int, ...] = (128259,)
    prompt_suffix: tuple[int, ...] = (128009, 128260, 128261, 128257)
    voice_format: str = "{voice}: {text}"

    def __post_init__(self):
        for name in ("audio_token_start", "codebook_size", "stop_token_id"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (1 if name == "codebook_size" else 0):
                raise ValueError(f"Orpheus format: {name} must be a whole number >= 0, got {value!r}")
        for name in ("prompt_prefix", "prompt_suffix"):
            ids = getattr(self, name)
            if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise ValueError(f"Orpheus format: {name} must be a list of token ids, got {ids!r}")
            object.__setattr__(self, name, tuple(ids))
        if not isinstance(self.voice_format, str) or "{text}" not in self.voice_format:
            raise ValueError(f"Orpheus format: voice_format must contain {{text}}, got {self.voice_format!r}")
        if self.audio_token_start <= self.stop_token_id < self.audio_end:
            raise ValueError(f"Orpheus format: the stop token {self.stop_token_id} lies among the audio ids")

    @classmethod
    def from_dict(cls, values: dict) -> "OrpheusFormat":
        unknown = set(values) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"Orpheus format: unknown key(s) {', '.join(sorted(unknown))}")
        return cls(**values)

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @property
    def audio_end(self) -> int:
        """One past the last audio id."""
        return self.audio_token_start + FRAME * self.codebook_size

    def allowed(self, vocab_size: int) -> torch.Tensor:
        """Bool `[7, V]`: slot i's own id range; slot 0 also the stop token."""
        if self.audio_end > vocab_size or self.stop_token_id >= vocab_size:
            raise ValueError(f"the model's {vocab_size} token ids do not reach the Orpheus format's audio ids "
                             f"(up to {self.audio_end - 1}) and stop token {self.stop_token_id}")
        allowed = torch.zeros(FRAME, vocab_size, dtype=torch.bool)
        for slot in range(FRAME):
            start = self.audio_token_start + slot * self.codebook_size
            allowed[slot, start : start + self.codebook_size] = True
        allowed[0, self.stop_token_id] = True
        return allowed

    def codes(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        """SNAC's three levels `[1, F]`, `[1, 2F]`, `[1, 4F]` of one clip's whole frames
        (`tokens [7F]`, its audio ids), as Orpheus's decoder orders them."""
        frames = (tokens.reshape(-1, FRAME) - self.audio_token_start) % self.codebook_size
        return [frames[:, [s for s in range(FRAME) if SLOT_LEVELS[s] == level]].reshape(1, -1) for level in range(3)]

    def prompt_ids(self, text_ids: list[int]) -> list[int]:
        return [*self.prompt_prefix, *text_ids, *self.prompt_suffix]


class OrpheusLM(TransformersLM):
    """A Llama of the Orpheus format as a TokenModel of `max_frames` frames.

    The condition of `start` is `input_ids` / `attention_mask` of the framed prompts
    (`OrpheusFormat.prompt_ids`), padded on the left, as for any `TransformersLM`.
    """

    def __init__(self, model, max_frames: int, audio_format: OrpheusFormat):
        if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
            raise ValueError(f"max_frames must be a whole number >= 1, got {max_frames!r}")
        super().__init__(model, max_new_tokens=FRAME * max_frames)
        self.audio_format, self.max_frames = audio_format, max_frames
        self.allowed = audio_format.allowed(self.vocab_size)

    def layout(self) -> TokenLayout:
        return TokenLayout.grid((self.max_frames, FRAME), self.vocab_size, axes=("frame", "slot"), allowed=self.allowed,
                                allowed_by="slot")
