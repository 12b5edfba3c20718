"""Tree attention in the transformers sessions (`DecoderSession`: Emu3, Janus, Chameleon;
`TransformersSession`: the text LMs): exact branches give AR's greedy tokens, leave the
cache as a teacher-forced pass does, and sample the model's distribution."""

import pytest
import torch
import transformers as tf

from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.decoding.generate import generate
from mmspec.decoding.loop.jacobi import decode_jacobi, extra_positions
from mmspec.core.layout import TokenLayout
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from mmspec.models.adapters.emu3 import Emu3Condition, Emu3ImageGenerator
from mmspec.models.cache.hf_session import DecoderSession
from mmspec.models.adapters.janus import JanusCondition, JanusImageGenerator
from mmspec.models.adapters.transformers_lm import TransformersLM
from tests.helpers.sessions import cache_rows_as_they_leave
from tests.helpers.tiny_models import EMU3_GRID, emu3_inputs, janus_inputs, tiny_emu3, tiny_janus

BRANCHED = [
    DecodingConfig(method="mc-sjd", window=5, branches=3, branch_slots=2, branch_length=1),
    DecodingConfig(method="sjd", window=4, branches=2, branch_slots=3, branch_length=2),
]


def count_tree_forwards(session) -> list:
    """Wraps `session.forward` so that every call under tree attention appends to the list."""
    calls, forward = [], session.forward

    def counting(tokens, positions, segments=None, tree=None):
        if tree is not None:
            calls.append(int(tree.visible.shape[-1]))
            return forward(tokens, positions, tree=tree)
        return forward(tokens, positions, segments)

    session.forward = counting
    return calls


class CountingModel:
    """A TokenModel that opens its wrapped model's sessions with tree forwards counted."""

    def __init__(self, model):
        self.model, self.tree_calls = model, []

    def layout(self):
        return self.model.layout()

    def start(self, condition, **kwargs):
        session = self.model.start(condition, **kwargs)
        self.tree_calls = count_tree_forwards(session)
        return session


@pytest.fixture(scope="module")
def emu3():
    model, processor = tiny_emu3()
    enc = emu3_inputs(processor, ["a cat", "red dog blue green"])
    neg = emu3_inputs(processor, ["bad ugly", "blurry bad"])
    return Emu3ImageGenerator(model, *EMU3_GRID), Emu3Condition(enc.input_ids, enc.attention_mask, neg.input_ids, neg.attention_mask)


@pytest.fixture(scope="module")
def janus():
    model, processor = tiny_janus()
    enc = janus_inputs(processor, ["a cat", "red dog blue green"])
    return JanusImageGenerator(model), JanusCondition(enc.input_ids, enc.attention_mask)


def assert_branches_reproduce_ar(model, condition, guidance_scale, config):
    sampling = SamplingConfig(guidance_scale=guidance_scale, temperature=0)
    ar, _ = generate(model, condition, decoding="ar", sampling=sampling)
    counting = CountingModel(model)
    tokens, _ = generate(counting, condition, decoding=config, sampling=sampling, generator=torch.Generator().manual_seed(0))
    assert counting.tree_calls, "no forward ran under tree attention"
    assert torch.equal(tokens, ar)


@pytest.mark.parametrize("config", BRANCHED, ids=["mc-sjd", "sjd"])
@pytest.mark.parametrize("guidance_scale", [1.0, 3.0])
def test_emu3_greedy_with_branches_reproduces_ar(emu3, guidance_scale, config):
    assert_branches_reproduce_ar(*emu3, guidance_scale, config)


@pytest.mark.parametrize("config", BRANCHED, ids=["mc-sjd", "sjd"])
def test_janus_greedy_with_branches_reproduces_ar(janus, config):
    assert_branches_reproduce_ar(*janus, 4.0, config)


@pytest.mark.parametrize("config", BRANCHED, ids=["mc-sjd", "sjd"])
def test_text_lm_greedy_with_branches_reproduces_ar(config):
    torch.manual_seed(0)
    lm = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=48, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=64)).double().eval()
    ids = torch.tensor([[0, 0, 5, 9, 11], [3, 7, 1, 2, 40]])
    prompt = {"input_ids": ids, "attention_mask": torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])}
    assert_branches_reproduce_ar(TransformersLM(lm, max_new_tokens=12), prompt, 1.0, config)


