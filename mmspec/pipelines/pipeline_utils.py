"""What the pipelines share, re-exported under the name diffusers uses for it (code that
imports it from here keeps working); it lives in modules named for their jobs:

- `mmspec.pipelines.base`: the pipeline bases (`MMSpecPipeline`, `TokenImagePipeline`,
  `TransformersImagePipeline`), the engine under a progress bar, `StepCallback`;
- `mmspec.pipelines.components`: declared components and how each is saved and loaded;
- `mmspec.pipelines.loading`: `model_index.json`, dtypes, transformers folders, mmspec modules;
- `mmspec.pipelines.checks`: a call's argument checks; `mmspec.core.bounds`: the memory budgets behind them.
"""

from mmspec.core.bounds import FORWARD_BUDGET_BYTES, KV_CACHE_BUDGET_BYTES, images_within_budget  # noqa: F401
from mmspec.pipelines.base import (  # noqa: F401
    MMSpecPipeline,
    StepCallback,
    TokenImagePipeline,
    TransformersImagePipeline,
    condition_row,
    to_signed_pixels,
)
from mmspec.pipelines.checks import (  # noqa: F401
    MAX_GUIDANCE_SCALE,
    MAX_TEMPERATURE,
    OUTPUT_TYPES,
    SAMPLING_KEYS,
    as_prompts,
    check_decoding_limits,
    check_decoding_memory,
    check_generator,
    check_images_per_prompt,
    resolve_sampling,
    sampling_config,
)
from mmspec.pipelines.loading import (  # noqa: F401
    DTYPE_BYTES,
    as_dtype,
    check_transformers_config,
    load_module,
    load_transformers,
    pop_dtype,
    read_index,
    save_module,
    transformers_weight_count,
)
