"""`generate_text`: lossless sampling with EOS, transformers' settings and entry points
(GenerationConfig, custom_generate, streamers), one-line errors."""

import pytest
import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers

import mmspec
from mmspec.core.sampling import SamplingConfig
from mmspec.decoding.config import DecodingConfig
from mmspec.metrics.losslessness import all_sequences, chi_square, sequence_counts, sequence_probs
from mmspec.models.adapters.transformers_lm import TransformersLM
from mmspec.pipelines.text import generate_text

EOS = 0


def tiny_lm(vocab_size: int = 6, seed: int = 0):
    torch.manual_seed(seed)
    config = tf.LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                            num_attention_heads=2, bos_token_id=1, eos_token_id=EOS, pad_token_id=EOS)
    model = tf.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # sharper conditionals than a random init, so that drafts are often right
        model.lm_head.weight.mul_(20)
    return model


def stopped(sequences: torch.Tensor) -> torch.Tensor:
    """Each sequence with every position after its first EOS set to EOS, as the output pads it."""
    after = (sequences == EOS).long().cumsum(1) - (sequences == EOS).long() > 0
    return sequences.masked_fill(after, EOS)


@pytest.mark.statistical
@pytest.mark.parametrize("decoding, prompt", [("sjd", (1, 3, 4)), ("mc-sjd+lookup", (1, 3, 4)), ("prompt-lookup", (1, 3, 4)),
                                              ("prompt-lookup", (1, 3, 4, 5, 3, 4, 1, 3))])
def test_sampling_with_eos_top_k_and_temperature_is_lossless(decoding, prompt):
    """Every output of 3 new tokens (EOS ends it, padding after) is drawn as often as the
    model's temperature-0.8, top-4 distribution says: chi-square at a fixed seed. (The
    repetitive prompt gives lookup phrases to copy, so prompt-lookup's hints are taken.)"""
    V, T, n = 6, 3, 6000
    model = tiny_lm(V)
    prompt = torch.tensor([prompt])
    sampling = SamplingConfig(temperature=0.8, top_k=4)
    sequences = all_sequences(V, T)
    probs = sequence_probs(TransformersLM(model, T), {"input_ids": prompt.expand(len(sequences), -1)}, sequences, sampling)
    outputs = stopped(sequences)  # the output each full sequence shows
    index = sequence_counts(outputs, V).nonzero()[:, 0]
    expected = torch.zeros(V**T, dtype=torch.float64).index_add_(0, (outputs * V ** torch.arange(T - 1, -1, -1)).sum(1), probs)

    ids = generate_text(model, prompt.expand(n, -1), decoding=decoding, max_new_tokens=T, do_sample=True, temperature=0.8,
                        top_k=4, generator=torch.Generator().manual_seed(5))
    new = ids[:, prompt.shape[1]:]
    new = torch.cat([new, new.new_full((n, T - new.shape[1]), EOS)], 1)  # all stopped early: pad the rest
    counts = sequence_counts(new, V)
    assert counts[expected == 0].sum() == 0
    assert chi_square(counts[index], expected[index]).p_value > 1e-3


@pytest.mark.statistical
def test_chi_square_catches_a_wrong_temperature():
    """The same test fails when the samples come from another temperature."""
    V, T, n = 6, 3, 6000
    model = tiny_lm(V)
    prompt = torch.tensor([[1, 3, 4]])
    sequences = all_sequences(V, T)
    probs = sequence_probs(TransformersLM(model, T), {"input_ids": prompt.expand(len(sequences), -1)}, sequences,
                           SamplingConfig(temperature=0.8, top_k=4))
    outputs = stopped(sequences)
    expected = torch.zeros(V**T, dtype=torch.float64).index_add_(0, (outputs * V ** torch.arange(T - 1, -1, -1)).sum(1), probs)
    ids = generate_text(model, prompt.expand(n, -1), decoding="mc-sjd", max_new_tokens=T, do_sample=True, temperature=1.2,
                        top_k=4, generator=torch.Generator().manual_seed(5))
    new = torch.cat([ids[:, 3:], ids.new_full((n, T - ids.shape[1] + 3), EOS)], 1)
    index = expected.nonzero()[:, 0]
    assert chi_square(sequence_counts(new, V)[index], expected[index]).p_value < 1e-3


