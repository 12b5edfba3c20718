"""MeshPipeline: MeshXL-format mesh generators (OPT over 131 ids), decoded by any exact
mmspec method, to `trimesh.Trimesh` meshes.

Example:
    >>> from mmspec.pipelines.mesh import MESH_ASSETS, MeshPipeline
    >>> pipe = MeshPipeline.from_pretrained(MESH_ASSETS)  # doctest: +SKIP
    >>> out = pipe(class_labels=["torus", "cone"], decoding="mc-sjd+lookup",  # doctest: +SKIP
    ...            generator=torch.Generator().manual_seed(0))
    >>> out.meshes[0].export("torus.glb"), out.stats[0].forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

import numbers
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
import trimesh
from diffusers.utils import BaseOutput

from mmspec.assets import MESH_ASSETS, pipeline_path  # MESH_ASSETS re-exported: the shipped model
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.drafts import Copy, FirstOf, Lookup, Random
from mmspec.decoding.generate import generate
from mmspec.decoding.names import parse_name
from mmspec.decoding.stats import DecodeStats
from mmspec.metrics.mesh_classifier import MeshClassifier, MeshClassifierConfig
from mmspec.models.adapters.mesh_opt import MeshXLModel, mesh_prompts
from mmspec.core.bounds import KV_CACHE_BUDGET_BYTES, check_items_per_call, items_within_budget, kv_cache_bytes
from mmspec.pipelines.base import MMSpecPipeline, StepCallback, attention_heads
from mmspec.pipelines.checks import check_decoding_memory, check_generator, class_name_list, sampling_config
from mmspec.pipelines.components import own_module, transformers_model
from mmspec.pipelines.loading import pop_dtype
from mmspec.utils.json_files import read_json
from mmspec.tokenizers.mesh import EOS, PAD, TOKENS_PER_FACE, VOCAB_SIZE, tokens_to_mesh

DEFAULT_MAX_FACES = 48
# first-draft names a mesh decoding may end in: "mc-sjd+lookup", "sjd+face-lookup"
# face-aware first drafts: an n-gram lookup, else the same slot of the previous face
# (consecutive faces often share their first vertex), else uniform
FACE_LOOKUP = FirstOf((Lookup(), Copy("face"), Random()))
MESH_DRAFTERS = {"lookup": "lookup", "face-lookup": FACE_LOOKUP}
OPT_MODEL = transformers_model("OPTForCausalLM", attn_implementation="sdpa")


def load_mesh_model(folder: Path, dtype: torch.dtype | None):
    """The OPT of a MeshXL-format folder, its `config.json` required first (a bare folder
    without one is no mesh model)."""
    read_json(folder / "config.json", "MeshXL model (OPT config.json)")
    return OPT_MODEL.load(folder, dtype)


MESH_MODEL = replace(OPT_MODEL, load=load_mesh_model)


def mesh_decoding(decoding: str | DecodingConfig, window: int | None = None) -> DecodingConfig:
    """A decoding by name ("auto", "ar", "keyed", "sjd", "mc-sjd", each optionally "+lookup" or
    "+face-lookup"; "lookup" alone is SJD with lookup drafts) or as a config; the mesh
    path is exact, so relaxed rules and ZipAR are refused. A name is parsed by the one
    grammar (`DecodingConfig.from_name`, which takes face-lookup's drafter from here) and
    the parsed config checked."""
    if not isinstance(decoding, DecodingConfig):
        unknown = ValueError(f"unknown mesh decoding {decoding!r}; use auto, ar, keyed, sjd or mc-sjd, optionally +lookup or +face-lookup")
        try:
            lpd = parse_name(decoding).lpd
        except ValueError:
            raise unknown from None
        if lpd:
            raise unknown
        config = DecodingConfig.from_name(decoding, window=window, drafters={"face-lookup": FACE_LOOKUP})
        if not config.exact or config.redraft or config.init not in (None, "random", *MESH_DRAFTERS.values()):
            raise unknown
        decoding = config
    if not decoding.exact:
        raise ValueError(f"{decoding.name} is not exact; meshes decode with auto, ar, keyed, sjd or mc-sjd (+lookup)")
    return decoding


@dataclass
class MeshPipelineOutput(BaseOutput):
    """Attributes:
    meshes (`list[trimesh.Trimesh]`): one per request, duplicate vertices merged and
        degenerate faces dropped.
    tokens (`torch.Tensor`): long `[B, T]`, the generated MeshXL ids (`<pad>` after `<eos>`).
    stats (`list[DecodeStats]`): one per mesh (forwards, method).
    problems (`list[str | None]`): why a sequence was malformed (a face cut off by the
        length limit, say), or None.
    """

    meshes: list[trimesh.Trimesh]
    tokens: torch.Tensor
    stats: list[DecodeStats]
    problems: list[str | None]


class MeshPipeline(MMSpecPipeline):
    """An OPT over MeshXL sequences (`model`), its class names when class-conditional, and
    optionally the point-cloud classifier that judges the shipped model's meshes.

    Saved as `model/` (a MeshXL-format transformers folder), `classifier/` and
    `model_index.json`; `from_pretrained` also takes a bare MeshXL-format folder (an OPT
    `config.json` and weights with a vocabulary of 131, unconditional).

    Args:
        class_names (`list[str]`, *optional*): one per class token after the 131 MeshXL ids.
        class_token_offset (`int`, defaults to 131): id of class 0's token.
        default_sampling (`dict`, *optional*): temperature, top_k, top_p when a call gives none.
        max_faces (`int`, *optional*): faces a call generates at most (default 48, or
            what the model's position table holds).
        metadata (`dict`, *optional*): other `model_index.json` entries (training provenance).
    """

    model_cpu_offload_seq = "model"
    _optional_components = ["classifier"]
    declared_components = {"model": MESH_MODEL, "classifier": own_module(MeshClassifier, MeshClassifierConfig, "mesh classifier")}
    config_attributes = {"class_names": "class_names", "class_token_offset": "class_token_offset",
                         "default_sampling": "_saved_sampling", "max_faces": "max_faces"}
    keeps_metadata = True
    family_sampling = {"guidance_scale": 1.0}

    def __init__(self, model, classifier: MeshClassifier | None = None, class_names: list[str] | None = None,
                 class_token_offset: int = VOCAB_SIZE, default_sampling: dict | None = None,
                 max_faces: int | None = None, metadata: dict | None = None):
        super().__init__()
        self.register_modules(model=model, classifier=classifier)
        vocab = model.get_output_embeddings().weight.shape[0]
        if class_names is not None:
            class_names = class_name_list(class_names)
            if class_token_offset + len(class_names) > vocab:
                raise ValueError(f"{len(class_names)} class tokens from id {class_token_offset} do not fit the model's {vocab} ids")
        elif vocab < VOCAB_SIZE:
            raise ValueError(f"a MeshXL model has at least {VOCAB_SIZE} ids; this one has {vocab}")
        self.class_names = class_names
        self.class_token_offset = class_token_offset
        self.keep_default_sampling(default_sampling)
        self.max_faces = check_max_faces(min(DEFAULT_MAX_FACES, face_limit(model)) if max_faces is None else max_faces, model)
        self.metadata = dict(metadata or {})

    @property
    def condition_kind(self) -> str:
        return "class" if self.class_names is not None else "none"

    def max_meshes_for(self, max_faces: int) -> int:
        """Meshes one call may generate at `max_faces` faces: those whose keys and values
        (every layer; the prompt, the faces and `<eos>`) fit `KV_CACHE_BUDGET_BYTES`."""
        c = self.model.config
        slots = 2 + max_faces * TOKENS_PER_FACE + 1
        # one row a mesh (no CFG); the heads' keys together are hidden_size wide
        per_mesh = kv_cache_bytes(c.num_hidden_layers, 1, c.hidden_size, slots, self.model.dtype.itemsize, rows=1)
        return items_within_budget(per_mesh, what_per_item="mesh")

    def check_decoding(self, decoding: str | DecodingConfig, max_faces: int, rows: int = 1,
                       window: int | None = None) -> DecodingConfig:
        """`decoding` parsed (`mesh_decoding`) and checked against the sequence of `max_faces`
        faces and the memory of one forward over `rows` meshes (`check_decoding_memory`),
        before any work: `mmspec mesh` calls it before its run is recorded."""
        config = mesh_decoding(decoding, window)
        return check_decoding_memory(config, MeshXLModel(self.model, max_faces).layout(), rows, attention_heads(self.model.config),
                                     device=self.device)

    @property
    def max_meshes_per_call(self) -> int:
        """Meshes one call may generate at the pipeline's `max_faces`."""
        return self.max_meshes_for(self.max_faces)

    @property
    def dtype(self) -> torch.dtype:
        """The model's dtype (`torch_dtype=` on loading, or `.to(dtype)`)."""
        return self.model.dtype

    # --- loading and saving --------------------------------------------------------------

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str | Path, **kwargs) -> "MeshPipeline":
        """Loads a saved pipeline (the shipped model: `MESH_ASSETS`) or a bare MeshXL-format
        folder (unconditional), cast to `torch_dtype` (or `dtype`) when given."""
        root = pipeline_path(pretrained_model_name_or_path)
        if not root.is_dir():
            raise ValueError(f"{root} is not a directory holding a mesh model")
        if (root / "model_index.json").exists():
            return super().from_pretrained(root, **kwargs)
        model = MESH_MODEL.load(root, pop_dtype(cls, kwargs))
        classifier = cls.declared_components["classifier"]
        return cls(model, classifier.load(root / "classifier", None) if (root / "classifier").is_dir() else None)

    # --- the call ----------------------------------------------------------------------

    def class_labels_of(self, class_labels) -> list[int] | None:
        """Labels from an int, a class name, or a list of them; one-line errors otherwise."""
        if self.class_names is None:
            if class_labels is not None:
                raise ValueError("this mesh model is unconditional: pass num_meshes, not class_labels")
            return None
        if class_labels is None:
            raise ValueError(f"this mesh model is class-conditional: pass class_labels from {', '.join(self.class_names)}")
        values = list(class_labels) if isinstance(class_labels, (list, tuple)) else [class_labels]
        if not values:
            raise ValueError("class_labels is empty")
        labels = []
        for v in values:
            if isinstance(v, str):
                if v not in self.class_names:
                    raise ValueError(f"unknown mesh class {v!r}; choose from {', '.join(self.class_names)}")
                labels.append(self.class_names.index(v))
            elif isinstance(v, numbers.Integral) and not isinstance(v, bool) and 0 <= v < len(self.class_names):
                labels.append(int(v))
            else:
                raise ValueError(f"class label {v!r} is neither a class name nor an index in [0, {len(self.class_names)})")
        return labels

    @torch.no_grad()
    def __call__(
        self,
        class_labels: int | str | list | None = None,
        num_meshes: int = 1,
        decoding: str | DecodingConfig = "auto",
        temperature: float | None = None,
        top_k: int | None = None,
        top_p: float | None = None,
        max_faces: int | None = None,
        window: int | None = None,
        constrain: bool = True,
        generator: torch.Generator | None = None,
        return_dict: bool = True,
        callback_on_step_end: Callable | None = None,
    ):
        """Generates meshes.

        Args:
            class_labels (*optional*): class names or indices (class-conditional models).
            num_meshes (`int`, defaults to 1): meshes per label (per call when unconditional).
            decoding (`str` or `DecodingConfig`, defaults to "auto"): "auto", "ar", "sjd",
                "mc-sjd", each optionally "+lookup" or "+face-lookup" (see `mesh_decoding`).
            temperature, top_k, top_p (*optional*): sampling; default to the saved defaults.
            max_faces (`int`, *optional*): faces per mesh at most (default: the pipeline's).
            window (`int`, *optional*, defaults to 16; auto: chosen): Jacobi draft window.
            constrain (`bool`, defaults to True): allow only coordinates, and `<eos>` at face
                starts (see `mmspec.models.adapters.mesh_opt`); False samples the model unmasked.
            generator (`torch.Generator` or `list[torch.Generator]`, *optional*): the source of
                every random draw; a list gives one per mesh (meshes are then decoded one by one).
            return_dict (`bool`, defaults to True): a `MeshPipelineOutput`, else
                `(meshes, stats)`.
            callback_on_step_end (`Callable`, *optional*): `fn(pipe, step, tokens_committed, {})`
                after every forward.
        """
        # 1. check inputs
        sampling = sampling_config(self.default_sampling, temperature=temperature, top_k=top_k, top_p=top_p)
        labels = self.class_labels_of(class_labels)
        if isinstance(num_meshes, bool) or not isinstance(num_meshes, int) or num_meshes < 1:
            raise ValueError(f"num_meshes must be an integer >= 1, got {num_meshes!r}")
        if not isinstance(constrain, bool):  # the string "no" would mean True
            raise ValueError(f"constrain must be True or False, got {constrain!r}")
        faces = self.max_faces if max_faces is None else check_max_faces(max_faces, self.model)
        batch = num_meshes if labels is None else num_meshes * len(labels)
        # before the list of labels is built: 10**9 meshes took 52 s and 8.7 GB to be refused
        check_items_per_call(batch, self.max_meshes_for(faces), "meshes",
                             f"{KV_CACHE_BUDGET_BYTES // 2**30} GiB of cache at {faces} faces")
        labels = None if labels is None else [label for label in labels for _ in range(num_meshes)]
        generator = check_generator(generator, batch)
        config = self.check_decoding(decoding, faces, batch, window)
        token_model = MeshXLModel(self.model, faces, constrain)
        # 2. the prompts
        condition = {k: v.to(self.device) for k, v in mesh_prompts(labels, batch, self.class_token_offset).items()}
        # 3. decode (a list of generators: mesh i takes the key of generator i, as alone)
        callback = StepCallback(self, callback_on_step_end)
        tokens, stats = generate(token_model, condition, config, sampling, generator, lambda done, total: callback(done),
                                 stop_tokens=[EOS], pad_token_id=PAD)
        stats = stats.per_sample()
        # 4. detokenize
        meshes, problems = zip(*(detokenize(row) for row in tokens.cpu()))
        if not return_dict:
            return list(meshes), stats
        return MeshPipelineOutput(meshes=list(meshes), tokens=tokens, stats=stats, problems=list(problems))


def detokenize(tokens: torch.Tensor) -> tuple[trimesh.Trimesh, str | None]:
    """A mesh from generated ids, and the warning of a malformed sequence (or None)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mesh = tokens_to_mesh(tokens)
    return mesh, (str(caught[0].message) if caught else None)


def face_limit(model) -> int:
    """Faces that fit the model's position table after a prompt of 2 and before `<eos>`."""
    return (model.config.max_position_embeddings - 3) // TOKENS_PER_FACE


def check_max_faces(max_faces: Any, model) -> int:
    limit = face_limit(model)
    if isinstance(max_faces, bool) or not isinstance(max_faces, int) or not 1 <= max_faces <= limit:
        raise ValueError(f"max_faces must be an integer from 1 to {limit} (the model's {model.config.max_position_embeddings} positions), got {max_faces!r}")
    return max_faces
