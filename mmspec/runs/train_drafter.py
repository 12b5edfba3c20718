"""Training a draft head (`mmspec.models.networks.draft_head`) for a pipeline's frozen model,
online on the model's own samples: the distribution a head must predict is the one the
model samples from, guidance included.

Each round draws `samples_per_round` sequences from the pipeline (AR, its default sampling,
random classes, seeds from the run's seed and the round) into a pool, then takes
`steps_per_round` optimiser steps on batches from the pool. A step runs the frozen model
teacher-forced on the batch, conditional and null-class rows, for the hidden states of the
head's `layers` and the guided distribution p of every position; the head, fed each token
with the hidden state that predicted it (plus a little noise, as EAGLE does, so that a
roll-out on its own features stays on course), is trained by EAGLE's recipe: smooth-L1
regression of its feature to the model's next hidden state (one layer read) plus the soft
cross-entropy of its guided distribution q against p. A head that reads rejected drafts
(`DraftHeadConfig.reads_rejected`) is trained the same way on its front queries too: at
every position, a stand-in for a draft rejected there (another token drawn from p) and the
model's hidden state on it (`target_batch`), as the engine feeds them at the commit front
after a rejection. Over the last quarter of the steps the acceptance loss
1 - sum(min(p, q)) is added: a draft's chance to be accepted.

Everything lives in `out`: `state.pt` (head, optimiser, pool, step; written every minute,
loaded with `weights_only=True`), so a rerun resumes, and `drafter/` the trained head as a
pipeline component (`config.json`, `model.safetensors`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from mmspec.core.contracts import CallTree, Rejected
from mmspec.core.sampling import classifier_free_guidance
from mmspec.io.files import atomic_write
from mmspec.models.networks.draft_head import DraftHead, DraftHeadConfig
from mmspec.models.networks.llamagen import apply_rope, attention_bias
from mmspec.pipelines.llamagen import LlamaGenPipeline
from mmspec.pipelines.loading import load_module, save_module

SAVE_EVERY_S = 60


def check_trainable(pipe) -> None:
    """Refuses, in one line, a pipeline whose model a draft head cannot be trained for."""
    if not isinstance(pipe, LlamaGenPipeline) or pipe.condition_kind != "class":
        raise ValueError(f"a draft head is trained for a class-conditional LlamaGen pipeline (the shipped image model, a "
                         f"LlamaGen c2i checkpoint), got a {type(pipe).__name__}"
                         + ("" if not isinstance(pipe, LlamaGenPipeline) else " of prompts"))


def target_batch(model, tokens: torch.Tensor, labels: torch.Tensor, layers: list[int], scale: float, temperature: float,
                 rejections: int = 0, generator: torch.Generator | None = None):
    """The frozen model on `tokens [B, T]`: hidden states `[2B, T, D]` (conditional rows,
    then null-class rows; row t predicted token t) and the guided log-probabilities
    `[B, T, V]` (row t: position t). With `rejections` > 0, also stand-ins for drafts
    rejected at that many random positions `[B, S]` per row: another token drawn from p
    there, and the model's hidden states on it with the true tokens before (`Rejected`,
    unfused), as `(hidden, log_p, rejected, positions)`. One cached forward of the tokens,
    then one of the stand-ins under tree attention, each seeing the cache before its position."""
    B, T = tokens.shape
    with torch.no_grad():
        session = model.start(labels, guided=True, extra_positions=max(rejections, 1))
        session.hidden_layers = layers
        first = session.prefill_logits()
        device = tokens.device
        before = torch.arange(T - 1, device=device).expand(B, -1)
        rest = session.forward(tokens[:, :-1], before)
        session.commit(before, torch.ones_like(before, dtype=torch.bool))
        cond, uncond = torch.cat([first.cond, rest.cond], 1), torch.cat([first.uncond, rest.uncond], 1)
        hidden = torch.cat([first.hidden, rest.hidden], 1)
        guided = classifier_free_guidance(uncond, cond, scale) if scale != 1 else cond
        log_p = (guided / temperature).log_softmax(-1)
        if not rejections:
            return hidden, log_p
        rejections = min(rejections, T)
        positions = torch.rand(B, T, generator=generator).argsort(1)[:, :rejections].sort(1).values.to(device)
        p = log_p.exp().gather(1, positions[..., None].expand(-1, -1, log_p.shape[-1])) + 1e-12
        p.scatter_(-1, tokens.gather(1, positions)[..., None], 0.0)  # a rejected draft is another token
        drafts = torch.multinomial(p.flatten(0, 1).float().cpu(), 1, generator=generator).view(B, rejections).to(device)
        alone = CallTree(acts_as=positions, visible=torch.eye(rejections, dtype=torch.bool, device=device).expand(B, -1, -1))
        on_drafts = session.forward(drafts, T + torch.arange(rejections, device=device).expand(B, -1), tree=alone).hidden
    return hidden, log_p, Rejected(torch.cat([drafts, drafts]), on_drafts), positions


def guided_log_probs(head: DraftHead, outputs: torch.Tensor, scale: float, temperature: float) -> torch.Tensor:
    """The head's guided log q `[B, n, V]` from its output features `[2B, n, dim]`."""
    logits = head.read_out(outputs)
    B = len(logits) // 2
    guided = classifier_free_guidance(logits[B:], logits[:B], scale) if scale != 1 else logits[:B]
    return (guided / temperature).log_softmax(-1)


