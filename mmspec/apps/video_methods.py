"""The accelerated methods the Video tabs offer (the class-conditional one and Cosmos'), by label."""

from __future__ import annotations

from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.schedules import Frames

# accelerated methods offered, by label: (decoding name, first drafts, frame schedule rows)
METHODS = {
    "keyed, previous-frame drafts (AR's video)": ("keyed", "previous-frame", None),
    "MC-SJD, previous-frame drafts (exact)": ("mc-sjd", "previous-frame", None),
    "MC-SJD, random drafts (exact)": ("mc-sjd", "random", None),
    "MC-SJD, previous-frame drafts, frame schedule (relaxed)": ("mc-sjd", "previous-frame", 2),
    "ZipAR + MC-SJD, previous-frame drafts (relaxed)": ("zipar+mc-sjd", "previous-frame", None),
}


def method_config(label: str, methods: dict = METHODS, zipar_window: int = 4) -> DecodingConfig:
    """The decoding of `label`, one of `methods` (label: (decoding name, first drafts, frame schedule rows))."""
    if label not in methods:
        raise ValueError(f"unknown method {label!r}; choose from {', '.join(methods)}")
    name, init, frame_rows = methods[label]
    config = DecodingConfig.from_name(name, init=init, zipar_window=zipar_window)
    if frame_rows is not None:
        config = DecodingConfig(config.method, config.rule, config.window, init, schedule=Frames(frame_rows))
    return config
