"""The small model's text side: a word-level tokenizer and a bag-of-words embedding, trained from scratch.

The vocabulary lives in the encoder's config, so the encoder alone turns prompts into hidden states (no
`transformers` tokenizer to load). Unknown words map to <unk>.

Why a bag of words: the grammar's meaning sits in which words occur, not where ("a red circle moving left" and
"a red circle going left on white" say the same). Each word's state is its own embedding, so the denoiser's
pooled summary is the same function of each word wherever it stands, which is what lets the model draw
combinations it never saw in training.
"""

from __future__ import annotations

import torch
from diffusers import ConfigMixin, ModelMixin
from diffusers.configuration_utils import register_to_config
from torch import nn

from studio.grammar import words_of

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIAL_TOKENS = 4


class OmniTextEncoder(ModelMixin, ConfigMixin):
    """Prompts -> per-token hidden states (B, L, dim) and a mask (B, L) of real tokens."""

    @register_to_config
    def __init__(self, vocab: list[str] | tuple[str, ...] = (), dim: int = 64, max_length: int = 16) -> None:
        super().__init__()
        self.word_to_id = {word: i + SPECIAL_TOKENS for i, word in enumerate(vocab)}
        self.embed = nn.Embedding(len(vocab) + SPECIAL_TOKENS, dim)
        self.norm = nn.LayerNorm(dim)
        nn.init.normal_(self.embed.weight, std=0.5)

    def tokenize(self, prompts: list[str], device: torch.device | str | None = None):
        """(ids, mask): BOS words EOS, padded to the longest prompt (at most max_length tokens)."""
        limit = self.config.max_length
        rows = [[BOS, *[self.word_to_id.get(w, UNK) for w in words_of(p or "")][: limit - 2], EOS] for p in prompts]
        length = max(len(row) for row in rows)
        ids = torch.full((len(rows), length), PAD, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        return ids.to(device), (ids != PAD).to(device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.norm(self.embed(input_ids))

    def encode(self, prompts: list[str], device: torch.device | str | None = None):
        ids, mask = self.tokenize(prompts, device or self.device)
        return self(ids, mask), mask

    def known_words(self, prompt: str) -> tuple[list[str], list[str]]:
        """(words the model knows, words it does not) of a prompt."""
        words = words_of(prompt or "")
        return [w for w in words if w in self.word_to_id], [w for w in words if w not in self.word_to_id]
