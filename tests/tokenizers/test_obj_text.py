import pytest
import torch
import trimesh
from transformers import LlamaConfig, LlamaForCausalLM

from mmspec.pipelines.obj_mesh import generate_obj_mesh
from mmspec.tokenizers.obj_text import mesh_to_obj_text, parse_obj

CHARS = "\nvf 0123456789-./#abc"


class CharTokenizer:
    """One id per character of CHARS: enough to run a causal LM on OBJ text."""

    def __call__(self, text, return_tensors="pt"):
        ids = torch.tensor([[CHARS.index(c) for c in text]])
        return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    def decode(self, ids, skip_special_tokens=True):
        return "".join(CHARS[i] for i in ids.tolist())


def test_a_mesh_survives_obj_text():
    box = trimesh.creation.box()
    mesh, problems = parse_obj(mesh_to_obj_text(box))
    assert problems == [] and len(mesh.faces) == 12 and mesh.is_watertight


def test_bad_lines_are_reported_and_the_mesh_kept():
    text = "v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nv 1 2\nf 1 2 3\nf 1 2 3 4\nf 1 2 x\nf 1 2 99\nhello\nf -4 -3 -1\n# note\n"
    mesh, problems = parse_obj(text)
    assert len(mesh.vertices) == 4 and len(mesh.faces) == 1 + 2 + 1
    assert problems == [
        "line 5: vertex 'v 1 2' needs three finite coordinates",
        "line 8: face 'f 1 2 x' needs integer vertex indices",
        "line 10: not a v or f line: 'hello'",
        "line 9: face 'f 1 2 99' names vertex 99 of 4",
    ]


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd+lookup"])
def test_an_obj_text_model_decodes_greedily_as_transformers_and_parses(decoding):
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(CHARS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=2, max_position_embeddings=256,
                                         initializer_range=0.5)).eval()  # large weights: no near-ties in greedy
    tok = CharTokenizer()
    prompt = mesh_to_obj_text(trimesh.creation.box())[:60]
    out = generate_obj_mesh(model, tok, prompt, decoding=decoding, max_new_tokens=40, do_sample=False)
    ids = tok(prompt)["input_ids"]
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=40, do_sample=False)
    assert out.text == tok.decode(expected[0, ids.shape[1] :])
    assert isinstance(out.mesh, trimesh.Trimesh) and all(p.startswith("line ") for p in out.problems)
    with pytest.raises(ValueError, match="prompt must be a non-empty string"):
        generate_obj_mesh(model, tok, "")
