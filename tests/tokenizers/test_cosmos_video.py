"""Cosmos-Tokenize1-DV8x16x16: encodes and decodes as NVIDIA's own code does, and its TorchScript
files load without running their code (`tests/fixtures/cosmos_tokenizer`, made by that code)."""

import hashlib
import json
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from mmspec.tokenizers.cosmos_video import CosmosVideoTokenizer, CosmosVideoTokenizerConfig
from mmspec.utils.torchscript_weights import read_torchscript_state_dict
from mmspec.utils.checkpoint import read_state_dict

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cosmos_tokenizer"


@pytest.fixture(scope="module")
def reference():
    return torch.load(FIXTURE / "reference.pt", weights_only=True)


@pytest.fixture(scope="module")
def tiny_config():
    return CosmosVideoTokenizerConfig.from_dict(json.loads((FIXTURE / "config.json").read_text()))


@pytest.fixture(scope="module")
def tokenizer(tiny_config):
    return CosmosVideoTokenizer.from_pretrained(FIXTURE, tiny_config)


def jit_folder(tmp_path: Path) -> Path:
    for name in ("encoder.jit", "decoder.jit"):
        shutil.copy(FIXTURE / name, tmp_path / name)
    return tmp_path


def test_decoder_matches_the_original(tokenizer, reference):
    out = tokenizer.decode(reference["decode_codes"])
    assert out.shape == (1, 3, 17, 32, 32)  # 3 latent frames -> 1 + 2 * 8 frames
    torch.testing.assert_close(out, reference["decoded"], atol=1e-4, rtol=0)


def test_encoder_codes_equal_the_original(tokenizer, reference):
    torch.testing.assert_close(tokenizer.latent(reference["video"].float()), reference["latent"], atol=1e-5, rtol=0)
    codes = tokenizer.encode(reference["video"].float())
    assert codes.dtype == torch.long and codes.shape == (2, 2, 2, 2)
    assert torch.equal(codes, reference["codes"])


def test_published_jit_files_load_and_decode_as_the_original(tmp_path, tiny_config, reference):
    tok = CosmosVideoTokenizer.from_pretrained(jit_folder(tmp_path), tiny_config)
    torch.testing.assert_close(tok.decode(reference["decode_codes"]), reference["decoded"], atol=1e-4, rtol=0)
    assert torch.equal(tok.encode(reference["video"].float()), reference["codes"])


def test_real_levels_quantise_and_embed_as_the_original(reference):
    tok = CosmosVideoTokenizer(CosmosVideoTokenizerConfig(channels=2))
    assert tok.codebook_size == 64000
    table = tok.code_vectors()
    assert table.shape == (64000, 6) and table.dtype == torch.float32
    assert hashlib.sha256(table.numpy().tobytes()).digest() == bytes(reference["fsq_table_sha256"].tolist())
    assert torch.equal(tok.indices_to_codes(reference["fsq_sample_indices"]), reference["fsq_sample_vectors"])
    assert torch.equal(tok.quantizer.indices(reference["fsq_z"]), reference["fsq_indices"])
    assert table.unique(dim=0).shape[0] == 64000 and table.abs().max() == 1


def test_jit_reader_gives_the_script_modules_state_dict(tmp_path):
    """Every tensor of both archives, buffers included, as `torch.jit.load(...).state_dict()`
    names it (our own fixture archives: loading them with torch here is safe)."""
    for name in ("encoder.jit", "decoder.jit"):
        ours = read_torchscript_state_dict(FIXTURE / name)
        theirs = torch.jit.load(str(FIXTURE / name)).state_dict()
        assert ours.keys() == theirs.keys()
        assert all(torch.equal(ours[k], theirs[k]) and ours[k].dtype == theirs[k].dtype for k in ours)
    weights = read_state_dict(FIXTURE / "model.safetensors")
    both = {**read_torchscript_state_dict(FIXTURE / "encoder.jit"), **read_torchscript_state_dict(FIXTURE / "decoder.jit")}
    assert all(torch.equal(both[k], v.to(both[k].dtype)) for k, v in weights.items())


def replaced_entries(src: Path, dst: Path, replace) -> None:
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(dst, "w") as b:
        for info in a.infolist():
            b.writestr(info, replace(info.filename, a.read(info)))


def test_jit_reader_never_runs_the_archives_code(tmp_path):
    """Each `code/` file becomes Python that would write a marker file: torch.jit.load trips on
    it, our reader does not look at it."""
    marker = tmp_path / "ran"
    planted = tmp_path / "encoder.jit"
    payload = f"open({str(marker)!r}, 'w').write('ran')\nraise RuntimeError('executed')\n".encode()
    replaced_entries(FIXTURE / "encoder.jit", planted, lambda name, data: payload if "/code/" in name and name.endswith(".py") else data)
    with pytest.raises(Exception):
        torch.jit.load(str(planted))
    state = read_torchscript_state_dict(planted)
    assert torch.equal(state["quant_conv.conv3d.weight"], read_torchscript_state_dict(FIXTURE / "encoder.jit")["quant_conv.conv3d.weight"])
    assert not marker.exists()


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return exec, (f"open({str(self.marker)!r}, 'w').write('ran')",)


