"""A small GPT: token and position embeddings, pre-norm blocks of causal self-attention and an MLP: lesson 13.

The same shape as GPT-2 (Radford et al. 2019) and nanoGPT, scaled down to a few hundred thousand parameters
at most, so that one CPU core trains it in seconds. Attention is ``torch.nn.functional.
scaled_dot_product_attention`` with ``is_causal=True``: position t attends to positions 0..t only, so
the logits at t never depend on a later token (the tests check it).

Used in lesson 13 and by ``dpedu.scripts.train_addition``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from dpedu._validate import real, whole

__all__ = ["GPT", "CausalSelfAttention", "Block"]


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention in which each position sees itself and the positions before it."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = nn.Linear(width, 3 * width)  # queries, keys and values in one matmul
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        # (batch, length, 3 * width) -> three (batch, heads, length, width / heads)
        q, k, v = self.qkv(x).view(batch, length, 3, self.heads, width // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))


class Block(nn.Module):
    """x + attention(norm(x)), then x + MLP(norm(x)): the pre-norm residual block of GPT-2."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = CausalSelfAttention(width, heads, dropout)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                                 nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """Next-token logits for every position of a batch of token sequences: (batch, length) -> (batch, length, vocab).

    ``length`` is the longest sequence it takes (its position embeddings); ``width`` must divide by ``heads``.
    Parameters: about ``layers * 12 * width**2`` plus the embeddings (``parameter_count`` says exactly).
    """

    def __init__(self, vocabulary: int, length: int, *, width: int = 64, heads: int = 4, layers: int = 2,
                 dropout: float = 0.0) -> None:
        super().__init__()
        whole("vocabulary", vocabulary, 2)
        whole("length", length)
        whole("heads", heads)
        whole("width", width)
        whole("layers", layers)
        real("dropout", dropout, at_least=0, at_most=0.9)
        if width % heads:
            raise ValueError(f"width must be a multiple of heads, got width={width}, heads={heads}")
        self.length = length
        self.tokens = nn.Embedding(vocabulary, width)
        self.positions = nn.Embedding(length, width)
        self.blocks = nn.Sequential(*(Block(width, heads, dropout) for _ in range(layers)))
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocabulary, bias=False)
        self.apply(_init)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[1] > self.length:
            raise ValueError(f"sequences of {tokens.shape[1]} tokens, longer than the model's length={self.length}")
        x = self.tokens(tokens) + self.positions(torch.arange(tokens.shape[1], device=tokens.device))
        return self.head(self.norm(self.blocks(x)))

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _init(module: nn.Module) -> None:
    """GPT-2's initialisation: normal(0, 0.02) weights, zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)