def test_branch_cache_entries_end_where_a_teacher_forced_pass_puts_them(emu3):
    """Kept branch nodes are computed at scratch slots and moved into place by `relocate`:
    the committed cache of each sequence of a decode with branches, when it leaves the
    batch and at the end, equals a plain pass over the decoded tokens (sampling, so that
    candidates are taken)."""
    generator, condition = emu3
    layout = generator.layout()
    config = DecodingConfig(method="mc-sjd", window=4, branches=4, branch_slots=3, branch_length=2)
    sampling = SamplingConfig(guidance_scale=3.0, top_k=3)
    moved, taken_seeds = 0, 0
    order = torch.tensor([0, 2, 1, 3])  # each sequence's cond row, then its uncond row
    for seed in range(6):
        session = generator.start(condition, guided=True, extra_positions=extra_positions(layout, config, torch.device("cpu")))
        rows = cache_rows_as_they_leave(session)
        counts, relocate = [], session.relocate
        session.relocate = lambda src, pos, mask: (counts.append(int(mask.sum())), relocate(src, pos, mask))
        tokens, _ = decode_jacobi(session, layout, sampling, config, torch.Generator().manual_seed(seed))
        moved += sum(counts)
        taken_seeds += sum(counts) > 0
        committed, k, v = rows()
        reference = generator.start(condition, guided=True)
        T = tokens.shape[1]
        reference.forward(tokens[:, : T - 1], torch.arange(T - 1).expand(2, -1))
        P = session.prefix_len
        assert committed[:, P : P + T - 1].all()
        for kv, ref in ((k, reference.cache.k), (v, reference.cache.v)):
            torch.testing.assert_close(kv[..., P : P + T - 1, :], ref[:, order].movedim(1, 0)[..., P : P + T - 1, :], atol=1e-5, rtol=0)
    assert moved > 0 and taken_seeds > 1


class TinyGuidedLM:
    """A 1-layer Llama driven through `DecoderSession` with CFG: cond rows run the prompt
    `[B, 3]` of the condition, unconditional rows the fixed prompt `[1, 2]`; V = 4 tokens,
    4 generated positions (256 sequences), sharp conditionals."""

    def __init__(self):
        torch.manual_seed(0)
        config = tf.LlamaConfig(vocab_size=4, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                num_key_value_heads=1, intermediate_size=32, attn_implementation="eager")
        self.lm = tf.LlamaForCausalLM(config).double().eval()
        torch.nn.init.normal_(self.lm.lm_head.weight, std=1.5)
        torch.nn.init.normal_(self.lm.model.embed_tokens.weight, std=1.0)
        self.decoder = self.lm.model

    def layout(self):
        return TokenLayout.grid((4,), 4, axes=("step",))

    @torch.no_grad()
    def start(self, condition, *, guided, extra_positions=0):
        ids = torch.as_tensor(condition)
        mask = torch.ones_like(ids, dtype=torch.bool)
        if guided:  # the null prompt is shorter: left-padded, as real CFG rows are
            null = torch.tensor([[0, 1, 2]]).expand(len(ids), -1)
            ids, mask = torch.cat([ids, null]), torch.cat([mask, mask.index_fill(1, torch.tensor([0]), False)])
        return DecoderSession(self.decoder, self.decoder.embed_tokens, self.lm.lm_head, self.decoder.embed_tokens(ids), mask,
                              batch_size=len(condition), guided=guided, steps=4, extra_positions=extra_positions)


N_SAMPLES = 40_000  # rejects a +-5% bias on the likelier sequence probabilities at p < 1e-3 (see tests/decoding/test_ar.py)


@pytest.mark.statistical
def test_branches_through_a_transformers_session_are_lossless():
    """Whole 4-token sequences (V=4, CFG 2, top-k 3) from 40,000 draws of MC-SJD with
    branches through `DecoderSession` match the exact product of conditionals: chi-square
    at a fixed seed. A branch that saw the wrong ancestors, or ran at the wrong position
    id, biases the tokens after it."""
    model = TinyGuidedLM()
    sampling = SamplingConfig(guidance_scale=2.0, top_k=3)
    seqs = all_sequences(4, 4)
    prompt = torch.tensor([3, 1, 2])
    probs = sequence_probs(model, prompt.expand(len(seqs), -1), seqs, sampling)
    config = DecodingConfig(method="mc-sjd", window=3, branches=2, branch_slots=2, branch_length=1)
    counting = CountingModel(model)
    tokens, _ = generate(counting, prompt.expand(N_SAMPLES, -1), decoding=config, sampling=sampling,
                         generator=torch.Generator().manual_seed(11))
    assert counting.tree_calls
    result = chi_square(sequence_counts(tokens, 4), probs)
    assert result.p_value > 1e-3, result
