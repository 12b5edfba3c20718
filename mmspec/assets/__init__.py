"""Where the shipped models are: one saved pipeline per modality, shipped as package data
so that an installed mmspec finds them anywhere, each trained by a script in `scripts/`.

The default one (`DEFAULT_ASSETS`) is a small class-conditional LlamaGen trained on the
Shapes dataset (`scripts/train_default_model.py`): a saved `LlamaGenPipeline` with
`transformer/`, `vqvae/`, `classifier/` and a `model_index.json` naming the classes, the
default sampling, the image size and the training provenance. This module holds paths
only; `mmspec.pipelines.load_pipeline` loads them, by path or by name.

Example:
    >>> pipeline_path("lpd") == LPD_ASSETS
    True
"""

from __future__ import annotations

from pathlib import Path

DEFAULT_ASSETS = Path(__file__).resolve().parent / "default"
MESH_ASSETS = Path(__file__).resolve().parent / "mesh"  # the shipped mesh model (`mmspec.pipelines.mesh`)
SPEECH_ASSETS = Path(__file__).resolve().parent / "speech"  # a saved SpeechPipeline (scripts/train_speech_model.py)
VIDEO_ASSETS = Path(__file__).resolve().parent / "video"  # the shipped video model (a saved VideoPipeline)
LPD_ASSETS = Path(__file__).resolve().parent / "lpd"  # the shipped LPD model (a saved LPDPipeline)
CAPTIONER_ASSETS = Path(__file__).resolve().parent / "captioner"  # the shipped captioner (a saved CaptioningPipeline)
# the shipped models by name: `--pipeline lpd` (or `load_pipeline("speech")`) works from any folder
SHIPPED_PIPELINES = {"default": DEFAULT_ASSETS, "lpd": LPD_ASSETS, "video": VIDEO_ASSETS, "mesh": MESH_ASSETS,
                     "speech": SPEECH_ASSETS, "captioner": CAPTIONER_ASSETS}


def pipeline_path(name_or_path: str | Path) -> Path:
    """The folder of a shipped model's name ("default", "lpd", "video", "mesh", "speech",
    "captioner"), or `name_or_path` itself as a path. A folder of that name in the working
    directory wins over the shipped model (it is what the user pointed at); a file does not."""
    path = Path(name_or_path)
    if isinstance(name_or_path, str) and name_or_path in SHIPPED_PIPELINES and not path.is_dir():
        return SHIPPED_PIPELINES[name_or_path]
    return path
