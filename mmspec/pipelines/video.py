"""VideoPipeline: a class-conditional video LlamaGen over frames of VQ tokens.

The sequence is `frames` grids of tokens in (frame, row, col) order (`VideoLlamaGen`);
each frame is decoded by a LlamaGen VQ. Every decoding method of `mmspec.decoding` runs on
it; video adds the previous-frame drafter (`DecodingConfig(init="previous-frame")`) and
the frame schedule (`DecodingConfig(schedule=Frames(rows=2))`).

Example:
    >>> import torch
    >>> from mmspec.assets import VIDEO_ASSETS
    >>> from mmspec.decoding.config import DecodingConfig
    >>> from mmspec.pipelines.video import VideoPipeline
    >>> pipe = VideoPipeline.from_pretrained(VIDEO_ASSETS)  # doctest: +SKIP
    >>> out = pipe(class_labels=[0], decoding=DecodingConfig("mc-sjd", init="previous-frame"),  # doctest: +SKIP
    ...            generator=torch.Generator().manual_seed(0))
    >>> pipe.save_video(out.videos[0], "circle_right.gif")  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from diffusers.utils import BaseOutput

from mmspec.core.bounds import images_within_budget
from mmspec.core.layout import TokenLayout
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.stats import DecodeStats
from mmspec.io.images import to_pil, to_uint8
from mmspec.metrics.video import VideoClassifier, VideoClassifierConfig
from mmspec.models.networks.video_llamagen import VideoLlamaGen, VideoLlamaGenConfig
from mmspec.pipelines.llamagen import VQVAE, LlamaGenPipeline, as_class_labels
from mmspec.pipelines.base import TokenImagePipeline
from mmspec.pipelines.checks import check_images_per_prompt, sampling_config
from mmspec.pipelines.components import own_module
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ
from mmspec.io.video import check_fps, save_video

DEFAULT_FPS = 8


@dataclass
class VideoPipelineOutput(BaseOutput):
    """Attributes:
    videos: per video a list of PIL frames ("pil"), `np.ndarray [B, F, H, W, 3]` or
        `torch.Tensor [B, F, 3, H, W]` in [0, 1], or the token ids `[B, T]`.
    stats (`list[DecodeStats]`): one per video (`commit_iteration [T]`: the forward that
        committed each token, frame after frame).
    tokens (`torch.Tensor`): long `[B, T]`, `T = frames * rows * cols`.
    """

    videos: Any
    stats: list[DecodeStats]
    tokens: torch.Tensor


class VideoPipeline(TokenImagePipeline):
    """Video LlamaGen (`transformer`) + LlamaGen VQ (`vqvae`, applied to every frame), and
    optionally the video classifier that judges the shipped model's videos.

    `token_grid` is `(frames * rows, cols)`, so `sequence_length` counts every token of a
    video and windows are checked against it; `frame_grid` is one frame's `(rows, cols)`.

    Args:
        class_names (`list[str]`, *optional*): one name per class.
        default_sampling (`dict`, *optional*): sampling defaults saved with the model.
        metadata (`dict`, *optional*): other `model_index.json` entries (`fps`, `frame_size`,
            training provenance), kept through `save_pretrained`.
    """

    model_cpu_offload_seq = "transformer->vqvae"
    _optional_components = ["classifier"]
    declared_components = {
        "transformer": own_module(VideoLlamaGen, VideoLlamaGenConfig, "video LlamaGen"),
        "vqvae": VQVAE,
        "classifier": own_module(VideoClassifier, VideoClassifierConfig, "video classifier"),
    }
    config_attributes = {"class_names": "_class_names", "default_sampling": "_saved_sampling"}
    keeps_metadata = True
    cast_after_loading = True
    condition_kind = "class"

    def __init__(self, transformer: VideoLlamaGen, vqvae: LlamaGenVQ, classifier: VideoClassifier | None = None,
                 class_names: list[str] | None = None, default_sampling: dict | None = None, metadata: dict | None = None):
        super().__init__()
        self.register_modules(transformer=transformer, vqvae=vqvae, classifier=classifier)
        self._class_names = LlamaGenPipeline._checked_class_names(class_names, transformer.config)
        self.keep_default_sampling(default_sampling)
        self.metadata = dict(metadata or {})
        check_fps(self.fps)  # a saved -5.5 was written as -5 (refused by the writer only then)

    # --- what a front end reads ----------------------------------------------------------

    @property
    def class_names(self) -> list[str]:
        return list(self._class_names or map(str, range(self.transformer.config.num_classes)))

    @property
    def num_frames(self) -> int:
        """The most frames a video may have (the model's)."""
        return self.transformer.config.frames

    @property
    def frame_grid(self) -> tuple[int, int]:
        g = self.transformer.config.grid_size
        return g, g

    @property
    def token_grid(self) -> tuple[int, int]:
        rows, cols = self.frame_grid
        return self.num_frames * rows, cols

    @property
    def fps(self) -> int:
        return self.metadata.get("fps", DEFAULT_FPS)

    def decoding_layout(self, grid: tuple[int, int]) -> TokenLayout:
        """Frames of `frame_grid` on the axes (frame, row, col), as many as `grid` rows hold."""
        rows, cols = self.frame_grid
        return TokenLayout.grid((grid[0] // rows, rows, cols), self.token_vocab_size)

    def max_images_for(self, grid: tuple[int, int]) -> int:
        c = self.transformer.config
        return images_within_budget(c.n_layer, c.kv_heads, c.head_dim, c.cls_token_num + grid[0] * grid[1], self.transformer.dtype)

    # --- the call ----------------------------------------------------------------------

    def check_num_frames(self, num_frames) -> int:
        """`num_frames` (None: the model's), refused in one line outside 1..`num_frames`."""
        if num_frames is None:
            return self.num_frames
        if isinstance(num_frames, bool) or not isinstance(num_frames, numbers.Integral) or not 1 <= num_frames <= self.num_frames:
            raise ValueError(f"num_frames must be an integer from 1 to {self.num_frames} (this model makes at most "
                             f"{self.num_frames} frames), got {num_frames!r}")
        return int(num_frames)

    def class_label(self, name_or_label) -> int:
        """A class by its name ("circle right") or label; one-line error for an unknown one."""
        if isinstance(name_or_label, str):
            if name_or_label not in self.class_names:
                raise ValueError(f"unknown class {name_or_label!r}; choose from {', '.join(self.class_names)}")
            return self.class_names.index(name_or_label)
        return int(as_class_labels(name_or_label, self.transformer.config.num_classes)[0])

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | list[int] | torch.Tensor,
        num_frames: int | None = None,
        decoding: str | DecodingConfig = "auto",
        guidance_scale: float | None = None,
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        num_videos_per_prompt: int = 1,
        generator: torch.Generator | list[torch.Generator] | None = None,
        output_type: str = "pil",
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Generates videos.

        Args:
            class_labels (`int`, `str`, a list of them or `torch.Tensor`): the classes, by label or
                by name (`class_names`).
            num_frames (`int`, *optional*): frames per video, 1 to `num_frames` (the model's,
                by default); fewer frames decode a prefix of the sequence.
            decoding (`str` or `DecodingConfig`, *optional*, defaults to "auto"): any method
                of `mmspec.decoding`; `DecodingConfig("mc-sjd", init="previous-frame")` drafts
                each token from the same place of the previous frame, `schedule=Frames(rows=2)`
                opens a frame once the last has two committed rows.
            guidance_scale, temperature, top_k, top_p (*optional*): sampling; default to the
                pipeline's default sampling.
            num_videos_per_prompt (`int`, *optional*, defaults to 1): videos per label.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per video.
            output_type (`str`, *optional*, defaults to "pil"): "pil", "np", "pt" or "tokens".
            return_dict (`bool`, *optional*, defaults to True): a `VideoPipelineOutput`, else
                a tuple `(videos, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self._default_sampling, guidance_scale=guidance_scale, temperature=temperature,
                                   top_k=top_k, top_p=top_p)
        check_images_per_prompt(num_videos_per_prompt)
        frames = self.check_num_frames(num_frames)
        labels = as_class_labels(class_labels, self.transformer.config.num_classes, self.class_names)
        rows, cols = self.frame_grid
        decoding, generator = self.check_common(decoding, output_type, generator, len(labels) * num_videos_per_prompt,
                                                (frames * rows, cols))
        # 2. encode the condition
        condition = labels.repeat_interleave(num_videos_per_prompt).to(self.transformer.output.weight.device)
        # 3. the layout of `frames` frames, with the codebook for latent-neighbourhood rules
        layout = self.transformer.layout(token_embeddings=self.vqvae.codebook).truncate(frames * rows * cols)
        # 4. decode
        tokens, stats = self.decode_tokens(self.transformer, condition, layout, decoding, sampling, generator, callback_on_step_end)
        # 5. detokenize, frame by frame
        videos = None if output_type == "tokens" else self.decode_frames(tokens)
        # 6. return
        out = self.video_output(videos, output_type) if videos is not None else tokens
        return VideoPipelineOutput(videos=out, stats=stats, tokens=tokens) if return_dict else (out, stats)

    def decode_frames(self, tokens: torch.Tensor) -> torch.Tensor:
        """`tokens [B, F * rows * cols]` -> videos `[B, F, 3, H, W]` in [-1, 1]."""
        rows, cols = self.frame_grid
        B = tokens.shape[0]
        frames = self.vqvae.decode(tokens.reshape(-1, rows * cols), (rows, cols))
        return frames.view(B, -1, *frames.shape[1:])

    @staticmethod
    def video_output(videos: torch.Tensor, output_type: str):
        if output_type == "pt":
            return ((videos.float() + 1) / 2).clamp(0, 1).cpu()
        if output_type == "np":
            return ((videos.float() + 1) / 2).clamp(0, 1).permute(0, 1, 3, 4, 2).cpu().numpy().astype(np.float32)
        return [to_pil(v) for v in videos]

    def save_video(self, video, path: str | Path, scale: int = 4, fps: int | None = None, fmt: str | None = None) -> Path:
        """Writes one video (PIL frames, `[F, 3, H, W]` in [-1, 1], or `[F, H, W, 3]` uint8)
        to `path` (.gif or .mp4, or `fmt`) at the model's fps."""
        if isinstance(video, list):
            frames = np.stack([np.asarray(f.convert("RGB")) for f in video])
        elif isinstance(video, torch.Tensor):
            frames = to_uint8(video)
        else:
            frames = np.asarray(video)
        return save_video(frames, path, fps=fps or self.fps, scale=scale, fmt=fmt)
