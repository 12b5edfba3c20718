"""The shipped pipelines the app's tabs show when it is given none of their family, loaded
where the app's own pipeline runs (`mmspec demo --device ... --dtype ...`): on its device,
in its dtype, so that one flag puts every tab on the GPU."""

from __future__ import annotations

from pathlib import Path

import torch


def load_shipped(path: str | Path, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
    """The pipeline in `path` loaded in `dtype` (each family casts what it casts; codecs stay
    float32) and moved to `device`, its progress bar off (a tab shows its own status).

    Example:
        >>> from mmspec.assets import MESH_ASSETS
        >>> load_shipped(MESH_ASSETS).device
        device(type='cpu')
    """
    from mmspec.pipelines import load_pipeline

    pipe = load_pipeline(path, torch_dtype=dtype).to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe
