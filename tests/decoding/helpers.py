"""Tiny real models shared by the decoding tests."""

import torch

from mmspec.decoding.auto.chooser import AutoContext, Choice
from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT


def tiny_model(vocab_size=4, block_size=4, seed=0):
    """A 1-layer LlamaGen with a small vocabulary and sharp, non-uniform conditionals."""
    torch.manual_seed(seed)
    cfg = LlamaGenConfig(dim=16, n_layer=1, n_head=2, vocab_size=vocab_size, block_size=block_size, num_classes=3)
    model = LlamaGenGPT(cfg).eval()
    torch.nn.init.normal_(model.output.weight, std=0.4)
    torch.nn.init.normal_(model.tok_embeddings.weight, std=1.0)
    torch.nn.init.normal_(model.cls_embedding.embedding_table.weight, std=1.0)
    return model


def record_massless_drafts(monkeypatch, module) -> list:
    """Wraps `module.verify` (patched for the test) so that every call appends (drafted
    slots, drafted slots whose draft has no mass under its q) to the returned list."""
    verify, checked = module.verify, []

    def checking_verify(target_probs, draft_probs, draft_tokens, num_slots, *args, **kwargs):
        slots = torch.arange(draft_tokens.shape[1])[None, :, None] < num_slots[:, None, None]
        drafted = slots & (draft_tokens >= 0)
        mass = draft_probs.gather(-1, draft_tokens.clamp(min=0)[..., None])[..., 0]
        checked.append((int(drafted.sum()), int((drafted & (mass <= 0)).sum())))
        return verify(target_probs, draft_probs, draft_tokens, num_slots, *args, **kwargs)

    monkeypatch.setattr(module, "verify", checking_verify)
    return checked


class FickleChooser:
    """Changes its mind at every forward: the window, branches on or off, the drafter and
    the learned head on or off follow a counter and what the last forwards committed (the
    past only, as auto's)."""

    every = 1
    drops_head = False  # switches the head on and off

    def __init__(self, context: AutoContext, layout, device):
        self.context, self.count, self.last = context, 0, 0.0

    def choose(self, windows_per_row: float) -> Choice:
        c, k = self.context, self.count
        self.count += 1
        branches = c.branch_settings[(k + int(self.last * 7)) % len(c.branch_settings)]
        return Choice(c.windows[k % len(c.windows)], branches, c.drafters[(k + 1) // 2 % len(c.drafters)],
                      head=c.head and k % 3 != 1)

    def observe(self, choice, run_tokens, by_branches, forwards, glue_s, ar_glue_s=0.0, scale=1.0, excess_s=0.0, draft_s=0.0, rejections=0.0, head_s=0.0):
        self.last = run_tokens

    def observe_front(self, head_hits, carried_hits):
        pass

    def observe_commits(self, tokens, new, committed, at_random=None):
        pass
