"""What every `mmspec` verb shares: the one-line user error, the flag types, the argument
groups, where the model runs (`--device`, `--dtype`), the checks of the output destination
and of a pipeline's family, and loading.

Every verb works on a saved pipeline directory (`--pipeline`, a shipped model by default),
loaded in `--dtype` on `--device`. A user error prints one line and exits with status 2,
before any work: flags are checked first (the device and dtype among them), then the output
destination, then what depends on the loaded model.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import torch

from mmspec.assets import DEFAULT_ASSETS

AR_BASELINE = "ar"
DEFAULT_DECODING = "auto"


class UserError(Exception):
    """A mistake in the command line or its inputs: reported in one line, exit status 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse, with its errors on one line like every other mmspec error (no usage dump)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def whole_number(text: str, low: int, high: int | None, what: str) -> int:
    """`text` as an int in [low, high] (no upper bound when None), else argparse's one-line
    error "must be <what>"."""
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value > high):
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    return whole_number(text, 1, None, "a whole number >= 1")


def thread_count(text: str) -> int:
    """`--threads`: from 1 to this machine's cores (`mmspec.core.bounds.machine_cores`;
    more threads than cores only contend)."""
    from mmspec.core.bounds import machine_cores

    cores = machine_cores()
    return whole_number(text, 1, cores, f"a whole number from 1 to {cores} (this machine's cores)")


def port_number(text: str) -> int:
    return whole_number(text, 1, 65535, "a port number from 1 to 65535")


def seed_number(text: str) -> int:
    from mmspec.runs.batch import MAX_SEED

    return whole_number(text, 0, MAX_SEED, f"a whole number from 0 to {MAX_SEED}")


# --- where the model runs: --device and --dtype, every verb -------------------------------

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
DEVICE_FLAG = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
DTYPE_HELP = ("the model's weights and compute: auto (bfloat16 on a CUDA GPU that computes in it, else float32; default), "
              "float32, bfloat16 or float16; the tokens depend on it, so a resumed run keeps its dtype")


def device_flag(text: str) -> str:
    """`--device`, checked for its form: auto, cpu, cuda or cuda:N (whether this machine has
    that device is `resolve_device`'s)."""
    if not DEVICE_FLAG.fullmatch(text):
        raise argparse.ArgumentTypeError(f"must be auto, cpu, cuda or cuda:N (N a GPU's index), got {text!r}")
    return text


def add_device(p: argparse.ArgumentParser, dtypes: tuple[str, ...] = tuple(DTYPES)) -> None:
    """`--device` and `--dtype`; `dtypes` are those the verb takes (`train-drafter`: float32)."""
    p.add_argument("--device", type=device_flag, default="auto", metavar="auto|cpu|cuda|cuda:N",
                   help="where the model runs: auto (a CUDA GPU when torch sees one, else the CPU; default), cpu, cuda or "
                        "cuda:N; `batch` under accelerate launch: auto and cuda are each process's own GPU")
    only = f"the model's weights and compute: auto (the default) or {', '.join(dtypes)}, what this verb takes"
    p.add_argument("--dtype", choices=("auto", *dtypes), default="auto", help=DTYPE_HELP if "bfloat16" in dtypes else only)
    p.set_defaults(dtypes=dtypes)  # what auto may choose


def resolve_device(flag: str, per_process: bool = False) -> torch.device:
    """The device `--device` names on this machine: auto is the first CUDA GPU torch sees
    (the current one), else the CPU; cuda and cuda:N are refused in one line where torch sees
    no such GPU. `per_process` (`mmspec batch`, which scales out under `accelerate launch`):
    auto and cuda are the process's own GPU, as accelerate's `PartialState` assigns it.

    Example:
        >>> resolve_device("cpu")
        device(type='cpu')
    """
    if flag == "cpu":
        return torch.device("cpu")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        if flag == "auto":
            return torch.device("cpu")
        raise UserError(f"--device {flag}: torch sees no CUDA GPU on this machine (torch.cuda.is_available() is False); "
                        "use --device cpu, or auto")
    if flag.startswith("cuda:"):
        index = int(flag.removeprefix("cuda:"))
        if index >= gpus:
            raise UserError(f"--device {flag}: this machine has {gpus} CUDA GPU(s), cuda:0 to cuda:{gpus - 1}; choose one of them")
        return torch.device("cuda", index)
    device = torch.device("cuda")
    if per_process:
        from accelerate import PartialState

        device = PartialState().device
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def resolve_dtype(flag: str, device: torch.device, dtypes: tuple[str, ...] = tuple(DTYPES)) -> torch.dtype:
    """The dtype `--dtype` names: auto is bfloat16 on a CUDA GPU that computes in it
    natively, where the verb takes it (`dtypes`), else float32.

    Example:
        >>> resolve_dtype("auto", torch.device("cpu"))
        torch.float32
    """
    if flag != "auto":
        return DTYPES[flag]
    # native bfloat16, as torch.cuda.is_bf16_supported(including_emulation=False) decides it for
    # the current GPU: every ROCm GPU, and CUDA's from Ampere (sm_80) on; older ones emulate it, slowly
    native = device.type == "cuda" and (torch.version.hip is not None or torch.cuda.get_device_capability(device)[0] >= 8)
    return torch.bfloat16 if native and "bfloat16" in dtypes else torch.float32


