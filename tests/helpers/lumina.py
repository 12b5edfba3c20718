"""The Lumina-mGPT fixture (`tests/fixtures/lumina_mgpt`): a tiny random Chameleon whose
weights, config and reference outputs came from Lumina-mGPT's own code (`make_fixture.py`);
the Anole fixture (`tests/fixtures/anole`) is the same for LANTERN's Anole code, with the
same vocabulary (so `tiny_tokenizer` serves both)."""

import json
from pathlib import Path

import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from mmspec.models.adapters.chameleon import expand_qk_norms
from mmspec.tokenizers.chameleon_vqgan import ChameleonVQGANDecoder, VQGANConfig
from tests.helpers import FIXTURES

FIXTURE = FIXTURES / "lumina_mgpt"
ANOLE_FIXTURE = FIXTURES / "anole"
WORDS = ["Generate", "an", "image", "of", "according", "to", "the", "following", "prompt", ":", "a", "cat", "dog", "red"]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Chameleon's names for the special and image ids; words at otherwise unused ids."""
    vocab = json.loads((FIXTURE / "config.json").read_text())["vocabulary_map"]
    by_id = {i: name for name, i in vocab.items()}
    for i, word in enumerate(WORDS):
        by_id[8810 + i] = word
    tok = Tokenizer(models.WordLevel({name: i for i, name in by_id.items()}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>",
                                   pad_token="<pad>", padding_side="left")


def tiny_vqgan() -> ChameleonVQGANDecoder:
    torch.manual_seed(0)
    return ChameleonVQGANDecoder(VQGANConfig(n_embed=8192, embed_dim=4, z_channels=8, ch=32, ch_mult=[1, 1],
                                             num_res_blocks=0, resolution=32)).eval()


def lumina_config(fixture: Path = FIXTURE, **overrides) -> tf.ChameleonConfig:
    """A fixture's config, as transformers 5 reads the `config.json` the original's class
    wrote (Lumina-mGPT's by default, `ANOLE_FIXTURE` for LANTERN's Anole)."""
    saved = json.loads((fixture / "config.json").read_text())
    for key in ("lumina_mgpt_commit", "lantern_commit", "transformers_version_used", "transformers_version",
                "_name_or_path", "architectures", "model_type"):
        saved.pop(key, None)
    saved.update(overrides)
    return tf.ChameleonConfig(**saved)


def fixture_model(attn: str = "eager", fixture: Path = FIXTURE, **overrides):
    """The fixture's model (Lumina-mGPT's by default, `ANOLE_FIXTURE` for Anole's) in float32."""
    config = lumina_config(fixture, **overrides)
    config._attn_implementation = attn
    torch.manual_seed(0)
    model = tf.ChameleonForConditionalGeneration(config).eval()
    state = {k: v.float() for k, v in torch.load(fixture / "model.pt", weights_only=True).items()}
    missing, unexpected = model.load_state_dict(expand_qk_norms(state, config), strict=False)
    assert not unexpected and all(k.startswith("model.vqmodel.") for k in missing), (missing, unexpected)
    return model


def lumina_folder(tmp_path) -> Path:
    """A checkpoint folder as Lumina-mGPT's hub repos hold it: the config its class wrote and
    safetensors weights with its per-shard `[model_parallel_size, head_dim]` q/k norms."""
    from safetensors.torch import save_file

    state = torch.load(FIXTURE / "model.pt", weights_only=True)
    assert state["model.layers.0.self_attn.q_norm.weight"].shape == (1, 8)  # the original's layout
    folder = tmp_path / "lumina"
    folder.mkdir()
    save_file({k: v.float().contiguous() for k, v in state.items()}, folder / "model.safetensors", metadata={"format": "pt"})
    saved = json.loads((FIXTURE / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(saved))
    return folder
