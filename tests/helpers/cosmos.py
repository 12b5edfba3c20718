"""A tiny Cosmos-Predict1 pair for pipeline tests: the tokenizer fixture made by the original
code (1,728 FSQ codes, 64 x 64 frames, 17 frames to 3 latent frames of 4 x 4) and a random
CosmosAR over its codes, saved as NVIDIA publishes them (`model.pt` + `config.json`)."""

from pathlib import Path

import torch

from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig
from mmspec.utils.json_files import write_json

TOKENIZER = Path(__file__).resolve().parents[1] / "fixtures" / "cosmos_tokenizer"


def tiny_config() -> CosmosARConfig:
    return CosmosARConfig(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden_size=96, vocab_size=1728,
                          latent_shape=[3, 4, 4], max_batch_size=4)


def write_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """`folder` holding a random tiny CosmosAR as `model.pt` (keys prefixed `model.`, as the
    original's checkpoints are) and `config.json`."""
    torch.manual_seed(seed)
    config = tiny_config()
    model = CosmosAR(config)
    with torch.no_grad():
        for p in model.parameters():  # peaked conditionals: drafts are sometimes right
            if p.dim() > 1:
                p.mul_(4)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({f"model.{k}": v for k, v in model.state_dict().items()}, folder / "model.pt")
    write_json(folder / "config.json", config.to_dict())
    return folder


def tiny_video(frames: int = 17, seed: int = 0) -> torch.Tensor:
    """Float `[frames, 3, 64, 64]` in [0, 1]: a square moving right over a gradient."""
    g = torch.Generator().manual_seed(seed)
    base = torch.linspace(0, 1, 64).expand(3, 64, 64).clone() * torch.rand(3, 1, 1, generator=g)
    video = base.expand(frames, -1, -1, -1).clone()
    for f in range(frames):
        video[f, :, 20:36, 4 + 2 * f:20 + 2 * f] = 1.0
    return video


def save_tiny_pipeline(folder: Path) -> Path:
    """`folder/pipeline`: the tiny pair as a saved `CosmosPipeline`, what `mmspec video
    --pipeline` takes (its checkpoint in `folder/checkpoint`)."""
    from mmspec.pipelines.cosmos import CosmosPipeline

    pipe = CosmosPipeline.from_cosmos(write_tiny_checkpoint(folder / "checkpoint"), TOKENIZER)
    pipe.save_pretrained(folder / "pipeline")
    return folder / "pipeline"
