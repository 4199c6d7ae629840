"""Tiny models whose best checkpoint is known not to be the newest: one weight `w` (from
0) learns y = 2x, while the validation data is y = 0.5x, so the validation loss is lowest
when `w` passes 0.5, early in training, and rises after: a keepLast that is not told
which checkpoint is best deletes it."""

from typing import Any

import torch
from torch.utils.data import Dataset

TRAIN_SLOPE = 2.0
VALIDATION_SLOPE = 0.5


class Pairs(Dataset[dict[str, torch.Tensor]]):
    """x in [-1, 1], y = slope * x, as dicts of tensors (what Hugging Face's collator and
    a plain DataLoader both take)."""

    def __init__(self, slope: float, n: int = 16) -> None:
        self.x = torch.linspace(-1, 1, n).unsqueeze(1)
        self.y = slope * self.x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"x": self.x[i], "labels": self.y[i]}


class Slope(torch.nn.Module):
    """y = w * x, w from zero."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, Any]:
        out = self.w * x
        if labels is None:
            return {"logits": out}
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}
