"""Every TokenSession family as a case of the session-contract tests
(`tests/models/test_session_contract.py`).

A case is a tiny model built from a config (nothing is downloaded), a batch of two
conditions (where conditions are prompts, the first is the shorter and is left-padded in
the batch), and a reference: the model's own uncached forward over each row's unpadded
sequence, row by row. Reference entry t holds the logits that predict generated position t
from the tokens before it (entry 0: the prefill's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import transformers as tf

from mmspec.core.contracts import GuidedLogits
from mmspec.core.layout import TokenLayout


@dataclass
class SessionCase:
    """Attributes:
        model: the TokenModel (`layout()`, `start(condition, guided=, extra_positions=)`).
        condition: the condition of some rows of the batch, `condition([0, 1])` the batch.
        reference: `reference(rows, tokens [b, T(, K)], guided)` -> GuidedLogits `[b, T, (K,) V]`.
        guided: whether the family has unconditional (CFG) rows.
    """

    name: str
    model: Any
    condition: Callable[[list[int]], Any]
    reference: Callable[[list[int], torch.Tensor, bool], GuidedLogits]
    guided: bool
    atol: float = 1e-4

    @property
    def layout(self) -> TokenLayout:
        return self.model.layout()

    def start(self, rows=(0, 1), *, guided: bool | None = None, extra_positions: int = 0):
        guided = self.guided if guided is None else guided
        return self.model.start(self.condition(list(rows)), guided=guided, extra_positions=extra_positions)

    def tokens(self, batch: int = 2, seed: int = 0) -> torch.Tensor:
        return random_tokens(self.layout, batch, seed)


def random_tokens(layout: TokenLayout, batch: int, seed: int) -> torch.Tensor:
    """`[batch, T]` (`[batch, T, K]`) tokens the layout allows, its forced ones where it forces."""
    g = torch.Generator().manual_seed(seed)
    T, K, V = layout.length, layout.tokens_per_step, layout.vocab_size
    allowed = torch.ones(V, dtype=torch.bool) if layout.allowed is None else layout.allowed.cpu()
    weights = allowed.expand(T, V).float()[:, None].expand(T, batch * K, V).reshape(-1, V)
    tokens = torch.multinomial(weights, 1, generator=g).view(T, batch, K).transpose(0, 1)
    if layout.forced is not None:
        forced = layout.forced.cpu().view(T, -1).expand(T, K)
        tokens = torch.where(forced >= 0, forced, tokens)
    return tokens if K > 1 else tokens[..., 0]


def by_row(rows: list[int], tokens: torch.Tensor, guided: bool, one: Callable[[int, torch.Tensor, bool], torch.Tensor]):
    """Stacks `one(row, tokens [1, T], cond)`, the reference logits of one row alone."""
    with torch.no_grad():
        cond = torch.cat([one(r, tokens[i : i + 1], True) for i, r in enumerate(rows)])
        uncond = torch.cat([one(r, tokens[i : i + 1], False) for i, r in enumerate(rows)]) if guided else None
    return GuidedLogits(cond.float(), None if uncond is None else uncond.float())


def sharpen(*weights: torch.Tensor, std: float = 0.5) -> None:
    """Larger than the 0.02 init, so that logits differ by more than float noise."""
    for w in weights:
        torch.nn.init.normal_(w, std=std)


# --- LlamaGen (c2i with grouped-query attention, t2i with padded captions) and video ---------


def llamagen_c2i() -> SessionCase:
    from mmspec.models.networks.llamagen import LlamaGenConfig, LlamaGenGPT

    torch.manual_seed(0)
    model = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=2, n_head=4, n_kv_head=2, vocab_size=32, block_size=16,
                                       num_classes=3)).eval()
    sharpen(model.output.weight)
    labels = torch.tensor([1, 2])
    null = torch.tensor([model.config.num_classes])

    def one(r, tokens, cond):
        return model(tokens, labels[r : r + 1] if cond else null)

    return SessionCase("llamagen-c2i", model, lambda rows: labels[rows], lambda rows, t, g: by_row(rows, t, g, one), True)


def llamagen_t2i() -> SessionCase:
    from mmspec.models.networks.llamagen import CaptionCondition, LlamaGenConfig, LlamaGenGPT

    torch.manual_seed(0)
    model = LlamaGenGPT(LlamaGenConfig(dim=32, n_layer=2, n_head=2, vocab_size=32, block_size=16, model_type="t2i",
                                       caption_dim=12, cls_token_num=5)).eval()
    sharpen(model.output.weight)
    captions = torch.randn(2, 5, 12, generator=torch.Generator().manual_seed(1))
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])  # the first caption is left-padded
    null = model.cls_embedding.uncond_embedding[None]

    def one(r, tokens, cond):  # the original masks the null caption as its caption
        return model(tokens, captions[r : r + 1] if cond else null, mask[r : r + 1])

    return SessionCase("llamagen-t2i", model, lambda rows: CaptionCondition(captions[rows], mask[rows]),
                       lambda rows, t, g: by_row(rows, t, g, one), True)


def video_llamagen() -> SessionCase:
    from mmspec.models.networks.video_llamagen import VideoLlamaGen, VideoLlamaGenConfig

    torch.manual_seed(0)
    model = VideoLlamaGen(VideoLlamaGenConfig(dim=48, n_layer=2, n_head=2, multiple_of=16, vocab_size=32, frames=2,
                                              block_size=18, num_classes=3)).eval()
    sharpen(model.output.weight)
    labels = torch.tensor([0, 2])
    null = torch.tensor([model.config.num_classes])

    def one(r, tokens, cond):
        return model(tokens, labels[r : r + 1] if cond else null)

    return SessionCase("video-llamagen", model, lambda rows: labels[rows], lambda rows, t, g: by_row(rows, t, g, one), True)


def cosmos() -> SessionCase:
    from mmspec.models.networks.cosmos import CosmosAR, CosmosARConfig

    torch.manual_seed(0)
    model = CosmosAR(CosmosARConfig(dim=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden_size=64, vocab_size=32,
                                    latent_shape=[3, 2, 3], max_batch_size=2)).eval()
    sharpen(model.output.weight)
    prefix = torch.randint(32, (2, 6), generator=torch.Generator().manual_seed(1))  # one latent frame given

    def one(r, tokens, cond):  # the whole video forward, read from the last conditioning token on
        return model(torch.cat([prefix[r : r + 1], tokens[:, :-1]], 1))[:, prefix.shape[1] - 1 :]

    return SessionCase("cosmos", model, lambda rows: prefix[rows], lambda rows, t, g: by_row(rows, t, g, one), False)


# --- transformers image generators over DecoderSession: Emu3, Janus, Chameleon (Lumina-mGPT) --


PROMPTS = ["a cat", "red dog blue green"]  # different lengths: the first row is left-padded
NEGATIVES = ["bad ugly", "blurry bad red"]


def emu3() -> SessionCase:
    from mmspec.models.adapters.emu3 import Emu3Condition, Emu3ImageGenerator
    from tests.helpers.tiny_models import EMU3_GRID, emu3_inputs, tiny_emu3

    model, processor = tiny_emu3()
    generator = Emu3ImageGenerator(model, *EMU3_GRID)

    def condition(rows):
        enc = emu3_inputs(processor, [PROMPTS[r] for r in rows])
        neg = emu3_inputs(processor, [NEGATIVES[r] for r in rows])
        return Emu3Condition(enc.input_ids, enc.attention_mask, neg.input_ids, neg.attention_mask)

    def one(r, tokens, cond):
        prompt = emu3_inputs(processor, [PROMPTS[r] if cond else NEGATIVES[r]]).input_ids
        return model(input_ids=torch.cat([prompt, tokens[:, :-1]], 1)).logits[:, prompt.shape[1] - 1 :]

    return SessionCase("emu3", generator, condition, lambda rows, t, g: by_row(rows, t, g, one), True)


def janus() -> SessionCase:
    from mmspec.models.adapters.janus import JanusCondition, JanusImageGenerator
    from tests.helpers.tiny_models import janus_inputs, tiny_janus

    model, processor = tiny_janus()
    generator = JanusImageGenerator(model)

    def condition(rows):
        enc = janus_inputs(processor, [PROMPTS[r] for r in rows])
        return JanusCondition(enc.input_ids, enc.attention_mask)

    def one(r, codes, cond):  # transformers' image mode: codes embedded by the generation aligner, scored by its head
        ids = janus_inputs(processor, [PROMPTS[r]]).input_ids
        ids = ids if cond else generator.unconditional_ids(ids)
        embeds = torch.cat([model.get_input_embeddings()(ids), model.prepare_embeddings_for_image_generation(codes[:, :-1])], 1)
        hidden = model.model.language_model(inputs_embeds=embeds).last_hidden_state
        return model.model.generation_head(hidden)[:, ids.shape[1] - 1 :]

    # its logits reach about 20: float32 sums in another order differ by up to 1.5e-4 on some CPUs
    return SessionCase("janus", generator, condition, lambda rows, t, g: by_row(rows, t, g, one), True, atol=5e-4)


def left_padded(rows: list[torch.Tensor], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), pad, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, P - len(row):], mask[i, P - len(row):] = row, 1
    return ids, mask


def chameleon() -> SessionCase:
    from mmspec.models.adapters.chameleon import ChameleonCondition, ChameleonImageGenerator
    from tests.helpers.lumina import FIXTURE, fixture_model

    reference = torch.load(FIXTURE / "reference.pt", weights_only=True)
    prompts = [reference["prompt_1"], reference["prompt_0"]]  # 6 and 9 tokens
    model = fixture_model()
    generator = ChameleonImageGenerator(model, rows=2, cols=2)
    prefix = torch.tensor([generator.prefix])

    def condition(rows):
        return ChameleonCondition(*left_padded([prompts[r] for r in rows], pad=1))

    def one(r, tokens, cond):  # Lumina's unconditional rows run the image prefix alone
        ids = torch.cat([prompts[r][None], prefix], 1) if cond else prefix
        hidden = model.model(input_ids=torch.cat([ids, tokens[:, :-1]], 1)).last_hidden_state
        return generator.head(hidden)[:, ids.shape[1] - 1 :]

    return SessionCase("chameleon", generator, condition, lambda rows, t, g: by_row(rows, t, g, one), True)


# --- TransformersLM (TransformersSession): Llama, GPT-2; the mesh model's OPT -----------------


def text_lm(family: str) -> SessionCase:
    from mmspec.models.adapters.transformers_lm import TransformersLM

    torch.manual_seed(0)
    if family == "llama":
        lm = tf.LlamaForCausalLM(tf.LlamaConfig(vocab_size=48, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                                num_key_value_heads=2, intermediate_size=64))
    else:  # a position table of exactly the longest prompt + max_new_tokens: scratch positions run past it
        lm = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=48, n_embd=32, n_layer=2, n_head=4, n_positions=16,
                                              bos_token_id=0, eos_token_id=0))
    lm = lm.eval()
    sharpen(lm.get_input_embeddings().weight, lm.get_output_embeddings().weight)
    g = torch.Generator().manual_seed(2)
    prompts = [torch.randint(1, 48, (n,), generator=g) for n in (3, 6)]

    def condition(rows):
        ids, mask = left_padded([prompts[r] for r in rows])
        return {"input_ids": ids, "attention_mask": mask}

    def one(r, tokens, cond):
        ids = prompts[r][None]
        return lm(input_ids=torch.cat([ids, tokens[:, :-1]], 1)).logits[:, ids.shape[1] - 1 :]

    return SessionCase(f"transformers-{family}", TransformersLM(lm, max_new_tokens=10), condition,
                       lambda rows, t, gd: by_row(rows, t, gd, one), False)


def mesh() -> SessionCase:
    from mmspec.models.adapters.mesh_opt import MeshXLModel, mesh_opt_config, mesh_prompts
    from mmspec.tokenizers.mesh import VOCAB_SIZE

    torch.manual_seed(0)
    lm = tf.OPTForCausalLM(mesh_opt_config(num_classes=2, hidden=32, layers=2, heads=2)).eval()
    sharpen(lm.get_input_embeddings().weight, lm.get_output_embeddings().weight)
    model = MeshXLModel(lm, max_faces=1)
    labels = [1, 0]
    offset = VOCAB_SIZE  # class tokens follow MeshXL's ids

    def condition(rows):
        return mesh_prompts([labels[r] for r in rows], len(rows), offset)

    def one(r, tokens, cond):
        ids = mesh_prompts([labels[r]], 1, offset)["input_ids"]
        return lm(input_ids=torch.cat([ids, tokens[:, :-1]], 1)).logits[:, ids.shape[1] - 1 :]

    return SessionCase("mesh-opt", model, condition, lambda rows, t, g: by_row(rows, t, g, one), False)


# --- MusicGen (MusicgenSession): K = 4 codebooks a step -------------------------------------


def musicgen() -> SessionCase:
    from mmspec.models.adapters.musicgen import MusicgenLM

    V, K = 32, 4
    torch.manual_seed(0)
    text = tf.T5Config(vocab_size=50, d_model=16, d_ff=32, num_layers=1, num_heads=2, d_kv=8)
    audio = tf.EncodecConfig(codebook_size=V, hidden_size=8, num_filters=4, num_residual_layers=1, upsampling_ratios=[2, 2],
                             codebook_dim=8, target_bandwidths=[1.5, 3.0], sampling_rate=100, num_lstm_layers=1)
    # a sinusoid table of exactly the start token + 8 steps: scratch positions run past it
    decoder = tf.MusicgenDecoderConfig(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, ffn_dim=64,
                                       num_codebooks=K, max_position_embeddings=9, pad_token_id=V,
                                       decoder_start_token_id=V, bos_token_id=V)
    config = tf.MusicgenConfig(text_encoder=text.to_dict(), audio_encoder=audio.to_dict(), decoder=decoder.to_dict())
    model = tf.MusicgenForConditionalGeneration(config).eval()
    sharpen(*(e.weight for e in model.decoder.model.decoder.embed_tokens), *(h.weight for h in model.decoder.lm_heads))
    lm = MusicgenLM(model, 8)
    texts = [torch.tensor([8, 9, 1]), torch.tensor([5, 6, 7, 1])]

    def condition(rows):  # T5 is padded on the right
        P = max(len(texts[r]) for r in rows)
        ids = torch.zeros(len(rows), P, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for i, r in enumerate(rows):
            ids[i, : len(texts[r])], mask[i, : len(texts[r])] = texts[r], 1
        return {"input_ids": ids, "attention_mask": mask}

    def one(r, tokens, cond):  # MusicGen's null condition: zero text states, nothing attended
        states, mask = lm.condition({"input_ids": texts[r][None]})
        if not cond:
            states, mask = torch.zeros_like(states), torch.zeros_like(mask)
        steps = torch.cat([torch.full((1, 1, K), V), tokens[:, :-1]], 1)  # [1, T, K] after the start token
        T = steps.shape[1]
        out = model.decoder(input_ids=steps.transpose(1, 2).reshape(K, T), encoder_hidden_states=states,
                            encoder_attention_mask=mask).logits
        logits = out.view(1, K, T, V).transpose(1, 2)
        return torch.cat([logits, logits.new_zeros(1, T, K, 1)], -1)  # the pad id's logit is 0

    return SessionCase("musicgen", lm, condition, lambda rows, t, g: by_row(rows, t, g, one), True)


CASES = {
    "llamagen-c2i": llamagen_c2i,
    "llamagen-t2i": llamagen_t2i,
    "video-llamagen": video_llamagen,
    "cosmos": cosmos,
    "emu3": emu3,
    "janus": janus,
    "chameleon": chameleon,
    "transformers-llama": lambda: text_lm("llama"),
    "transformers-gpt2": lambda: text_lm("gpt2"),
    "mesh-opt": mesh,
    "musicgen": musicgen,
}


def cache_rows_as_they_leave(session):
    """Wraps `session.keep_rows` so that each sequence's cache rows are copied when it
    leaves the batch; returns a function that, at the end of the call, gives every
    sequence's (committed mask, keys, values) `[2B, ...]`: its cond row, then its uncond row."""
    cache, keep_rows, B = session.cache, session.keep_rows, session.batch_size
    held, saved = list(range(B)), {}

    def save():
        n = len(held)
        for i, seq in enumerate(held):
            saved[seq] = [(x[i].clone(), x[n + i].clone()) for x in (cache.committed, cache.k.movedim(1, 0), cache.v.movedim(1, 0))]

    def recording(rows):
        save()
        held[:] = [held[i] for i in rows.tolist()]
        keep_rows(rows)

    def result():
        save()
        return [torch.stack([row for seq in range(B) for row in saved[seq][part]]) for part in range(3)]

    session.keep_rows = recording
    return result
