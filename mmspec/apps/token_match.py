"""The line the app shows under AR's result and the accelerated ones from the same seed:
which are token-identical to AR's, and how far the others differ, from the tokens
themselves (not from what a method promises)."""

from __future__ import annotations

import torch


def differing(tokens: torch.Tensor, ar_tokens: torch.Tensor) -> str | None:
    """None when `tokens` equal AR's; else how they differ ("5 of 256 tokens", "412 tokens
    against AR's 380")."""
    if tokens.shape == ar_tokens.shape:
        n = int((tokens != ar_tokens).sum())
        return None if n == 0 else f"{n} of {ar_tokens.numel()} tokens"
    return f"{tokens.numel()} tokens against AR's {ar_tokens.numel()}"


def same_tokens_line(ar_tokens: torch.Tensor, results: list[tuple[str, torch.Tensor]]) -> str:
    """One Markdown line over `results` ((name, tokens) of each accelerated decode from AR's
    seed): the token-identical ones, then the others with how many tokens differ. Names are
    code spans: a method's name may hold commas ("keyed, window 8").

    Example:
        >>> same_tokens_line(torch.tensor([1, 2, 3]), [("auto", torch.tensor([1, 2, 3])), ("sjd", torch.tensor([1, 5, 3]))])
        '**Token-identical to AR:** `auto`. **Other tokens than AR:** `sjd` (1 of 3 tokens differ).'
    """
    same, other = [], []
    for name, tokens in results:
        diff = differing(tokens, ar_tokens)
        if diff is None:
            same.append(f"`{name}`")
        else:
            other.append(f"`{name}` ({diff} differ)")
    parts = ([f"**Token-identical to AR:** {', '.join(same)}."] if same else []) + \
        ([f"**Other tokens than AR:** {', '.join(other)}."] if other else [])
    return " ".join(parts)
