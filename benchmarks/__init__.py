"""Benchmark scripts, run as files from the repository root (`PYTHONPATH=. python
benchmarks/<name>.py`), writing their tables to `benchmarks/results/`:

- here, one comparison per model family (decoding_methods, video, audio, mesh, captioning,
  lpd, lumina_mgpt, default_model_quality, wall_time) and the loop, GPU and
  kernel timings loop_ops, gpu_e2e and gpu_verify_check;
- `perf/`: performance tools (engine memory, the original LlamaGen's AR beside mmspec's,
  no_grad against inference mode, eager against torch.compile);
- `studies/`: one-off analyses behind a choice or a finding recorded in docs/.

A package only so that the tests import the scripts by name (`benchmarks.studies.video_ceiling`).
"""
