"""Tiny random LlamaGen image and video pipelines, built from configs."""

import torch

from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT
from mmspec.models.networks.video_llamagen import VideoLlamaGen, VideoLlamaGenConfig
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.pipelines.video import VideoPipeline
from mmspec.tokenizers.llamagen_vq import LlamaGenVQ, VQConfig

VIDEO_FRAMES, VIDEO_GRID = 3, 3


def tiny_vq(codebook_size=32):
    return LlamaGenVQ(VQConfig(codebook_size=codebook_size, codebook_embed_dim=4, encoder_ch_mult=[1, 1], decoder_ch_mult=[1, 1],
                               z_channels=32, base_channels=32, num_res_blocks=1)).eval()


def tiny_c2i_pipeline(block_size=16, n_layer=1, class_names=("a", "b", "c")) -> LlamaGenPipeline:
    """A 3-class LlamaGen pipeline with non-uniform conditionals and CFG 2 by default."""
    torch.manual_seed(0)
    gpt = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=n_layer, n_head=2, vocab_size=32, block_size=block_size, num_classes=3)).eval()
    torch.nn.init.normal_(gpt.output.weight, std=0.3)
    pipe = LlamaGenPipeline(gpt, tiny_vq(), class_names=list(class_names), default_sampling={"guidance_scale": 2.0})
    pipe.set_progress_bar_config(disable=True)
    return pipe


def tiny_video_pipeline() -> VideoPipeline:
    """3 frames of 3x3 tokens (V=32, 6x6-pixel frames), 3 classes, sharp conditionals, CFG 2."""
    torch.manual_seed(0)
    F, G = VIDEO_FRAMES, VIDEO_GRID
    config = VideoLlamaGenConfig(dim=48, n_layer=1, n_head=2, multiple_of=16, vocab_size=32, frames=F,
                                 block_size=F * G * G, num_classes=3)
    gpt = VideoLlamaGen(config).eval()
    torch.nn.init.normal_(gpt.output.weight, std=0.3)
    pipe = VideoPipeline(gpt, tiny_vq(), class_names=["a", "b", "c"], default_sampling={"guidance_scale": 2.0},
                         metadata={"fps": 4})
    pipe.set_progress_bar_config(disable=True)
    return pipe