def resolve_placement(args) -> None:
    """Turns `args.device` and `args.dtype` (the flags) into the `torch.device` and
    `torch.dtype` every verb loads its pipeline in (`load`), or a one-line error, before
    any work; `mmspec.commands.cli.main` calls it for every verb."""
    args.device = resolve_device(args.device, per_process=args.command == "batch")
    args.dtype = resolve_dtype(args.dtype, args.device, args.dtypes)


# --- settings shared by every verb --------------------------------------------------------


def decoding_configs(args, default: str = DEFAULT_DECODING) -> list:
    """Every decoding a verb runs (bench: `--methods`, others: `--decoding`), each with the
    same `--window`, `--zipar-window`, `--init`, `--branches` and `--step-test`."""
    from mmspec.decoding.config import parse_decoding

    names = args.methods if args.command == "bench" else [args.decoding or default]
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise UserError(f"--methods names {twice} twice; each method runs once")
    # one grammar for every name: LPD's (lpd-20, ...) parse to an LPDDecoding, which the flags do not apply to
    return [parse_decoding(n, window=args.window, zipar_window=args.zipar_window, init=args.init, branches=args.branches,
                           step_test=args.step_test, cost=args.cost)
            for n in names]


def sampling_kwargs(args) -> dict:
    """The sampling flags that were given, checked (finite, in range) before any loading."""
    from mmspec.pipelines.checks import sampling_config

    chosen = dict(guidance_scale=args.guidance_scale, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p)
    chosen = {k: v for k, v in chosen.items() if v is not None}
    sampling_config({}, **chosen)
    return chosen


# the pipeline classes each verb runs (the demo takes every family), and the verb of each family
IMAGE_PIPELINES = ("LlamaGenPipeline", "LPDPipeline", "Emu3Pipeline", "JanusPipeline", "LuminaMGPTPipeline")
SPEECH_PIPELINES = ("SpeechPipeline", "OrpheusPipeline", "DiaPipeline")
VIDEO_PIPELINES = ("VideoPipeline", "CosmosPipeline")
VERB_PIPELINES = {"generate": IMAGE_PIPELINES, "bench": IMAGE_PIPELINES, "batch": IMAGE_PIPELINES,
                  "caption": ("CaptioningPipeline",), "mesh": ("MeshPipeline",), "speak": SPEECH_PIPELINES, "video": VIDEO_PIPELINES}
FAMILY_VERBS = {**{name: "generate" for name in IMAGE_PIPELINES}, "CaptioningPipeline": "caption", "MeshPipeline": "mesh",
                **{name: "speak" for name in SPEECH_PIPELINES}, **{name: "video" for name in VIDEO_PIPELINES}}


def pipeline_class_name(pipeline: str) -> str | None:
    """The `_class_name` a pipeline folder's `model_index.json` names, read without loading
    anything; None when `pipeline` is no folder (load_pipeline says what is wrong with it)."""
    from mmspec.assets import pipeline_path
    from mmspec.utils.json_files import read_json

    root = pipeline_path(pipeline)
    return read_json(root / "model_index.json", "pipeline").get("_class_name") if root.is_dir() else None


def recorded_pipeline(pipeline: str) -> str:
    """The absolute folder `--pipeline` names, as a run records it: `default` and the
    shipped model's path are one pipeline, from any working directory."""
    from mmspec.assets import pipeline_path

    return str(pipeline_path(pipeline).resolve())