def test_generation_config_and_processors_match_generate():
    """Settings from a GenerationConfig, a repetition penalty and a no-repeat n-gram ban
    give `model.generate`'s greedy output."""
    model = tiny_lm(32).double()
    prompt = torch.tensor([[1, 5, 9, 5, 9, 7]])
    config = tf.GenerationConfig(max_new_tokens=16, do_sample=False, repetition_penalty=1.3, no_repeat_ngram_size=2,
                                 eos_token_id=EOS, pad_token_id=EOS)
    ref = model.generate(prompt, generation_config=config)
    assert torch.equal(generate_text(model, prompt, generation_config=config, decoding="mc-sjd+lookup"), ref)
    for branched in ("mc-sjd", "keyed"):  # branch nodes score with their own history too
        decoding = DecodingConfig.from_name(branched, branches=3, branch_slots=4)
        assert torch.equal(generate_text(model, prompt, generation_config=config, decoding=decoding), ref)
    # a keyword overrides the config, as in generate
    ref = model.generate(prompt, generation_config=config, repetition_penalty=1.0)
    assert torch.equal(generate_text(model, prompt, generation_config=config, repetition_penalty=1.0), ref)


def successor_lm(cycle: list[int], vocab_size: int = 32):
    """A one-layer Llama whose next token depends on the current one only: the successor
    in `cycle` (attention and MLP zeroed, one-hot embeddings, a permutation head)."""
    config = tf.LlamaConfig(vocab_size=vocab_size, hidden_size=vocab_size, intermediate_size=8, num_hidden_layers=1,
                            num_attention_heads=1, tie_word_embeddings=False, eos_token_id=None, bos_token_id=None)
    model = tf.LlamaForCausalLM(config).double().eval()
    with torch.no_grad():
        model.model.layers[0].self_attn.o_proj.weight.zero_()
        model.model.layers[0].mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.copy_(torch.eye(vocab_size))
        head = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
        for current, following in zip(cycle, cycle[1:] + cycle[:1]):
            head[following, current] = 10.0
        model.lm_head.weight.copy_(head)
    return model


def test_prompt_lookup_commits_a_repeated_phrase_in_few_forwards():
    """Text that repeats its prompt: prompt-lookup drafts the whole phrase at every forward
    and commits a window at a time; Jacobi drafts (the last forward's predictions, made
    after the rejected token) need several forwards to catch up."""
    cycle = [5, 9, 7, 3, 11, 13]
    model = successor_lm(cycle)
    prompt = torch.tensor([[1] + cycle * 2])
    ref = model.generate(prompt, max_new_tokens=32, do_sample=False)
    forwards = {}
    for decoding in ("prompt-lookup", "mc-sjd"):
        out, stats = generate_text(model, prompt, decoding=decoding, max_new_tokens=32, do_sample=False, return_stats=True)
        assert torch.equal(out, ref)
        forwards[decoding] = stats.forward_passes
    assert forwards["prompt-lookup"] <= 3 < forwards["mc-sjd"]


def test_prompt_lookup_takes_the_models_words_where_the_text_changes_its_example():
    """The prompt's example says 8 and 14 where the model says 7 and 13 (it goes on after
    8 and 14 as after 7 and 13, as a captioner goes on after another colour word). Lookup
    drafts the example; the last forward's predictions replace its changed words while
    the window follows the drafts that forward saw (without them, 6 forwards)."""
    cycle = [5, 9, 7, 3, 11, 13]
    model = successor_lm(cycle)
    with torch.no_grad():
        model.lm_head.weight[3, 8] = model.lm_head.weight[5, 14] = 10.0
    prompt = torch.tensor([[1] + [5, 9, 8, 3, 11, 14] * 2])
    ref = model.generate(prompt, max_new_tokens=32, do_sample=False)
    out, stats = generate_text(model, prompt, decoding="prompt-lookup", max_new_tokens=32, do_sample=False, return_stats=True)
    assert torch.equal(out, ref)
    assert stats.forward_passes <= 4