def head_loss(head: DraftHead, tokens: torch.Tensor, hidden: torch.Tensor, log_p: torch.Tensor, rejected: Rejected | None,
              positions: torch.Tensor | None, scale: float, temperature: float, acceptance_weight: float,
              feature_noise: float, generator: torch.Generator) -> tuple[torch.Tensor, dict]:
    """EAGLE's loss (see the module docstring) on the head's plain outputs and, when it reads
    them, on its front queries with the drafts rejected at `positions [B, S]` (fused
    features); the mean acceptance sum(min(p, q)) of each at the position after its input."""
    rows = torch.cat([tokens, tokens])
    features = head.fused(hidden)
    noise = torch.randn(features.shape, generator=generator).to(features.device, features.dtype)
    noisy = features + feature_noise * features.detach().std() * noise
    # input t: token t and what predicted it -> position t + 1
    both = None if positions is None else torch.cat([positions, positions])
    _, plain, front = front_outputs(head, rows, noisy, rejected, both)
    T = tokens.shape[1]
    outputs = [("plain", plain[:, :-1], torch.arange(1, T, device=tokens.device).expand(len(tokens), -1))]
    if rejected is not None:
        outputs.append(("front", front, positions + 1))
    loss, acceptance = 0.0, {}
    for name, out, predicted in outputs:
        keep = (predicted < T).float()  # a front at the last position predicts nothing
        predicted = predicted.clamp(max=T - 1)
        p = log_p.gather(1, predicted[..., None].expand(-1, -1, log_p.shape[-1])).exp()
        log_q = guided_log_probs(head, out, scale, temperature)
        loss = loss - ((p * log_q).sum(-1) * keep).sum() / keep.sum()
        if len(head.layers) == 1:  # the feature stands for the model's next hidden state
            rows_predicted = torch.cat([predicted, predicted])
            target = hidden.gather(1, rows_predicted[..., None].expand(-1, -1, hidden.shape[-1]))
            error = F.smooth_l1_loss(out, target, reduction="none").mean(-1)
            loss = loss + (error * torch.cat([keep, keep])).sum() / (2 * keep.sum())
        accepted = (torch.minimum(p, log_q.exp()).sum(-1) * keep).sum() / keep.sum()
        if acceptance_weight:
            loss = loss + acceptance_weight * (1 - accepted)
        acceptance[name] = float(accepted.detach())
    return loss, acceptance