def check_family(command: str, pipeline: str) -> None:
    """Refuses, before loading, a pipeline folder of a family the verb does not run, naming
    the verb that does (`generate` on the video model: use `mmspec video`)."""
    accepted = VERB_PIPELINES.get(command)
    if accepted is None:
        return
    name = pipeline_class_name(pipeline)
    if name in FAMILY_VERBS and name not in accepted:
        raise UserError(f"--pipeline {pipeline} holds a {name}, which `mmspec {command}` does not run (it takes "
                        f"{', '.join(accepted)}); use `mmspec {FAMILY_VERBS[name]} --pipeline {pipeline}`")


def load(args):
    """The verb's pipeline (`--pipeline`, checked to be of a family the verb runs), loaded in
    `--dtype` (a dtype the pipeline refuses is its one-line ValueError) and moved to
    `--device`, both as `resolve_placement` resolved them; with `--drafter` applied."""
    from mmspec.pipelines import load_pipeline

    if args.threads:
        torch.set_num_threads(args.threads)
    check_family(args.command, args.pipeline)
    try:
        pipe = load_pipeline(args.pipeline, torch_dtype=args.dtype)  # each family casts what it casts (codecs stay float32)
    except OSError as err:
        raise UserError(f"cannot load the pipeline in {args.pipeline}: {err}") from None
    pipe.to(args.device)
    pipe.set_progress_bar_config(desc="decoding", unit="tok", leave=False)
    choose_drafter(pipe, getattr(args, "drafter", None), args.pipeline)
    return pipe


def choose_drafter(pipe, drafter: str | None, pipeline: str) -> None:
    """`--drafter`: on (the pipeline's own learned draft head, when it has one), off, or a
    head folder written by `mmspec train-drafter`."""
    if drafter in (None, "on"):
        return
    if drafter == "off":
        pipe.use_drafter = False
        return
    from mmspec.runs.train_drafter import load_drafter

    if not hasattr(pipe, "drafter"):
        raise UserError(f"--drafter {drafter}: the {type(pipe).__name__} in {pipeline} takes no learned draft head")
    folder = Path(drafter)
    if not (folder / "config.json").is_file():
        raise UserError(f"--drafter {drafter!r} is neither on, off nor a draft head folder (config.json and model.safetensors)")
    pipe.drafter = load_drafter(folder, pipe.transformer).to(pipe.device, pipe.dtype)  # beside the model, as its own head is


def checked_decodings(args, pipe) -> list:
    """`decoding_configs`, each checked against the model (a window longer than its sequence...);
    without `--decoding`, the pipeline's default (LPD's lpd-20, the others' auto)."""
    return [pipe.check_decoding(config) for config in decoding_configs(args, pipe.default_decoding)]


def conditions(args, pipe) -> tuple[list[dict], list[str]]:
    """One pipeline-call condition per grid row, and the rows' names; `--per-class` checked
    against the images the model decodes in one call."""
    if args.per_class > pipe.max_images_per_call:
        raise UserError(f"--per-class {args.per_class} is more than the {pipe.max_images_per_call} images one call of this model "
                        "may decode (what its key-value cache budget holds); use `mmspec batch` for large runs")
    if pipe.condition_kind == "class":
        if args.prompt:
            raise UserError("this pipeline is class-conditional: use --classes, not --prompt")
        n = len(pipe.class_names)
        classes = list(range(n)) if args.classes is None else [class_index(c, pipe.class_names) for c in args.classes]
        if not classes:
            raise UserError(f"--classes must be one or more class names or labels in [0, {n})")
        if len(set(classes)) != len(classes):
            raise UserError(f"--classes lists a class twice ({classes}); each class is one row, --per-class sets its images")
        return [{"class_labels": [c]} for c in classes], [pipe.class_names[c] for c in classes]
    if args.classes is not None:
        raise UserError("this pipeline is text-conditional: use --prompt, not --classes")
    if not args.prompt:
        raise UserError("--prompt is required for a text-conditional pipeline")
    return [{"prompt": [p]} for p in args.prompt], list(args.prompt)


def class_index(text: str, class_names: list[str]) -> int:
    """A `--classes` entry: a class name ("circle") or a label ("0")."""
    if text in class_names:
        return class_names.index(text)
    if text.strip().isdigit() and int(text) < len(class_names):
        return int(text)
    raise UserError(f"--classes {text!r} is neither a class name ({', '.join(class_names)}) nor a label in [0, {len(class_names)})")