def mmspec_is_installed() -> bool:
    import importlib.metadata

    try:
        importlib.metadata.version("mmspec")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_custom_generate_folder_runs_mmspec_inside_model_generate():
    if not mmspec_is_installed():  # asked when the test runs: an earlier test of the suite may install it
        pytest.skip("transformers runs a custom_generate folder only where its requirements (mmspec) are installed")
    model = tiny_lm(32).double()
    prompt = torch.tensor([[1, 5, 9, 5, 9, 7], [1, 2, 3, 4, 5, 6]])
    direct, stats = generate_text(model, prompt, decoding="mc-sjd", max_new_tokens=10, do_sample=False, return_stats=True)
    via_transformers = model.generate(prompt, custom_generate=mmspec.CUSTOM_GENERATE, trust_remote_code=True,
                                      decoding="mc-sjd", max_new_tokens=10, do_sample=False)
    assert torch.equal(via_transformers, direct)
    assert torch.equal(direct, model.generate(prompt, max_new_tokens=10, do_sample=False))
    with pytest.raises(ValueError, match="does not take assistant_model"):
        model.generate(prompt, custom_generate=mmspec.CUSTOM_GENERATE, trust_remote_code=True, assistant_model=model)


def word_tokenizer(vocab_size: int) -> tf.PreTrainedTokenizerFast:
    words = {f"w{i}": i for i in range(vocab_size)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w2"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tf.PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="w0", pad_token="w0")


def test_streamers_receive_the_committed_tokens_in_order():
    model = tiny_lm(32)
    prompt = torch.tensor([[1, 5, 9, 5, 9, 7]])
    puts = []

    class Recorder(tf.generation.BaseStreamer):
        def put(self, value):
            puts.append(value.tolist())

        def end(self):
            puts.append("end")

    ids = generate_text(model, prompt, decoding="mc-sjd+lookup", max_new_tokens=12, do_sample=True,
                        generator=torch.Generator().manual_seed(0), streamer=Recorder())
    assert puts[0] == prompt.tolist() and puts[-1] == "end"
    assert sum(puts[1:-1], []) == ids[0, 6:].tolist()

    tokenizer = word_tokenizer(32)
    streamer = tf.TextIteratorStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True)
    ids = generate_text(model, prompt, decoding="mc-sjd", max_new_tokens=12, do_sample=True,
                        generator=torch.Generator().manual_seed(0), streamer=streamer)
    text = "".join(streamer)
    assert text.split() == tokenizer.decode(ids[0, 6:], skip_special_tokens=True).split()


@pytest.mark.parametrize(
    "call, message",
    [
        (dict(input_ids=torch.zeros(1, 0, dtype=torch.long)), "input_ids must be a non-empty"),
        (dict(input_ids=torch.tensor([[1, 2]]), attention_mask=torch.tensor([[0, 0]])), "at least one token"),
        (dict(input_ids=torch.tensor([[1, 2]]), max_new_tokens=0), "max_new_tokens must be a whole number >= 1, got 0"),
        (dict(input_ids=torch.tensor([[1, 2]]), decoding="zipar+mc-sjd"), "text is one line"),
        (dict(input_ids=torch.tensor([[1, 2]]), decoding="mc-sjd+gsd"), "text decoding is exact"),
        (dict(input_ids=torch.tensor([[1, 2]]), decoding="mc-sjd+above"), "copies along image axes"),
        (dict(input_ids=torch.tensor([[1, 2]]), decoding="beam"), "unknown decoding 'beam'"),
        (dict(input_ids=torch.tensor([[1, 2]]), num_beams=4), "does not implement num_beams=4"),
        (dict(input_ids=torch.tensor([[1, 2]]), colour="red"), "does not take colour"),
        (dict(input_ids=torch.tensor([[1, 2], [3, 4]]), streamer=object()), "a streamer shows one sequence"),
    ],
)
def test_bad_input_gets_a_one_line_error(call, message):
    with pytest.raises(ValueError, match=message) as err:
        generate_text(tiny_lm(32), **call)
    assert "\n" not in str(err.value)