def draw_samples(pipe, count: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` AR samples of the pipeline at its default sampling: tokens `[count, T]`, labels `[count]`."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, pipe.transformer.config.num_classes, (count,), generator=generator)
    out = pipe(class_labels=labels.tolist(), decoding="ar", output_type="tokens", generator=generator)
    return out.tokens.reshape(count, -1).cpu(), labels


def train_drafter(pipe, out: str | Path, *, steps: int = 3000, batch_size: int = 16, samples_per_round: int = 32,
                  steps_per_round: int = 16, pool_size: int = 4096, lr: float = 1e-3, layers=(-1,), seed: int = 0,
                  feature_noise: float = 0.1, acceptance_weight: float = 1.0, rejections: int = 64,
                  progress: Callable[[str], None] = print) -> DraftHead:
    """Trains (or resumes training) a draft head for `pipe`'s model; see the module docstring.
    Returns the head, bound to the model, also saved to `out/drafter`."""
    check_trainable(pipe)
    if steps < 1 or batch_size < 1 or samples_per_round < 1 or steps_per_round < 1:
        raise ValueError("steps, batch_size, samples_per_round and steps_per_round must be at least 1")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = pipe.transformer.eval().requires_grad_(False)
    device = model.output.weight.device  # the head trains where the model is (float32)
    head = DraftHead.for_target(model, layers).to(device)
    opt = torch.optim.AdamW(head.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    sampling = pipe.default_sampling
    scale, temperature = float(sampling["guidance_scale"]), float(sampling["temperature"]) or 1.0
    state_path = out / "state.pt"
    step, pool_tokens, pool_labels, rounds = 0, None, None, 0
    generator = torch.Generator().manual_seed(seed)
    if state_path.exists():
        state = torch.load(state_path, weights_only=True, map_location="cpu")
        if list(state["layers"]) != list(head.layers):
            raise ValueError(f"{state_path} trains a head on layers {list(state['layers'])}, not {list(head.layers)}; "
                             "use another --out")
        head.load_state_dict(state["head"])
        opt.load_state_dict(state["opt"])
        generator.set_state(state["generator"])
        step, rounds = int(state["step"]), int(state["rounds"])
        pool_tokens, pool_labels = state["pool_tokens"], state["pool_labels"]
        progress(f"resumed {state_path} at step {step} of {steps}, {len(pool_labels)} samples")

    def save() -> None:
        state = {"head": head.state_dict(), "opt": opt.state_dict(), "generator": generator.get_state(), "step": step,
                 "rounds": rounds, "layers": torch.tensor(head.layers), "pool_tokens": pool_tokens, "pool_labels": pool_labels}
        atomic_write(state_path, lambda tmp: torch.save(state, tmp))

    start, saved_at, seen = time.monotonic(), time.monotonic(), []
    while step < steps:
        if rounds * steps_per_round <= step:
            tokens, labels = draw_samples(pipe, samples_per_round, seed * 1_000_003 + rounds)
            pool_tokens = tokens if pool_tokens is None else torch.cat([pool_tokens, tokens])[-pool_size:]
            pool_labels = labels if pool_labels is None else torch.cat([pool_labels, labels])[-pool_size:]
            rounds += 1
        pick = torch.randint(0, len(pool_labels), (batch_size,), generator=generator)
        tokens, labels = pool_tokens[pick].to(device), pool_labels[pick].to(device)
        rejected = positions = None
        if head.config.reads_rejected:
            hidden, log_p, rejected, positions = target_batch(model, tokens, labels, head.layers, scale, temperature,
                                                              rejections, generator)
            rejected.features = head.fused(rejected.features)
        else:
            hidden, log_p = target_batch(model, tokens, labels, head.layers, scale, temperature)
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 100) * (0.1 + 0.9 * (1 - step / steps))
        late = step >= steps * 3 // 4
        loss, acceptance = head_loss(head, tokens, hidden, log_p, rejected, positions, scale, temperature,
                                     acceptance_weight if late else 0.0, feature_noise, generator)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        step += 1
        seen.append(acceptance)
        if step % 50 == 0 or step == steps:
            elapsed = time.monotonic() - start
            means = "  ".join(f"accept ({name}) {sum(a[name] for a in seen) / len(seen):.3f}" for name in seen[0])
            progress(f"step {step}/{steps}  loss {float(loss.detach()):.3f}  {means}  samples {rounds * samples_per_round}  "
                     f"{elapsed / 60:.1f} min")
            seen = []
        if time.monotonic() - saved_at > SAVE_EVERY_S:
            save()
            saved_at = time.monotonic()
    save()
    save_module(out / "drafter", head, head.config.to_dict())
    return head


def load_drafter(folder: str | Path, model) -> DraftHead:
    """A saved head (`train_drafter`'s `out/drafter`, or a pipeline's `drafter/`), bound to `model`."""
    return load_module(Path(folder), DraftHead, DraftHeadConfig, "draft head").bind(model)


def front_outputs(head: DraftHead, tokens: torch.Tensor, features: torch.Tensor, rejected: Rejected | None = None,
                  positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The head teacher-forced on `tokens [R, T]` and fused `features [R, T, dim]` (row t
    predicted token t): its inputs and output features `[R, T, dim]` (what its cache holds),
    and its outputs with each position taken as the commit front: without `rejected`, the
    same outputs; with it (drafts rejected at `positions [R, S]`, default every position),
    `[R, S, dim]`, each front query reading its rejected draft and seeing the plain inputs
    before it and itself, as the engine's front query does."""
    R, T = tokens.shape
    P = head.target.config.cls_token_num
    rope = head.target.rope_table(tokens.device)[P:P + T]
    first = head.inputs(tokens, features)
    outputs = head.block(first, rope[None, :, None], None)
    if rejected is None:
        return first, outputs, outputs
    if positions is None:
        positions = torch.arange(T, device=tokens.device).expand(R, -1)
    S = positions.shape[1]
    at = lambda x: x.gather(1, positions if x.dim() == 2 else positions[..., None].expand(-1, -1, x.shape[-1]))  # noqa: E731
    queries = head.inputs(at(tokens), at(features), rejected)
    key_pos = torch.cat([torch.arange(T, device=tokens.device).expand(R, -1), positions], 1)  # [R, T + S]
    plain_key = torch.arange(T + S, device=tokens.device) < T
    own = torch.cat([torch.zeros(S, T, dtype=torch.bool, device=tokens.device), torch.eye(S, dtype=torch.bool, device=tokens.device)], 1)
    sees = (plain_key & (key_pos[:, None, :] < positions[..., None])) | own
    x = torch.cat([first, queries], 1)
    return first, outputs, block_with_queries(head, x, rope[key_pos], attention_bias(sees, x.dtype), S)


def rollout_logits(head: DraftHead, tokens: torch.Tensor, features: torch.Tensor, depth: int,
                   rejected: Rejected | None = None) -> list[torch.Tensor]:
    """Teacher-forced roll-outs of `depth` steps at every position at once, for `tokens [R, T]`
    and fused `features [R, T, dim]` (row t predicted token t).

    Entry k - 1 of the list is float logits `[R, T - 1, V]` whose row j predicts position
    j + 1 as the k-th step of a roll-out: the head was fed its true inputs up to position
    j - k + 1 (the commit front; its query there reads `rejected` when given) and, after it,
    the true tokens with its own features, as a roll-out whose drafts were all accepted is
    fed. Roll-out step r at m takes step r - 1's output at m - 1; it sees the cache up to the
    front and step i's input at front + i - 1 for 1 < i <= r (not the front's query, which
    the engine never commits). Each step runs as one sequence of all the inputs it sees."""
    R, T = tokens.shape
    P = head.target.config.cls_token_num
    rope = head.target.rope_table(tokens.device)[P:P + T]
    pos = torch.arange(T, device=tokens.device)
    first, _, previous = front_outputs(head, tokens, features, rejected)
    result = [head.read_out(previous[:, :-1])]
    rolled = []
    for r in range(2, depth + 1):
        rolled.append(head.inputs(tokens, torch.cat([features[:, :1], previous[:, :-1]], 1)))
        x = torch.cat([first] + rolled, 1)  # pass 0: the cache; pass i: roll-out step i + 1
        key_pass, key_pos = torch.arange(r, device=tokens.device).repeat_interleave(T), pos.repeat(r)
        front = pos[:, None] - r + 1
        sees = ((key_pass == 0) & (key_pos <= front)) | ((key_pass > 0) & (key_pos == front + key_pass))
        previous = block_with_queries(head, x, rope.repeat(r, 1), attention_bias(sees, x.dtype), T)
        result.append(head.read_out(previous[:, :-1]))
    return result


def block_with_queries(head: DraftHead, x: torch.Tensor, rope: torch.Tensor, bias: torch.Tensor, queries: int) -> torch.Tensor:
    """The head's block on keys and values of all inputs `x [R, N, dim]` at rotary `rope
    [N, D/2]` (or `[R, N, D/2]`) and the queries of its last `queries` inputs, under the
    additive `bias [queries, N]` (or `[R, queries, N]`)."""
    rope = rope if rope.dim() == 3 else rope[None]
    bias = bias[:, None] if bias.dim() == 3 else bias[None, None]
    block = head.block
    attn = block.attention
    h = block.attention_norm(x)
    R, N, _ = x.shape
    H, H_kv, D = attn.n_head, attn.n_kv_head, attn.head_dim
    qkv = attn.wqkv(h).view(R, N, H + 2 * H_kv, D)
    q, k = apply_rope(qkv[:, :, :H + H_kv], rope[:, :, None]).transpose(1, 2).split([H, H_kv], dim=1)
    v = qkv[:, :, H + H_kv:].transpose(1, 2)
    out = F.scaled_dot_product_attention(q[:, :, -queries:], k, v, attn_mask=bias, enable_gqa=H != H_kv)
    y = x[:, -queries:] + attn.wo(out.transpose(1, 2).reshape(R, queries, -1))
    return y + block.feed_forward(block.ffn_norm(y))
