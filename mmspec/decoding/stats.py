"""DecodeStats: what one decoding call cost and how its tokens were committed."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DecodeStats:
    """Costs and commit order of one `generate` call over a batch.

    Attributes:
        method (`str`): the decoding that ran ("ar", "mc-sjd", ...).
        exact (`bool`): whether the method samples exactly the model's distribution.
        forward_passes (`int`): model forwards, the prefill included; CFG halves run in
            the same forward and count once.
        tokens_committed (`int`): tokens committed over the batch (forced ones included).
        wall_time_s (`float`): seconds from prefill to the last commit.
        commit_iteration (`torch.Tensor`): long `[B, T]`, the forward after which each
            step was committed (0 = the prefill, and after a sequence's end); the picture of
            a decoding order.
        lengths (`torch.Tensor`, *optional*): long `[B]`, each sequence's length in steps,
            its stop token included (T for every sequence when none stops).
        choices (`dict`, *optional*): auto only: forwards per window ("windows", 0 = an AR
            step), per branch setting and per first-draft drafter.
        cost_curve (`dict`, *optional*): auto only: the forward's cost by inputs per row,
            relative to one input, as measured on this device (`mmspec.decoding.auto.cost_curve`).
        device (`str`): the device profile the call ran under (`DeviceProfile.describe`):
            "cuda (Triton verification)", "cpu (PyTorch verification)", or a device without a
            profile of its own, named as such.
    """

    method: str
    exact: bool
    forward_passes: int
    tokens_committed: int
    wall_time_s: float
    commit_iteration: torch.Tensor = field(repr=False)
    lengths: torch.Tensor | None = field(default=None, repr=False)
    choices: dict | None = field(default=None, repr=False)
    cost_curve: dict | None = field(default=None, repr=False)
    device: str = ""

    def __post_init__(self):
        if self.lengths is None:
            B, T = self.commit_iteration.shape
            self.lengths = torch.full((B,), T, dtype=torch.long, device=self.commit_iteration.device)

    @property
    def batch_size(self) -> int:
        return self.commit_iteration.shape[0]

    @property
    def forward_passes_per_sample(self) -> torch.Tensor:
        """long `[B]`: forwards each sequence needed (to its last commit), prefill included.
        A batch runs until its slowest sequence is done; this is what each one cost."""
        return self.commit_iteration.amax(-1) + 1

    @property
    def tokens_per_forward(self) -> float:
        """Mean tokens committed per forward pass and sequence (K for AR over K-token steps)."""
        return self.tokens_committed / self.batch_size / max(self.forward_passes, 1)

    def per_sample(self) -> list["DecodeStats"]:
        """One DecodeStats per sequence: its own forwards and length; the batch's wall time."""
        per_step = self.tokens_committed // max(int(self.lengths.sum()), 1)  # K
        return [
            DecodeStats(self.method, self.exact, int(f), int(n) * per_step, self.wall_time_s, row[None], n[None],
                        self.choices, self.cost_curve, self.device)
            for f, row, n in zip(self.forward_passes_per_sample, self.commit_iteration, self.lengths)
        ]

    def to_dict(self) -> dict:
        return {
            "method": self.method,
            "exact": self.exact,
            "forward_passes": self.forward_passes,
            "tokens_committed": self.tokens_committed,
            "tokens_per_forward": self.tokens_per_forward,
            "forward_passes_per_sample": self.forward_passes_per_sample.tolist(),
            "lengths": self.lengths.tolist(),
            "wall_time_s": self.wall_time_s,
            "device": self.device,
            **({"choices": self.choices, "cost_curve": self.cost_curve} if self.choices is not None else {}),
        }
