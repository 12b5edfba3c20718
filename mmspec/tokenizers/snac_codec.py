"""SNAC (Siuzdak et al., `pip install snac`), the multi-scale codec Orpheus speaks through,
loaded without running code from its files.

`SNAC.from_pretrained` unpickles `pytorch_model.bin` in full; `SnacCodec.from_pretrained`
builds SNAC from `config.json` (only the keyword arguments SNAC's constructor takes, each
checked) and reads the weights as safetensors or with `weights_only=True`. A folder as
published (hubertsiuzdak/snac_24khz: `config.json` + `pytorch_model.bin`, weight norm saved
as `weight_g` / `weight_v`) loads as it is.

SNAC's decoder adds noise (its `NoiseBlock`s draw from torch's global generator). `decode`
draws it from a seed of its own instead, leaving the global generator as it was, so a clip's
waveform is a function of its codes and its seed.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import torch
from torch import nn

from mmspec.utils.checkpoint import check_finite, check_fits_memory, load_into, read_state_dict
from mmspec.utils.json_files import read_json, write_json

INT_KEYS = ("sampling_rate", "encoder_dim", "latent_dim", "decoder_dim", "attn_window_size", "codebook_size", "codebook_dim")
LIST_KEYS = ("encoder_rates", "decoder_rates", "vq_strides")
BOOL_KEYS = ("noise", "depthwise")


def check_snac_config(config: dict, where: str) -> dict:
    """SNAC's keyword arguments from `config.json`, each of the type SNAC takes; a rough
    weight count is checked against the machine's memory before anything is built."""
    from snac import SNAC

    if not isinstance(config, dict):
        raise ValueError(f"{where}: a SNAC config must be a JSON object, got {type(config).__name__}")
    unknown = set(config) - (set(inspect.signature(SNAC.__init__).parameters) - {"self"})
    if unknown:
        raise ValueError(f"{where}: SNAC takes no {', '.join(sorted(unknown))}")
    for key, value in config.items():
        whole = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1
        fine = (whole(value) or (value is None and key in ("latent_dim", "attn_window_size"))) if key in INT_KEYS else \
            (isinstance(value, list) and 0 < len(value) <= 8 and all(whole(v) for v in value)) if key in LIST_KEYS else \
            isinstance(value, bool)
        if not fine:
            raise ValueError(f"{where}: SNAC's {key} must be {'a list of whole numbers' if key in LIST_KEYS else 'a whole number'}"
                             f", got {value!r}")
    defaults = {k: p.default for k, p in inspect.signature(SNAC.__init__).parameters.items() if k != "self"}
    full = {**defaults, **config}
    width = max(full["decoder_dim"], full["latent_dim"] or full["encoder_dim"] * 2 ** len(full["encoder_rates"]))
    weights = 4 * width * width * (len(full["decoder_rates"]) + len(full["encoder_rates"]) + 2) * 16
    weights += 4 * full["codebook_size"] * full["codebook_dim"] * len(full["vq_strides"])
    check_fits_memory(weights, f"the SNAC codec of {where}", "check its config.json")
    return config


def with_parametrized_weight_norm(state: dict) -> dict:
    """Weight norm saved the old way (`weight_g`, `weight_v`) under the names of
    `torch.nn.utils.parametrizations.weight_norm`, which SNAC uses."""
    renamed = {}
    for key, value in state.items():
        for old, new in ((".weight_g", ".parametrizations.weight.original0"), (".weight_v", ".parametrizations.weight.original1")):
            if key.endswith(old):
                key = key[: -len(old)] + new
        renamed[key] = value
    return renamed


class SnacCodec(nn.Module):
    """A SNAC model and the config it was built from.

    Attributes:
        model (`snac.SNAC`): the codec.
        config (`dict`): SNAC's keyword arguments, as `config.json` holds them.
    """

    def __init__(self, config: dict):
        from snac import SNAC

        super().__init__()
        self.config = dict(config)
        self.model = SNAC(**self.config).eval()

    @property
    def sample_rate(self) -> int:
        return int(self.model.sampling_rate)

    @property
    def hop_length(self) -> int:
        """Samples per code of the finest level."""
        return int(self.model.hop_length)

    @property
    def codebook_size(self) -> int:
        return int(self.model.codebook_size)

    @property
    def levels(self) -> int:
        return len(self.model.vq_strides)

    @torch.no_grad()
    def decode(self, codes: list[torch.Tensor], seed: int) -> torch.Tensor:
        """Waveforms `[B, samples]` of SNAC's levels `codes` (long `[B, n_level]`), its noise
        drawn from `seed`."""
        if len(codes) != self.levels or any(c.dim() != 2 for c in codes):
            raise ValueError(f"SNAC decodes {self.levels} levels of codes [batch, n], got {[tuple(c.shape) for c in codes]}")
        if any(bool(((c < 0) | (c >= self.codebook_size)).any()) for c in codes):
            raise ValueError(f"SNAC codes must lie in [0, {self.codebook_size}); these codes do not fit this codec")
        device = next(self.parameters()).device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            torch.manual_seed(seed)
            audio = self.model.decode([c.to(device) for c in codes])
        return audio[:, 0].float().clamp(-1, 1)

    def save_pretrained(self, folder: str | Path) -> None:
        from safetensors.torch import save_file

        folder = Path(folder)
        write_json(folder / "config.json", self.config)
        save_file({k: v.contiguous() for k, v in self.model.state_dict().items()}, str(folder / "model.safetensors"))

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> "SnacCodec":
        """A codec from `config.json` and `model.safetensors` (or `pytorch_model.bin`, read
        with `weights_only=True`)."""
        folder = Path(folder)
        if not folder.is_dir():
            raise ValueError(f"{folder} is not a folder holding a SNAC codec (config.json and its weights)")
        codec = cls(check_snac_config(read_json(folder / "config.json", "SNAC codec"), str(folder)))
        weights = next((folder / name for name in ("model.safetensors", "pytorch_model.bin") if (folder / name).is_file()), None)
        if weights is None:
            raise ValueError(f"{folder} holds no SNAC weights (model.safetensors or pytorch_model.bin)")
        load_into(codec.model, with_parametrized_weight_norm(read_state_dict(weights)), what=f"SNAC codec {folder}")
        check_finite(codec.named_parameters(), str(folder))
        return codec.eval()
