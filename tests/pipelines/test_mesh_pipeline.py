import pytest
import torch
import trimesh
from transformers import OPTConfig, OPTForCausalLM

from mmspec.decoding.config import DecodingConfig
from mmspec.io.mesh import save_mesh, save_preview
from mmspec.models.adapters.mesh_opt import mesh_layout, mesh_opt_config
from mmspec.pipelines import load_pipeline
from mmspec.pipelines.mesh import MeshPipeline
from mmspec.tokenizers.mesh import BOS, EOS, LEVELS, PAD, TOKENS_PER_FACE, VOCAB_SIZE

MAX_FACES = 4
METHODS = ["ar", "sjd", "mc-sjd", "lookup", "mc-sjd+lookup", "mc-sjd+face-lookup"]


@pytest.fixture(scope="module")
def meshxl_dir(tmp_path_factory):
    """A tiny random OPT saved as a MeshXL checkpoint: vocabulary 131, unconditional."""
    torch.manual_seed(0)
    config = OPTConfig(vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
                       max_position_embeddings=128, word_embed_proj_dim=32, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD,
                       init_std=0.5, tie_word_embeddings=False)  # large random weights: varied tokens, no near-ties
    model = OPTForCausalLM(config)
    folder = tmp_path_factory.mktemp("meshxl")
    model.save_pretrained(folder)
    return folder


def transformers_greedy(model, prompt: torch.Tensor, layout=None) -> torch.Tensor:
    """`model.generate`'s greedy new tokens, under the layout's allowed-token mask if given."""
    P = prompt.shape[1]
    allowed = None if layout is None else (lambda batch, ids: layout.allowed[len(ids) - P].nonzero()[:, 0].tolist())
    out = model.generate(prompt, max_new_tokens=MAX_FACES * TOKENS_PER_FACE + 1, do_sample=False, eos_token_id=EOS,
                         pad_token_id=PAD, prefix_allowed_tokens_fn=allowed)
    return out[:, P:]


@pytest.mark.parametrize("decoding", METHODS)
def test_greedy_meshes_equal_transformers_generate(meshxl_dir, decoding):
    pipe = MeshPipeline.from_pretrained(meshxl_dir)
    expected = transformers_greedy(pipe.model, torch.tensor([[BOS]]))
    out = pipe(num_meshes=1, decoding=decoding, temperature=0.0, max_faces=MAX_FACES, constrain=False, window=8)
    assert out.tokens[0, : expected.shape[1]].tolist() == expected[0].tolist()
    if decoding != "ar":
        assert out.stats[0].forward_passes <= len(expected[0])


@pytest.mark.parametrize("decoding", ["ar", "mc-sjd+lookup"])
def test_constrained_greedy_equals_transformers_generate_under_the_same_mask(meshxl_dir, decoding):
    pipe = MeshPipeline.from_pretrained(meshxl_dir)
    layout = mesh_layout(MAX_FACES, VOCAB_SIZE)
    expected = transformers_greedy(pipe.model, torch.tensor([[BOS]]), layout)
    out = pipe(num_meshes=1, decoding=decoding, temperature=0.0, max_faces=MAX_FACES)
    tokens = out.tokens[0, : expected.shape[1]]
    assert tokens.tolist() == expected[0].tolist()
    body = tokens[tokens != PAD]
    assert (body[:-1] < LEVELS).all() and len(body) % TOKENS_PER_FACE == 1 and body[-1] == EOS
    assert out.problems == [None] and isinstance(out.meshes[0], trimesh.Trimesh)


def test_the_layout_allows_eos_only_at_face_starts():
    layout = mesh_layout(3, VOCAB_SIZE + 8)
    eos_at = layout.allowed[:, EOS].nonzero()[:, 0].tolist()
    assert eos_at == [9, 18, 27] and layout.allowed[-1].sum() == 1
    assert not layout.allowed[:, [BOS, PAD, VOCAB_SIZE, VOCAB_SIZE + 7]].any()
    assert layout.axes == ("face", "slot") and layout.coords[10].tolist() == [1, 1]


def test_class_conditional_pipeline_saves_loads_and_names_classes(tmp_path):
    torch.manual_seed(0)
    model = OPTForCausalLM(mesh_opt_config(3, hidden=32, layers=1, heads=2)).eval()
    MeshPipeline(model, class_names=["box", "cone", "torus"], metadata={"note": "x"}).save_pretrained(tmp_path)
    pipe = load_pipeline(tmp_path)
    assert isinstance(pipe, MeshPipeline) and pipe.class_names == ["box", "cone", "torus"] and pipe.metadata == {"note": "x"}
    g = lambda: torch.Generator().manual_seed(3)
    a = pipe(class_labels=["cone", 2], max_faces=3, generator=g(), decoding="ar")
    b = pipe(class_labels=[1, "torus"], max_faces=3, generator=g(), decoding="ar")
    assert torch.equal(a.tokens, b.tokens) and len(a.meshes) == 2
    with pytest.raises(ValueError, match="unknown mesh class 'sphere'; choose from box, cone, torus"):
        pipe(class_labels="sphere")
    with pytest.raises(ValueError, match="class-conditional"):
        pipe(num_meshes=2)
    with pytest.raises(ValueError, match="max_faces must be"):
        pipe(class_labels=0, max_faces=1000)
    with pytest.raises(ValueError, match="unknown mesh decoding"):
        pipe(class_labels=0, decoding="ar+lookup")
    with pytest.raises(ValueError, match="unknown mesh decoding"):
        pipe(class_labels=0, decoding="mc-sjd+gsd")
    with pytest.raises(ValueError, match="zipar\\+mc-sjd is not exact"):
        pipe(class_labels=0, decoding=DecodingConfig.from_name("zipar+mc-sjd"))


@pytest.mark.parametrize("damage", ["config", "weights", "empty"])
def test_a_corrupt_checkpoint_folder_is_a_one_line_error(meshxl_dir, tmp_path, damage):
    for f in meshxl_dir.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    if damage == "config":
        (tmp_path / "config.json").write_text("{not json")
    elif damage == "weights":
        (tmp_path / "model.safetensors").write_bytes(b"\x00" * 64)
    else:
        for f in tmp_path.iterdir():
            f.unlink()
    with pytest.raises(ValueError) as err:
        MeshPipeline.from_pretrained(tmp_path)
    assert "\n" not in str(err.value) and str(tmp_path) in str(err.value)


def test_meshes_write_as_obj_glb_ply_and_png_and_unwritable_paths_are_one_line_errors(tmp_path):
    box = trimesh.creation.box()
    for suffix in (".obj", ".glb", ".ply"):
        back = trimesh.load(save_mesh(box, tmp_path / f"box{suffix}"), force="mesh")
        assert len(back.faces) == 12
    assert save_preview(box, tmp_path / "box.png").stat().st_size > 0
    blocker = tmp_path / "file"
    blocker.write_text("")
    for write in (lambda p: save_mesh(box, p / "x.glb"), lambda p: save_preview(box, p / "x.png")):
        with pytest.raises(ValueError, match=f"cannot write {blocker}"):
            write(blocker)
    with pytest.raises(ValueError, match="mesh files end in .obj, .glb, .ply"):
        save_mesh(box, tmp_path / "box.stl")
