"""The captioner's training batches: the loss sees only the caption and its EOS, and a
prompt's example caption shares the answer's template."""

import numpy as np
import torch

from scripts import train_captioner as script
from tests.helpers.tiny_captioner import tiny_processor


def test_batch_labels_cover_the_caption_and_eos_only():
    processor = tiny_processor()
    tokenizer = processor.tokenizer
    batch = script.training_batch(processor, np.random.default_rng(0), 6)
    ids, labels, mask = batch["input_ids"], batch["labels"], batch["attention_mask"]
    assert batch["pixel_values"].shape == (6, 3, 64, 64)
    for i in range(6):
        scored = labels[i] != -100
        assert torch.equal(labels[i][scored], ids[i][scored])
        assert ids[i][scored][-1] == tokenizer.eos_token_id
        assert torch.equal(mask[i].bool(), ids[i] != tokenizer.pad_token_id)
        prompt = tokenizer.decode(ids[i][: int(scored.nonzero()[0])][script.IMAGE_TOKENS:])
        assert prompt.strip().startswith("describe the picture")
        assert not scored[: script.IMAGE_TOKENS].any()


def test_pixels_sit_on_the_8_bit_grid_the_processor_sees():
    x = torch.linspace(-1, 1, 1001)
    q = script.quantised(x)
    assert torch.allclose((q + 1) * 127.5, torch.round((q + 1) * 127.5), atol=1e-4)
    assert (q - x).abs().max() <= 1 / 255 + 1e-6
