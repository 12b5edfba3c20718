"""CosmosPipeline: NVIDIA Cosmos-Predict1's autoregressive base models (4B, 12B), video to world.

The conditioning frames of a video (1, or 9 as the original's command line does by
default) are encoded by the discrete video tokenizer (Cosmos-Tokenize1-DV8x16x16: a latent
frame for the first frame, then one per 8) into 1 or 2 latent frames of 40 x 64 tokens;
the transformer continues them, frame after frame in (frame, row, col) order, up to the
model's 5 latent frames, and the tokenizer decodes the whole latent to 33 frames of
640 x 1024. The sampling defaults are the original command line's: temperature 1.0,
top-p 0.8, no guidance.

Every decoding method of `mmspec.decoding` runs on it: `DecodingConfig(init="previous-frame")`
drafts each token from the same place of the previous latent frame, the conditioning
frame included; `schedule=Frames(rows=R)` opens a frame once the previous has R rows.

The original's diffusion decoder (a 7B refiner of the tokenizer's frames) and the
Video2World models (text cross-attention over T5) are not here.

Licence: the Cosmos weights come under the NVIDIA Open Model License; see
`docs/video-cosmos.md`. `safety_checker` is the slot for NVIDIA's guardrail (None by default).

Example:
    >>> import torch
    >>> from mmspec.pipelines.cosmos import CosmosPipeline
    >>> pipe = CosmosPipeline.from_cosmos("Cosmos-Predict1-4B", "Cosmos-Tokenize1-DV8x16x16-720p")  # doctest: +SKIP
    >>> out = pipe(video, num_input_frames=9, decoding="auto", generator=torch.Generator().manual_seed(0))  # doctest: +SKIP
    >>> pipe.save_video(out.videos[0], "world.mp4")  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from mmspec.core.bounds import images_within_budget
from mmspec.core.layout import TokenLayout
from mmspec.decoding.config import DecodingConfig
from mmspec.io.video import check_fps
from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig, load_cosmos_checkpoint
from mmspec.pipelines.base import TokenImagePipeline
from mmspec.pipelines.checks import check_images_per_prompt, sampling_config
from mmspec.pipelines.components import own_module, self_saving
from mmspec.pipelines.loading import as_dtype
from mmspec.pipelines.video import VideoPipeline, VideoPipelineOutput
from mmspec.tokenizers.cosmos_video import CosmosVideoTokenizer

COSMOS_FPS = 25  # what the original writes its videos at


class CosmosPipeline(TokenImagePipeline):
    """Cosmos-Predict1 AR network (`transformer`) + its discrete video tokenizer (`tokenizer`).

    `token_grid` is `(generated latent frames * rows, cols)`: the tokens the engine decodes
    when one latent frame conditions; `frame_grid` is one latent frame's `(rows, cols)`.

    Args:
        transformer (`CosmosAR`), tokenizer (`CosmosVideoTokenizer`): their vocabularies agree.
        safety_checker (`Callable`, *optional*): `fn(videos [B, F, 3, H, W] in [0, 1]) -> videos`,
            run on every decoded output before it is returned (NVIDIA's guardrail, wrapped, which
            blurs faces and blanks what it refuses); not saved with the pipeline.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model.
        fps (`int`, *optional*): frames per second of written videos (the original's 25).
    """

    model_cpu_offload_seq = "transformer->tokenizer"
    declared_components = {
        "transformer": own_module(CosmosAR, CosmosARConfig, "Cosmos-Predict1 AR model"),
        "tokenizer": self_saving(CosmosVideoTokenizer),
    }
    config_attributes = {"default_sampling": "_saved_sampling", "fps": "fps"}
    family_sampling = {"temperature": 1.0, "top_p": 0.8}
    cast_after_loading = True
    condition_kind = "video"

    def __init__(self, transformer: CosmosAR, tokenizer: CosmosVideoTokenizer, safety_checker: Callable | None = None,
                 default_sampling: dict | None = None, fps: int = COSMOS_FPS):
        super().__init__()
        if transformer.config.vocab_size != tokenizer.codebook_size:
            raise ValueError(f"the transformer scores {transformer.config.vocab_size} tokens, the tokenizer has "
                             f"{tokenizer.codebook_size} codes: they are not a pair")
        check_fps(fps)
        self.register_modules(transformer=transformer, tokenizer=tokenizer)
        self.safety_checker = safety_checker
        self.fps = fps
        self.keep_default_sampling(default_sampling)

    @classmethod
    def from_cosmos(cls, checkpoint: str | Path, tokenizer: str | Path, **kwargs) -> "CosmosPipeline":
        """A pipeline from the folders as NVIDIA publishes them: a model folder holding
        `model.pt` (and `config.json`; else the 4B or 12B preset its weights match) and
        the tokenizer folder holding `encoder.jit` and `decoder.jit`. Nothing from the folders
        is executed. `torch_dtype` casts the transformer; `kwargs` as the constructor takes them."""
        dtype = as_dtype(kwargs.pop("torch_dtype", None))
        codec = CosmosVideoTokenizer.from_pretrained(tokenizer)  # small: a missing tokenizer fails before the network loads
        return cls(load_cosmos_checkpoint(checkpoint, dtype=dtype), codec, **kwargs)

    # --- what a front end reads ----------------------------------------------------------

    @property
    def latent_shape(self) -> tuple[int, int, int]:
        """`(frames, rows, cols)` of the model's whole latent video."""
        return tuple(self.transformer.config.latent_shape)

    @property
    def frame_grid(self) -> tuple[int, int]:
        return self.latent_shape[1:]

    @property
    def frame_size(self) -> tuple[int, int]:
        """(height, width) of a frame in pixels."""
        s = self.tokenizer.config.spatial_compression
        return self.frame_grid[0] * s, self.frame_grid[1] * s

    @property
    def num_frames(self) -> int:
        """Frames of a whole video (the conditioning frames included): 33 for the real models."""
        return 1 + (self.latent_shape[0] - 1) * self.tokenizer.config.temporal_compression

    @property
    def input_frame_choices(self) -> list[int]:
        """The conditioning frame counts a call may give: 1 and then 8 more per latent frame,
        leaving at least one latent frame to generate."""
        return [1 + k * self.tokenizer.config.temporal_compression for k in range(self.latent_shape[0] - 1)]

    @property
    def token_grid(self) -> tuple[int, int]:
        frames, rows, cols = self.latent_shape
        return (frames - 1) * rows, cols

    def decoding_layout(self, grid: tuple[int, int]) -> TokenLayout:
        rows, cols = self.frame_grid
        return TokenLayout.grid((grid[0] // rows, rows, cols), self.token_vocab_size)

    def max_images_for(self, grid: tuple[int, int]) -> int:
        c = self.transformer.config
        head_dim = c.head_dim or c.dim // c.n_heads
        slots = c.latent_shape[1] * c.latent_shape[2] * c.latent_shape[0]
        return images_within_budget(c.n_layers, c.n_kv_heads, head_dim, slots, self.transformer.dtype)

    # --- the call ----------------------------------------------------------------------

    def check_input_frames(self, num_input_frames) -> int:
        """`num_input_frames` (None: 1), refused in one line unless one of `input_frame_choices`."""
        if num_input_frames is None:
            return 1
        choices = self.input_frame_choices
        if isinstance(num_input_frames, bool) or not isinstance(num_input_frames, numbers.Integral) \
                or num_input_frames not in choices:
            raise ValueError(f"num_input_frames must be one of {', '.join(map(str, choices))} (a latent frame for the first "
                             f"frame, then one per {self.tokenizer.config.temporal_compression}), got {num_input_frames!r}")
        return int(num_input_frames)

    def as_video(self, video, frames: int) -> torch.Tensor:
        """`video` as float `[B, frames, 3, H, W]` in [0, 1]: a tensor `[F, 3, H, W]` or
        `[B, F, 3, H, W]` in [0, 1], uint8 `[F, H, W, 3]` (or `[B, F, H, W, 3]`), or a list of
        PIL frames; its first `frames` frames, refused in one line when it has fewer or its
        frames are not the model's size."""
        if isinstance(video, (list, tuple)) and video and all(isinstance(f, Image.Image) for f in video):
            video = np.stack([np.asarray(f.convert("RGB")) for f in video])
        if isinstance(video, np.ndarray):
            if video.dtype != np.uint8 or video.ndim not in (4, 5) or video.shape[-1] != 3:
                raise ValueError(f"a video array must be uint8 [F, H, W, 3] or [B, F, H, W, 3], got {video.dtype} {video.shape}")
            video = torch.from_numpy(np.ascontiguousarray(video)).movedim(-1, -3).float() / 255
        if not isinstance(video, torch.Tensor) or not video.is_floating_point() or video.dim() not in (4, 5):
            raise ValueError("video must be float [F, 3, H, W] or [B, F, 3, H, W] in [0, 1], uint8 frames or a list of "
                             f"PIL images, got {type(video).__name__}")
        video = video if video.dim() == 5 else video[None]
        height, width = self.frame_size
        if tuple(video.shape[2:]) != (3, height, width):
            raise ValueError(f"this model's frames are 3 x {height} x {width} (channels, height, width), the video's "
                             f"{' x '.join(map(str, video.shape[2:]))}; resize it first")
        if video.shape[1] < frames:
            raise ValueError(f"the video has {video.shape[1]} frames, fewer than the {frames} conditioning frames asked for")
        if not bool(torch.isfinite(video).all()) or float(video.min()) < 0 or float(video.max()) > 1:
            raise ValueError("video values must be finite and in [0, 1]")
        return video[:, :frames]

    @torch.no_grad()
    def encode_condition(self, frames: torch.Tensor) -> torch.Tensor:
        """Long `[B, t * rows * cols]`: the latent tokens of `frames [B, F, 3, H, W]` in [0, 1].
        The tokenizer is causal, so these are the first t latent frames of any longer video
        starting with them, as the original takes them."""
        device = self.tokenizer.quant_conv.conv3d.weight.device
        codes = self.tokenizer.encode(frames.movedim(1, 2).to(device) * 2 - 1)
        return codes.flatten(1)

    @torch.no_grad()
    def __call__(
        self,
        video,
        num_input_frames: int | None = None,
        decoding: str | DecodingConfig = "auto",
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        num_videos_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Continues each video of `video` to `num_frames` frames.

        Args:
            video: the conditioning video(s), see `as_video`; only the first
                `num_input_frames` frames are read.
            num_input_frames (`int`, *optional*, defaults to 1): 1 (an image) or 9, ...
                (`input_frame_choices`); the original's command line defaults to 9.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method of
                `mmspec.decoding`.
            temperature, top_k, top_p (*optional*): sampling; default to the pipeline's
                (temperature 1.0, top-p 0.8).
            num_videos_per_prompt (`int`, *optional*, defaults to 1): continuations per video.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per output video.
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens"
                (the whole latent, conditioning frames first).
            return_dict (`bool`, *optional*, defaults to True): a `VideoPipelineOutput`, else
                a tuple `(videos, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, temperature=temperature, top_k=top_k, top_p=top_p)
        check_images_per_prompt(num_videos_per_prompt)
        given = self.check_input_frames(num_input_frames)
        frames = self.as_video(video, given)
        t = self.tokenizer.latent_shape(given, *self.frame_size)[0]
        rows, cols = self.frame_grid
        grid = ((self.latent_shape[0] - t) * rows, cols)
        decoding, generator = self.check_common(decoding, output_type, generator, len(frames) * num_videos_per_prompt, grid)
        # 2. encode the condition
        condition = self.encode_condition(frames).repeat_interleave(num_videos_per_prompt, 0)
        # 3. the layout of the generated frames, with the FSQ vectors for latent-neighbourhood rules
        self.transformer.condition_frames = t
        layout = self.transformer.layout(token_embeddings=self.tokenizer.code_vectors())
        # 4. decode
        tokens, stats = self.decode_tokens(self.transformer, condition.to(self.transformer.device), layout, decoding,
                                           sampling, generator, callback_on_step_end)
        latent = torch.cat([condition.to(tokens.device), tokens], 1)
        if output_type == "tokens":
            return VideoPipelineOutput(videos=latent, stats=stats, tokens=latent) if return_dict else (latent, stats)
        # 5. detokenize the whole latent, conditioning frames included (the tokenizer is causal)
        videos = self.tokenizer.decode(latent.view(len(latent), *self.latent_shape)).movedim(2, 1).clamp(-1, 1)
        # 6. safety check and return
        if self.safety_checker is not None:
            videos = self.safety_checker(((videos.float() + 1) / 2).cpu()) * 2 - 1
        out = VideoPipeline.video_output(videos, output_type)
        return VideoPipelineOutput(videos=out, stats=stats, tokens=latent) if return_dict else (out, stats)

    save_video = VideoPipeline.save_video
