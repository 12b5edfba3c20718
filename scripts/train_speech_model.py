"""Trains the shipped speech model on one CPU thread and exports it to mmspec/assets/speech/.

One command, reproducible from a seed, in stages that each save to the work directory
and resume from there when the command is rerun:

1. `clips`: espeak-ng speech of the ten digits (`mmspec.datasets.spoken_digits`), train
   and held-out splits, generated in chunks and cached (a rerun continues the cache).
2. `codec`: the residual-VQ mel codec (`mmspec.tokenizers.audio_codec`), residual k-means
   on the training clips' log-mel frames.
3. `classifier`: the judge (`mmspec.metrics.spoken_words`), a log-mel CNN trained on the
   real clips, with gain, noise and time-shift augmentation.
4. `lm`: a MusicGen decoder (`MusicgenForCausalLM`, transformers' own class) over the
   codec's K codebooks under MusicGen's delay pattern, cross-attending to a word
   embedding (`WordCondition`); the word is replaced by MusicGen's null condition (zero
   states, nothing to attend) with probability `NULL_WORD_PROB`, for classifier-free
   guidance.

Then `export` writes a saved `SpeechPipeline` to `--assets`.

    PYTHONPATH=. python scripts/train_speech_model.py            # or rerun to resume

To continue a decoder (`--init-from`), run in a copy of the work folder its codec was
fitted in, without its `lm.pt` (the codes must be that codec's; docs/audio.md has the
shipped model's commands).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

if not __package__:  # run as `python scripts/train_speech_model.py`: as with PYTHONPATH=., the repository root
    sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
import transformers as tf

from mmspec.assets import SPEECH_ASSETS
from mmspec.datasets.spoken_digits import CLIP_SAMPLES, WORDS, load_split
from mmspec.metrics.spoken_words import WordClassifier, WordClassifierConfig
from mmspec.models.adapters.musicgen import WordCondition, delay_pattern
from mmspec.tokenizers.audio_codec import MelCodec, MelCodecConfig
from scripts._training import Stage, cached_chunks, script_parser, start, train_classifier_stage

CODEC_CONFIG = MelCodecConfig()
FRAMES = 48  # codec frames of a clip
DECODER_CONFIG = tf.MusicgenDecoderConfig(
    vocab_size=CODEC_CONFIG.codebook_size, num_codebooks=CODEC_CONFIG.codebooks, hidden_size=256, num_hidden_layers=4,
    num_attention_heads=8, ffn_dim=1024, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
    activation_dropout=0.0, layerdrop=0.0, pad_token_id=CODEC_CONFIG.codebook_size,
    bos_token_id=CODEC_CONFIG.codebook_size, decoder_start_token_id=CODEC_CONFIG.codebook_size,
)
TRAIN_CLIPS, HELDOUT_CLIPS, CLIP_CHUNK = 2000, 300, 250
LM_CLIPS = 40_000  # the decoder's clips: with the first 2000 alone it memorised them (held-out loss 10x training)
LM_STEPS, LM_BATCH, LM_LR, NULL_WORD_PROB = 6000, 32, 2e-3, 0.1
CLF_STEPS, CLF_BATCH, CLF_LR = 400, 32, 2e-3
INPUT_NOISE = (0.05, 0.4, 0.4, 0.4)  # per codebook: see noisy_inputs and docs/audio.md
NOISE_SOURCES = ("uniform", "model")
NOISE_SOURCE = "uniform"
DEFAULT_SAMPLING = {"guidance_scale": 3.0}  # MusicGen's own recipe: CFG 3, temperature 1


def cached_clips(work: Path, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first `n` clips of `split`, cached in `work/clips-<split>.pt`."""
    return cached_chunks(work / f"clips-{split}.pt", n, "audio", torch.zeros(0, CLIP_SAMPLES),
                         lambda start, count: load_split(split, count, start=start), CLIP_CHUNK)


