"""The locality-order experiment on a raster model: one forward a group, committed cells
never change again, and the other cells' drafts are refreshed every forward."""

import torch

from benchmarks.studies import lpd_order_raster
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.orders import LocalityOrder
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT


class Recorder(torch.nn.Module):
    def __init__(self, gpt):
        super().__init__()
        self.gpt, self.config, self.inputs = gpt, gpt.config, []

    def forward(self, tokens, labels):
        self.inputs.append(tokens[0].clone())
        return self.gpt(tokens, labels)


def test_groups_commit_in_order_and_drafts_refresh():
    torch.manual_seed(0)
    gpt = Recorder(LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=1, n_head=2, vocab_size=32, block_size=256, num_classes=3)).eval())
    order = LocalityOrder.for_steps(20)
    tokens = lpd_order_raster.decode_in_order(gpt, 1, order, SamplingConfig(guidance_scale=2.0), torch.Generator().manual_seed(5))
    cells = order.sample(1, torch.Generator().manual_seed(5))[0]
    assert tokens.shape == (1, 256) and len(gpt.inputs) == 20
    for k, group in enumerate(order.groups()[:-1]):
        done = cells[: group.stop]
        assert torch.equal(gpt.inputs[k + 1][done], tokens[0, done])
    assert (gpt.inputs[1][cells[order.groups()[0].stop:]] != gpt.inputs[0][cells[order.groups()[0].stop:]]).any()