def test_jit_reader_refuses_a_pickle_that_calls_anything_else(tmp_path):
    marker = tmp_path / "ran"
    evil = pickle.dumps(_Exploit(marker), protocol=2)
    planted = tmp_path / "encoder.jit"
    replaced_entries(FIXTURE / "encoder.jit", planted, lambda name, data: evil if name == "encoder/data.pkl" else data)
    with pytest.raises(ValueError, match="exec, which a weights reader does not build") as err:
        read_torchscript_state_dict(planted)
    assert "\n" not in str(err.value) and not marker.exists()


def test_missing_and_broken_files_are_one_line_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist") as err:
        read_torchscript_state_dict(tmp_path / "none.jit")
    (tmp_path / "junk.jit").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable TorchScript archive") as err2:
        read_torchscript_state_dict(tmp_path / "junk.jit")
    with pytest.raises(ValueError, match="holds no decoder.jit") as err3:
        shutil.copy(FIXTURE / "encoder.jit", tmp_path / "encoder.jit")
        CosmosVideoTokenizer.from_pretrained(tmp_path)
    with pytest.raises(ValueError, match="is not a folder") as err4:
        CosmosVideoTokenizer.from_pretrained(tmp_path / "nowhere")
    assert all("\n" not in str(e.value) for e in (err, err2, err3, err4))


def test_weights_of_another_config_are_refused_in_one_line(tmp_path, tiny_config):
    wider = CosmosVideoTokenizerConfig.from_dict({**tiny_config.to_dict(), "channels": 4})
    with pytest.raises(ValueError, match="shape mismatch") as err:
        CosmosVideoTokenizer.from_pretrained(jit_folder(tmp_path), wider)
    assert "\n" not in str(err.value)
    real_levels = CosmosVideoTokenizerConfig.from_dict({**tiny_config.to_dict(), "levels": [8, 8, 8, 5, 5, 5]})
    with pytest.raises(ValueError, match=r"levels \[4, 4, 4, 3, 3, 3\]"):
        CosmosVideoTokenizer.from_pretrained(tmp_path, real_levels)


def test_wrong_inputs_are_value_errors(tokenizer):
    with pytest.raises(ValueError, match="1 \\+ 8k frames"):
        tokenizer.encode(torch.zeros(1, 3, 8, 32, 32))
    with pytest.raises(ValueError, match="multiples of 16"):
        tokenizer.encode(torch.zeros(1, 3, 9, 32, 40))
    with pytest.raises(ValueError, match="video must be"):
        tokenizer.encode(torch.zeros(3, 9, 32, 32))
    with pytest.raises(ValueError, match=r"codes must lie in \[0, 1728\)"):
        tokenizer.decode(torch.full((1, 1, 1, 1), 1728))
    with pytest.raises(ValueError, match="codes must be"):
        tokenizer.decode(torch.zeros(1, 2, 2, dtype=torch.long))


def test_save_pretrained_round_trips(tmp_path, tokenizer, reference):
    tokenizer.save_pretrained(tmp_path)
    again = CosmosVideoTokenizer.from_pretrained(tmp_path)
    assert again.config == tokenizer.config
    assert torch.equal(again.decode(reference["decode_codes"]), tokenizer.decode(reference["decode_codes"]))


def test_dv8x16x16_shapes_of_cosmos_predict1():
    """33 frames of 640x1024 are 5 x 40 x 64 codes (the AR model's 12,800 tokens a clip)."""
    config = CosmosVideoTokenizerConfig()
    assert (config.codebook_size, config.embedding_dim) == (64000, 6)
    tok = CosmosVideoTokenizer(CosmosVideoTokenizerConfig(channels=2))
    assert tok.latent_shape(33, 640, 1024) == (5, 40, 64)


def test_full_size_names_and_shapes_are_the_published_files():
    """Every weight of the published DV8x16x16-720p `encoder.jit` / `decoder.jit` (as the original
    network names them at that config) has our parameter of that name and shape, and only the
    constant buffers (Haar filter, FSQ levels) are left out."""
    from mmspec.tokenizers.cosmos_video import CONSTANT_KEYS

    published = json.loads((FIXTURE / "dv8x16x16_keys.json").read_text())
    theirs = {k: v for part in published.values() for k, v in part.items() if not k.endswith(CONSTANT_KEYS)}
    with torch.device("meta"):
        ours = {k: list(v.shape) for k, v in CosmosVideoTokenizer(CosmosVideoTokenizerConfig()).state_dict().items()}
    assert ours == theirs
    left_out = sorted(k for part in published.values() for k in part if k.endswith(CONSTANT_KEYS))
    assert left_out == sorted(["encoder.patcher3d.wavelets", "encoder.patcher3d._arange", "encoder.patcher3d.patch_size_buffer",
                               "decoder.unpatcher3d.wavelets", "decoder.unpatcher3d._arange"]
                              + [f"{p}quantizer.{b}" for p in ("", "inv_quant.") for b in ("_levels", "_basis", "implicit_codebook")])