# --- output destinations, checked before any work ----------------------------------------


def check_new_file(path: Path, overwrite: bool) -> None:
    """`path` can be written: not a folder, not an existing file (unless `overwrite`), in a
    writable folder."""
    from mmspec.io.files import check_name_lengths, check_writable

    check_name_lengths(path)
    if path.is_dir():
        raise UserError(f"output {str(path)!r} is a folder; give a file path such as {str(path / 'grid.png')!r}")
    if path.exists() and not overwrite:
        raise UserError(f"output {str(path)!r} exists; pass --overwrite to replace it, or choose another path")
    check_writable(path.parent)


def check_out_dir(out_dir: Path, files: tuple[Path, ...], overwrite: bool) -> None:
    from mmspec.io.files import check_writable

    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"output directory {str(out_dir)!r} is a file")
    check_writable(out_dir)
    existing = [f.name for f in files if f.exists()]
    if existing and not overwrite:
        raise UserError(f"{out_dir} already holds {', '.join(existing)}; pass --overwrite to replace them, or choose another --out-dir")


# --- the verbs ---------------------------------------------------------------------------


def add_pipeline(p: argparse.ArgumentParser, default: Path = DEFAULT_ASSETS, model: str = "image",
                 dtypes: tuple[str, ...] = tuple(DTYPES)) -> None:
    p.add_argument("--pipeline", default=str(default),
                   help="saved pipeline directory, or a shipped model's name: default, lpd, video, mesh, speech, captioner "
                        f"(default: the shipped {model} model)")
    p.add_argument("--threads", type=thread_count, help="torch CPU threads, 1 to the machine's cores (default: torch's choice)")
    add_device(p, dtypes)


def add_decoding(p: argparse.ArgumentParser) -> None:
    p.add_argument("--window", type=int, help="Jacobi draft window L, at most the sequence length (default 16; auto: chosen)")
    p.add_argument("--zipar-window", type=positive_int, default=8, help="ZipAR: open a row when the row above has this many tokens (default 8)")
    p.add_argument("--init",
                   help="first drafts: random, left, above, previous-frame, lookup, or several joined by + (lookup+above); "
                        "default random (auto: chosen)")
    p.add_argument("--branches", type=int,
                   help="Jacobi methods: candidates per codebook beside each of the 4 leading drafts, verified under tree attention "
                        "(exact; more forward work, fewer forwards); default 0, none (auto: chosen on CUDA)")
    p.add_argument("--cost", choices=("cached", "refresh", "off"), default="cached",
                   help="auto's cost curve of the forward: cached (measured once per model, device and threads; default), "
                        "refresh (measure again) or off (choose by forwards alone)")
    p.add_argument("--drafter", metavar="on|off|DIR",
                   help="learned drafts: on (the pipeline's draft head, when it has one; default), off, or a head folder "
                        "from `mmspec train-drafter`")
    p.add_argument("--step-test", default="per-token",
                   help="exact test of a step of several tokens (audio codebooks): per-token (default), joint (the step as one "
                        "token), or codebook groups such as 0+123")
    p.add_argument("--guidance-scale", type=float, help="classifier-free guidance scale (default: the pipeline's)")
    p.add_argument("--temperature", type=float, help="sampling temperature, 0 = greedy (default: the pipeline's)")
    p.add_argument("--top-k", type=int, help="top-k filter, 0 = off (default: the pipeline's)")
    p.add_argument("--top-p", type=float, help="nucleus filter in (0, 1] (default: the pipeline's)")
    p.add_argument("--seed", type=seed_number, default=0, help="random seed, 0 to 2**63 - 1 (default 0)")


def add_method(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decoding",
                   help="decoding method: auto, ar, sjd, mc-sjd, sjd+lantern, mc-sjd+gsd, zipar, zipar+mc-sjd, ...; lpd-20 or "
                        "lpd-32 for an LPD pipeline (default: auto, hardware-aware exact decoding; lpd-20 for LPD)")


def add_condition(p: argparse.ArgumentParser, per_class: int) -> None:
    p.add_argument("--classes", nargs="*", help="class names or labels, one row each (class pipelines; default: all)")
    p.add_argument("--prompt", nargs="*", help="prompts, one row each (prompt pipelines)")
    p.add_argument("--per-class", type=positive_int, default=per_class, help=f"images per class or prompt (default {per_class})")
