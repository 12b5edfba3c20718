"""Where a pipeline runs, read back from the pipeline itself: its device ("cuda:0", "cpu")
and the dtype of its model ("bfloat16"), as a run records them (`mmspec.runs.runner.Run`'s
`placement`) and as the verbs and the app's status lines say them.

The command line chooses them (`--device`, `--dtype`: `mmspec.commands.common`); what is
recorded is what the pipeline holds, so a record never names a device the work did not run on.

Example:
    >>> from mmspec.pipelines import load_pipeline
    >>> pipe = load_pipeline("mesh")  # doctest: +SKIP
    >>> placement(pipe), describe_placement(pipe)  # doctest: +SKIP
    ({'device': 'cpu', 'dtype': 'float32'}, 'on cpu in float32')
"""

from __future__ import annotations

import torch


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` as `--dtype` and the records spell it: "bfloat16"."""
    return str(dtype).removeprefix("torch.")


def placement(pipe) -> dict[str, str]:
    """`{"device": "cuda:0", "dtype": "bfloat16"}`: the device `pipe` computes on and the
    dtype of its model (a codec a pipeline keeps in float32 aside; `pipe.dtype`)."""
    return {"device": str(pipe.device), "dtype": dtype_name(pipe.dtype)}


def describe_placement(pipe) -> str:
    """"on cuda:0 in bfloat16": `placement(pipe)` in words, for a printed line or a status line."""
    where = placement(pipe)
    return f"on {where['device']} in {where['dtype']}"
