"""Does a call at the shipped image model's limit finish on this machine? The pipeline's
`max_images_per_call` images of one class in one call, decoded with the default (auto),
with the process's peak resident memory beside the machine's.

    PYTHONPATH=. python benchmarks/studies/images_per_call_memory.py     # about 6 min on 2 cores

The limit is half of what the 8 GiB cache budget holds (`mmspec.core.bounds`: a decode
holds a working copy beside its cache); one more image is refused in one line. Two
threads, tokens only (the VQ decodes each image alone afterwards). Writes
benchmarks/results/images_per_call_memory.{md,json}.
"""

from __future__ import annotations

import resource
import time

import torch

from mmspec.assets import DEFAULT_ASSETS
from mmspec.pipelines import load_pipeline
from mmspec.runs.bench import dated_environment, write_results
from mmspec.utils.checkpoint import machine_memory_bytes


def main() -> None:
    torch.set_num_threads(2)
    pipe = load_pipeline(DEFAULT_ASSETS)
    n = pipe.max_images_per_call
    try:
        pipe(class_labels=[0], num_images_per_prompt=n + 1, output_type="tokens")
        refused = "not refused"
    except ValueError as err:
        refused = str(err)
    started = time.perf_counter()
    out = pipe(class_labels=[0], num_images_per_prompt=n, generator=torch.Generator().manual_seed(0), output_type="tokens")
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    env = dated_environment()
    row = {"images": n, "decoding": "auto", "seconds": round(seconds, 1), "forwards": out.stats[0].forward_passes,
           "peak_rss_gib": round(peak / 2**30, 2), "machine_gib": round(machine_memory_bytes() / 2**30, 1)}
    table = "\n".join([
        "# images_per_call_memory", "",
        f"The shipped image model's `max_images_per_call` in one call; {env['date']}, commit {env['commit']}, "
        f"{env['device']}, 2 threads.", "",
        "| images | decoding | seconds | forwards | peak RSS (GiB) | machine (GiB) |", "|---|---|---|---|---|---|",
        f"| {n} | auto | {row['seconds']} | {row['forwards']} | {row['peak_rss_gib']} | {row['machine_gib']} |", "",
        f"{n + 1} images: {refused}",
    ])
    write_results("benchmarks/results", "images_per_call_memory", table, {"row": row, "refused": refused, "environment": env})
    print(table)


if __name__ == "__main__":
    main()