def cached_codes(work: Path, codec: MelCodec, n: int,
                 spoken: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Codes `[n, K, FRAMES]` of the first `n` training clips, cached in `work/codes-train.pt`
    (codes only: the clips themselves would take 68 KB each). `spoken`: the first training
    clips and labels, already made, encoded instead of spoken again."""
    def make(start: int, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        if spoken is not None and start + count <= len(spoken[1]):
            audio, labels = spoken[0][start : start + count], spoken[1][start : start + count]
        else:
            audio, labels = load_split("train", count, start=start)
        return codec.encode(audio).to(torch.int16), labels

    codes, labels = cached_chunks(work / "codes-train.pt", n, "codes",
                                  torch.zeros(0, codec.config.codebooks, FRAMES, dtype=torch.int16), make, CLIP_CHUNK)
    return codes.long(), labels


def fit_codec(work: Path, audio: torch.Tensor, seed: int) -> MelCodec:
    folder = work / "codec"
    if (folder / "model.safetensors").exists():
        return MelCodec.from_pretrained(folder)
    codec = MelCodec.fit(audio, CODEC_CONFIG, torch.Generator().manual_seed(seed))
    codec.save_pretrained(folder)
    return codec


def delayed_steps(codes: torch.Tensor) -> torch.Tensor:
    """Codes `[B, K, F]` -> MusicGen's steps `[B, F + K - 1, K]`: frame f of codebook k at
    step f + k, the pad id in the pattern's corners."""
    B, K, Fr = codes.shape
    pad = DECODER_CONFIG.pad_token_id
    steps = torch.full((B, Fr + K - 1, K), pad, dtype=torch.long)
    for k in range(K):
        steps[:, k : k + Fr, k] = codes[:, k]
    assert torch.equal(steps[0] == pad, delay_pattern(Fr + K - 1, K, pad) >= 0)
    return steps


class SpeechLM(torch.nn.Module):
    """What the `lm` stage trains: the decoder and its word table together."""

    def __init__(self):
        super().__init__()
        self.decoder = tf.MusicgenForCausalLM(DECODER_CONFIG)
        self.condition = WordCondition(list(WORDS), DECODER_CONFIG.hidden_size)


def noisy_inputs(steps: torch.Tensor, shares: tuple[float, ...], generator: torch.Generator,
                 replacements: torch.Tensor | None = None) -> torch.Tensor:
    """`steps [B, T, K]` with a share `shares[k]` of codebook k's codes replaced (pad slots
    kept) by `replacements [B, T, K]`, default uniformly random codes.

    Trained on such inputs, the decoder leans less on the exact codes of the step before,
    so a step's distribution changes less when Jacobi decoding redraws its predecessor.
    """
    pad = DECODER_CONFIG.pad_token_id
    hit = torch.rand(steps.shape, generator=generator) < torch.tensor(shares)
    if replacements is None:
        replacements = torch.randint(DECODER_CONFIG.vocab_size, steps.shape, generator=generator)
    return torch.where(hit & (steps != pad), replacements, steps)


@torch.no_grad()
def redrawn_codes(lm: SpeechLM, steps: torch.Tensor, words: torch.Tensor, null: torch.Tensor,
                  generator: torch.Generator) -> torch.Tensor:
    """For every slot of `steps [B, T, K]`, a code drawn from the decoder's own distribution
    there given the true codes before it: what Jacobi decoding puts in a slot it redraws.

    As input noise these teach the decoder to be indifferent to which of its own plausible
    codes came before, not to codes it would never draw (`--noise-source model`).
    """
    probs = lm_logits(lm, steps, words, null).float().softmax(-1)
    return torch.multinomial(probs.view(-1, probs.shape[-1]), 1, generator=generator).view(steps.shape)


def lm_logits(lm: SpeechLM, inputs: torch.Tensor, words: torch.Tensor, null: torch.Tensor) -> torch.Tensor:
    """Logits `[B, T, K, vocab]` for every slot, teacher-forced after the start token on
    `inputs [B, T, K]`; `null [B]` rows get MusicGen's null condition."""
    B, T, K = inputs.shape
    pad = DECODER_CONFIG.pad_token_id
    inputs = torch.cat([torch.full((B, 1, K), pad), inputs[:, :-1]], 1)  # start token first
    states, mask = lm.condition(words)
    states = states * (~null)[:, None, None]
    mask = mask * (~null)[:, None]
    return lm.decoder(input_ids=inputs.permute(0, 2, 1).reshape(B * K, T), encoder_hidden_states=states,
                      encoder_attention_mask=mask).logits.view(B, K, T, -1).permute(0, 2, 1, 3)


def lm_loss(lm: SpeechLM, steps: torch.Tensor, words: torch.Tensor, null: torch.Tensor,
            inputs: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of every unforced slot of `steps [B, T, K]`, teacher-forced on `inputs`
    (default: `steps` themselves)."""
    logits = lm_logits(lm, steps if inputs is None else inputs, words, null)
    targets = steps.masked_fill(steps == DECODER_CONFIG.pad_token_id, -100)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), ignore_index=-100)


def train_lm(work: Path, seed: int, steps_data: torch.Tensor, words: torch.Tensor, total: int,
             input_noise: tuple[float, ...] = INPUT_NOISE, noise_source: str = NOISE_SOURCE, lr: float = LM_LR,
             init=None) -> SpeechLM:
    """`input_noise`: per codebook, the share of teacher-forced input codes replaced
    (`noisy_inputs`) by uniformly random codes (`noise_source` "uniform") or by the
    decoder's own redraws (`redrawn_codes`, "model"). `init`: a saved `SpeechPipeline`
    whose decoder and word table the stage starts from (a checkpoint in `work` wins)."""
    torch.manual_seed(seed + 1)
    lm = SpeechLM()
    if init is not None:
        lm.decoder.load_state_dict(init.decoder.state_dict())
        lm.condition.load_state_dict(init.condition.state_dict())
    stage = Stage("lm", work, lm, lr, seed + 1, weight_decay=0.05)

    def step():
        idx = torch.randint(len(steps_data), (LM_BATCH,), generator=stage.generator)
        null = torch.rand(LM_BATCH, generator=stage.generator) < NULL_WORD_PROB
        steps, batch_words = steps_data[idx], words[idx]
        redrawn = redrawn_codes(lm, steps, batch_words, null, stage.generator) if noise_source == "model" else None
        loss = lm_loss(lm, steps, batch_words, null, noisy_inputs(steps, input_noise, stage.generator, redrawn))
        stage.update(loss, max_grad_norm=1.0)
        return {"loss": loss.item()}

    if stage.step < total:
        stage.run(total, lr, warmup=100, step_fn=step)
    return lm.eval()


def augment(audio: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Word-preserving changes of `audio [B, samples]`: a shift of up to 0.1 s, a gain, and
    white noise up to 1% of full scale."""
    B, S = audio.shape
    shifts = torch.randint(-S // 8, S // 8 + 1, (B,), generator=generator).tolist()
    audio = torch.stack([torch.roll(a, s) for a, s in zip(audio, shifts)])
    gain = 0.3 + 0.7 * torch.rand(B, 1, generator=generator)
    noise = 0.01 * torch.rand(B, 1, generator=generator) * torch.randn(B, S, generator=generator)
    return audio * gain + noise


def train_classifier(work: Path, seed: int, audio: torch.Tensor, labels: torch.Tensor) -> WordClassifier:
    torch.manual_seed(seed + 2)
    clf = WordClassifier(WordClassifierConfig(num_classes=len(WORDS)))
    train_classifier_stage(work, clf, seed + 2, CLF_LR, CLF_STEPS, CLF_BATCH, lambda: (audio, labels), augment)
    return clf.eval()


@torch.no_grad()
def accuracy(clf: WordClassifier, audio: torch.Tensor, labels: torch.Tensor) -> float:
    return float((torch.cat([clf(a).argmax(-1) for a in audio.split(100)]) == labels).float().mean())


def export(assets: Path, lm: SpeechLM, codec: MelCodec, clf: WordClassifier, seed: int) -> None:
    from mmspec.pipelines.audio import SpeechPipeline

    pipe = SpeechPipeline(lm.decoder, lm.condition, codec, classifier=clf, frames=FRAMES, default_sampling=DEFAULT_SAMPLING,
                          metadata={"training": {"script": "scripts/train_speech_model.py", "seed": seed,
                                                 "dataset": "mmspec.datasets.spoken_digits"}})
    pipe.save_pretrained(assets)


def main() -> None:
    parser = script_parser(__doc__, "outputs/train-speech", SPEECH_ASSETS, threads=1)
    parser.add_argument("--lm-steps", type=int, default=LM_STEPS, help=f"decoder training steps (default {LM_STEPS})")
    parser.add_argument("--train-clips", type=int, default=TRAIN_CLIPS,
                        help=f"clips for the codec and the classifier (default {TRAIN_CLIPS})")
    parser.add_argument("--input-noise", type=float, nargs="+", default=INPUT_NOISE, metavar="SHARE",
                        help=f"per codebook, the share of the decoder's training inputs replaced (default {INPUT_NOISE})")
    parser.add_argument("--noise-source", choices=NOISE_SOURCES, default=NOISE_SOURCE,
                        help="what replaces them: uniformly random codes, or the decoder's own redraws given the "
                             f"true codes before (default {NOISE_SOURCE})")
    parser.add_argument("--lm-clips", type=int, default=LM_CLIPS, help=f"clips for the decoder (default {LM_CLIPS})")
    parser.add_argument("--lr", type=float, default=LM_LR, help=f"the decoder's peak learning rate (default {LM_LR})")
    parser.add_argument("--init-from", metavar="FOLDER",
                        help="continue a saved speech pipeline: its decoder and word table start the lm stage (fresh "
                             "optimizer and schedule); its codec must be the one this work folder fits")
    args = parser.parse_args()
    if len(args.input_noise) != CODEC_CONFIG.codebooks or not all(0 <= x <= 1 for x in args.input_noise):
        parser.error(f"--input-noise takes {CODEC_CONFIG.codebooks} shares in [0, 1], got {args.input_noise}")
    if args.lm_steps < 1 or args.train_clips < 10 or args.lm_clips < 10:
        parser.error(f"--lm-steps must be >= 1 and --train-clips, --lm-clips >= 10, "
                     f"got {args.lm_steps}, {args.train_clips} and {args.lm_clips}")
    work = start(args)
    started = time.perf_counter()
    audio, labels = cached_clips(work, "train", args.train_clips)
    held_audio, held_labels = cached_clips(work, "heldout", HELDOUT_CLIPS)
    codec = fit_codec(work, audio, args.seed)
    clf = train_classifier(work, args.seed, audio, labels)
    print(f"classifier accuracy: held-out clips {accuracy(clf, held_audio, held_labels):.3f}, "
          f"through the codec {accuracy(clf, codec.decode(codec.encode(held_audio[:200])), held_labels[:200]):.3f}")
    codes, code_labels = cached_codes(work, codec, args.lm_clips, (audio, labels))
    init = None
    if args.init_from:
        from mmspec.pipelines.audio import SpeechPipeline

        init = SpeechPipeline.from_pretrained(args.init_from)
        if not torch.equal(init.codec.codebook, codec.codebook):
            parser.error(f"--init-from {args.init_from}: its codec is not the one fitted in {work}; its decoder speaks other codes")
    lm = train_lm(work, args.seed, delayed_steps(codes), code_labels, args.lm_steps, tuple(args.input_noise),
                  args.noise_source, args.lr, init)
    with torch.no_grad():
        no_null = torch.zeros(HELDOUT_CLIPS, dtype=torch.bool)
        losses = [lm_loss(lm, delayed_steps(c), y, no_null).item()
                  for c, y in ((codes[:HELDOUT_CLIPS], code_labels[:HELDOUT_CLIPS]), (codec.encode(held_audio), held_labels))]
    print("decoder loss (nats a code): training clips {:.3f}, held-out clips {:.3f}".format(*losses))
    export(Path(args.assets), lm, codec, clf, args.seed)
    print(f"exported to {args.assets} after {time.perf_counter() - started:.0f} s in this run")


if __name__ == "__main__":
    main()
