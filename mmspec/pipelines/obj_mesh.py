"""Meshes from any causal LM that writes OBJ text (LLaMA-Mesh style), decoded by mmspec.

The model generates text through `mmspec.pipelines.text.generate_text` (any exact method; n-gram
lookup drafts suit OBJ text, whose coordinates and face indices repeat), and the text is
parsed by `mmspec.tokenizers.obj_text.parse_obj`: bad lines are reported, the mesh kept.

Example:
    >>> from transformers import AutoModelForCausalLM, AutoTokenizer  # doctest: +SKIP
    >>> model = AutoModelForCausalLM.from_pretrained("Zhengyi/LLaMA-Mesh")  # doctest: +SKIP
    >>> tok = AutoTokenizer.from_pretrained("Zhengyi/LLaMA-Mesh")  # doctest: +SKIP
    >>> out = generate_obj_mesh(model, tok, "Create a 3D model of a table.", max_new_tokens=4096)  # doctest: +SKIP
    >>> out.mesh.export("table.glb"), out.problems[:3], out.stats.forward_passes  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import trimesh

from mmspec.decoding.stats import DecodeStats
from mmspec.pipelines.text import generate_text
from mmspec.tokenizers.obj_text import parse_obj


@dataclass
class ObjMeshOutput:
    """Attributes: `mesh` (parsed), `text` (what the model wrote), `problems` (one line per
    OBJ line that could not be used), `stats` (forwards, method)."""

    mesh: trimesh.Trimesh
    text: str
    problems: list[str]
    stats: DecodeStats


def generate_obj_mesh(model, tokenizer, prompt: str, *, decoding: str = "mc-sjd+lookup",
                      generator: torch.Generator | None = None, **settings) -> ObjMeshOutput:
    """Generates OBJ text for `prompt` (a string, tokenized as is: apply a chat template
    first if the model needs one) and parses it. `settings` go to `generate_text`
    (`max_new_tokens`, `do_sample`, `temperature`, ...)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError(f"prompt must be a non-empty string, got {prompt!r}")
    encoded = tokenizer(prompt, return_tensors="pt")
    ids, stats = generate_text(model, encoded["input_ids"], encoded.get("attention_mask"), decoding=decoding,
                               generator=generator, return_stats=True, **settings)
    text = tokenizer.decode(ids[0, encoded["input_ids"].shape[1] :], skip_special_tokens=True)
    mesh, problems = parse_obj(text)
    return ObjMeshOutput(mesh, text, problems, stats)
