"""Finished sequences leave the forwards (`ActiveRows`): the batch shrinks as sequences
end, and no sequence's tokens change for it."""

import pytest
import torch

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from tests.decoding.helpers import tiny_model

DECODINGS = [
    "ar",
    "mc-sjd",
    DecodingConfig(method="sjd", window=4, branches=2, branch_slots=2),
    DecodingConfig.from_name("zipar+mc-sjd", window=3, zipar_window=2),
    DecodingConfig(method="auto", cost="off"),
]
IDS = ["ar", "mc-sjd", "sjd+branches", "zipar+mc-sjd", "auto"]


class Recorded:
    """A session that records the rows of every forward, with `keep_rows` offered or hidden."""

    def __init__(self, session, shrinks: bool, rows: list):
        self._session, self._shrinks, self._rows = session, shrinks, rows

    def __getattr__(self, name):
        if name == "keep_rows" and not self._shrinks:
            raise AttributeError(name)
        return getattr(self._session, name)

    def forward(self, tokens, positions, segments=None, tree=None):
        self._rows.append(tokens.shape[0])
        if tree is None:
            return self._session.forward(tokens, positions, segments)
        return self._session.forward(tokens, positions, tree=tree)


class RecordingModel:
    def __init__(self, model, shrinks: bool):
        self.model, self.shrinks, self.rows = model, shrinks, []

    def layout(self):
        return self.model.layout()

    def start(self, condition, **kwargs):
        return Recorded(self.model.start(condition, **kwargs), self.shrinks, self.rows)


@pytest.mark.parametrize("decoding", DECODINGS, ids=IDS)
@pytest.mark.parametrize("stop", [(), (3,)], ids=["fixed-length", "stop-token"])
def test_dropping_finished_sequences_changes_no_token(decoding, stop):
    """Sampled at a fixed seed, the batch gives the same tokens whether the finished
    sequences leave the forwards or ride along, and they do leave."""
    model = tiny_model(vocab_size=16, block_size=16)
    labels = torch.tensor([0, 1, 2, 1, 0, 2])
    sampling = SamplingConfig(guidance_scale=2.0, top_k=6)
    out = {}
    for shrinks in (True, False):
        recording = RecordingModel(model, shrinks)
        tokens, stats = generate(recording, labels, decoding=decoding, sampling=sampling, stop_tokens=stop,
                                 generator=torch.Generator().manual_seed(4))
        out[shrinks] = tokens, stats.lengths, recording.rows
    assert torch.equal(out[True][0], out[False][0]) and torch.equal(out[True][1], out[False][1])
    assert set(out[False][2]) == {len(labels)}
    if stop or decoding != "ar":  # AR's fixed-length sequences all end at its last forward
        assert min(out[True][2]) < len(labels), out[True][2]
        assert out[True][2] == sorted(out[True][2], reverse=True)


def test_greedy_decoding_of_stopping_sequences_equals_each_alone():
    model = tiny_model(vocab_size=16, block_size=16)
    labels = torch.tensor([0, 1, 2, 1])
    greedy = SamplingConfig(guidance_scale=3.0, temperature=0)
    for decoding in ("ar", "mc-sjd"):
        batch, _ = generate(model, labels, decoding=decoding, sampling=greedy, stop_tokens=(5,),
                            generator=torch.Generator().manual_seed(0))
        for i, label in enumerate(labels):
            alone, _ = generate(model, label[None], decoding=decoding, sampling=greedy, stop_tokens=(5,),
                                generator=torch.Generator().manual_seed(0))
            assert torch.equal(batch[i], alone[0])
