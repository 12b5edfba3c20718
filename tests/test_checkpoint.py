import argparse
import collections

import pytest
import torch
from safetensors.torch import save_file

from mmspec.utils.checkpoint import read_state_dict
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT

TINY = LlamaGenConfig(dim=32, n_layer=1, n_head=2, vocab_size=16, block_size=4, num_classes=3)


class NotAllowed:
    """A class whose unpickling would run arbitrary code paths."""

    def __init__(self):
        self.x = 1


@pytest.fixture
def weights():
    torch.manual_seed(0)
    return LlamaGenGPT(TINY).state_dict()


@pytest.mark.parametrize("container", [None, "model", "module", "state_dict"])
def test_original_containers_load(tmp_path, weights, container):
    path = tmp_path / "gpt.pt"
    torch.save(weights if container is None else {container: weights, "steps": 10}, path)
    model = LlamaGenGPT.from_checkpoint(path, TINY)
    assert torch.equal(model.output.weight, weights["output.weight"])


def test_training_checkpoint_with_argparse_args_loads(tmp_path, weights):
    path = tmp_path / "0050000.pt"
    torch.save({"model": weights, "args": argparse.Namespace(lr=1e-4), "steps": 5}, path)
    assert LlamaGenGPT.from_checkpoint(path, TINY) is not None


def test_safetensors_loads(tmp_path, weights):
    path = tmp_path / "gpt.safetensors"
    save_file(weights, str(path))
    model = LlamaGenGPT.from_checkpoint(path, TINY)
    assert torch.equal(model.tok_embeddings.weight, weights["tok_embeddings.weight"])


def test_file_needing_arbitrary_unpickling_is_refused(tmp_path, weights):
    path = tmp_path / "evil.pt"
    torch.save({"model": weights, "extra": NotAllowed()}, path)
    with pytest.raises(ValueError, match="needs arbitrary unpickling.*refuses to execute"):
        LlamaGenGPT.from_checkpoint(path, TINY)


def test_derived_buffers_of_old_checkpoints_are_ignored(weights):
    sd = collections.OrderedDict(weights)
    sd["freqs_cis"] = torch.zeros(5, 8, 2)
    sd["layers.0.attention.kv_cache.k_cache"] = torch.zeros(1)
    assert LlamaGenGPT.from_checkpoint(sd, TINY) is not None


def test_missing_file_and_wrong_container_are_clear(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_state_dict(tmp_path / "nope.pt")
    path = tmp_path / "x.pt"
    torch.save({"optimizer": {"lr": 1}}, path)
    with pytest.raises(ValueError, match="neither a bare state dict nor holds one under model, module, state_dict"):
        read_state_dict(path)


def test_missing_keys_are_named(weights):
    del weights["norm.weight"]
    with pytest.raises(ValueError, match="missing keys: norm.weight"):
        LlamaGenGPT.from_checkpoint(weights, TINY)


def test_truncated_safetensors_is_a_one_line_error_naming_the_file(tmp_path, weights):
    """safetensors' own error ("Error while deserializing header ...") names no file."""
    path = tmp_path / "gpt.safetensors"
    save_file(weights, str(path))
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match=r"gpt\.safetensors is not a readable safetensors file") as info:
        LlamaGenGPT.from_checkpoint(path, TINY)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused_naming_file_and_tensor(tmp_path, weights, bad):
    """A checkpoint of NaN weights used to load and generate one token everywhere."""
    weights["output.weight"][0, 0] = bad
    path = tmp_path / "gpt.safetensors"
    save_file(weights, str(path))
    with pytest.raises(ValueError, match=r"gpt\.safetensors is corrupt: its tensor 'output.weight' holds NaN") as info:
        LlamaGenGPT.from_checkpoint(path, TINY)
    assert "\n" not in str(info.value)
