"""A TokenModel over steps of K tokens, small enough to enumerate every sequence.

The next step's K tokens are independent given the last two steps (a table of logits),
as a codec LM's K heads are given the past. Its session keeps the contract honestly: a
query sees the step before it only when that step is committed or is an input of the
same call and segment, and otherwise sees "nothing", which changes its logits; an engine
that forgot to commit or fed the wrong context would be caught by the exactness tests.
"""

import torch

from mmspec.core.contracts import GuidedLogits
from mmspec.core.layout import TokenLayout
from mmspec.core.sampling import SamplingConfig, transform


class StepModel:
    def __init__(self, vocab_size=3, tokens_per_step=2, length=3, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.V, self.K, self.T = vocab_size, tokens_per_step, length
        self.steps = vocab_size**tokens_per_step  # step ids; `steps` itself means "nothing seen"
        self.first = torch.randn(tokens_per_step, vocab_size, generator=g) * 1.5
        self.table = torch.randn(self.steps + 1, self.steps, tokens_per_step, vocab_size, generator=g) * 1.5

    def layout(self) -> TokenLayout:
        return TokenLayout.grid((self.T,), self.V, axes=("step",), tokens_per_step=self.K)

    def step_id(self, tokens: torch.Tensor) -> torch.Tensor:
        weights = self.V ** torch.arange(self.K - 1, -1, -1)
        return (tokens * weights).sum(-1)

    def start(self, condition, *, guided: bool, extra_positions: int = 0) -> "StepSession":
        assert not guided
        return StepSession(self, len(condition), self.T + extra_positions)

    def sequence_probs(self, sequences: torch.Tensor, sampling: SamplingConfig) -> torch.Tensor:
        """float64 `[N]`: the probability of each of `sequences [N, T, K]`."""
        N = len(sequences)
        ids = self.step_id(sequences)
        prob = transform(self.first.expand(N, self.K, self.V), sampling).double()
        total = prob.gather(-1, sequences[:, 0, :, None])[..., 0].prod(-1)
        for t in range(1, self.T):
            before = ids[:, t - 2] if t >= 2 else torch.full((N,), self.steps)
            p = transform(self.table[before, ids[:, t - 1]], sampling).double()
            total = total * p.gather(-1, sequences[:, t, :, None])[..., 0].prod(-1)
        return total


class StepSession:
    def __init__(self, model: StepModel, batch_size: int, slots: int):
        self.model, self.batch_size, self.guided, self.prompt_tokens = model, batch_size, False, None
        self.written = torch.full((batch_size, slots), model.steps)
        self.committed = torch.zeros(batch_size, slots, dtype=torch.bool)

    def steps(self, logits: torch.Tensor) -> GuidedLogits:
        """`[B, n, K, V]`, or `[B, n, V]` with one token per step (the session contract)."""
        return GuidedLogits(logits[..., 0, :] if self.model.K == 1 else logits)

    def prefill_logits(self) -> GuidedLogits:
        m = self.model
        return self.steps(m.first.expand(self.batch_size, 1, m.K, m.V).clone())

    def forward(self, tokens, positions, segments=None) -> GuidedLogits:
        m = self.model
        tokens = tokens[..., None] if m.K == 1 else tokens
        assert tokens.shape == (*positions.shape, m.K)
        ids = m.step_id(tokens)  # [B, n]
        segments = torch.zeros_like(positions) if segments is None else segments
        rows = torch.arange(self.batch_size)[:, None]
        self.written[rows, positions] = ids
        before = positions - 1
        seen = torch.where(self.committed[rows, before.clamp(min=0)], self.written[rows, before.clamp(min=0)], m.steps)
        same_call = (positions[:, None, :] == before[:, :, None]) & (segments[:, None, :] == segments[:, :, None])
        from_call = torch.where(same_call, ids[:, None, :], -1).amax(-1)  # the input at position - 1, if fed
        seen = torch.where(from_call >= 0, from_call, seen)
        seen = torch.where(before >= 0, seen, m.steps)
        return self.steps(m.table[seen, ids])

    def commit(self, positions, mask) -> None:
        rows = torch.arange(self.batch_size)[:, None].expand_as(positions)
        self.committed[rows[mask], positions[mask]] = True


def all_step_sequences(model: StepModel) -> torch.Tensor:
    """Long `[(V^K)^T, T, K]`: every sequence of steps, in the order of `step_counts`."""
    ids = torch.arange(model.steps ** model.T)
    digits = torch.stack([(ids // model.steps ** (model.T - 1 - t)) % model.steps for t in range(model.T)], 1)
    return torch.stack([(digits // model.V ** (model.K - 1 - k)) % model.V for k in range(model.K)], -1)


def step_counts(model: StepModel, samples: torch.Tensor) -> torch.Tensor:
    """Counts `[(V^K)^T]` of sampled sequences `[N, T, K]`."""
    weights = model.steps ** torch.arange(model.T - 1, -1, -1)
    return torch.bincount((model.step_id(samples) * weights).sum(-1), minlength=model.steps**model.T)
